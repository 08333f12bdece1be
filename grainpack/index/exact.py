"""The exact order: the specifications' document and window orders, bit for bit (pure).

Epoch ``e`` of a source visits its documents in ``global_document_order(n, seed, e)`` (or its
windows in the window loader's permutation): ``O(N)`` memory per source and process. Beside
:class:`~grainpack.index.blocked.BlockedOrder`, the order that scales; both are a
:class:`DocumentOrder`, what the pipeline calls on ``PipelineConfig.order``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from grainpack.index.orders import SequenceSelector
from grainpack.index.stream import EpochRows, SourceRows

__all__ = ["DocumentOrder", "ExactOrder"]

# Bytes per document the exact order holds at its peak, per source and process: int64
# lengths (8), and while an epoch is planned its int64 permutation (8), int64 bounds (8),
# uint32 ids (4) and the generator's scratch (33 measured at 10**7 documents); a selector
# copies and hashes the order (about 24 more). Windows unit: lengths and the identity bounds
# (16), plus 8 per window of the epoch's permutation.
EXACT_BYTES_PER_DOCUMENT, SELECTOR_BYTES_PER_DOCUMENT = 34, 24


@runtime_checkable
class DocumentOrder(Protocol):
    """How each epoch orders a source's documents (or windows): ``PipelineConfig.order``.

    Attributes:
      counts_in_state: iterator states hold the per-source counts of the slots before the
        step (state version 2), so that a restore does not count every earlier slot.
    """

    counts_in_state: ClassVar[bool]

    def description(self) -> str | dict[str, Any]:
        """The order as a config file writes it (JSON)."""
        ...

    def fingerprint(self) -> dict[str, Any]:
        """What the order adds to the pipeline's description (its fingerprint)."""
        ...

    def row_stream(
        self,
        corpus: Any,
        *,
        unit: str,
        block: int,
        seed: int,
        boundary: bool,
        selector: SequenceSelector | None,
        block_tokens: Callable[[int], np.ndarray] | None,
        name: str | None = None,
    ) -> EpochRows:
        """The endless row stream of source ``name`` (``corpus``: its lengths and offsets;
        ``block_tokens(block_docs)``: its per-block token totals, read only if needed)."""
        ...

    def index_bytes(self, corpus: Any, *, unit: str, block: int, selector: bool) -> int:
        """Peak bytes of one source's index in one process (``selector``: one is set)."""
        ...


@dataclasses.dataclass(frozen=True)
class ExactOrder:
    """The specifications' orders, bit for bit: ``O(N)`` memory per source and process.

    ``PipelineConfig(order="exact")`` (the default) stands for ``ExactOrder()``.

    Example:
      >>> class Corpus:  # two documents of 3 and 4 tokens
      ...     lengths = np.array([3, 4])
      >>> rows = ExactOrder().row_stream(Corpus(), unit="documents", block=3, seed=0,
      ...                                boundary=True, selector=None, block_tokens=None)
      >>> rows.rows_per_epoch, ExactOrder().fingerprint()  # 3 + 1 + 4 tokens: 2 rows of 4
      (2, {})
    """

    counts_in_state: ClassVar[bool] = False
    # what dataclasses.asdict writes of it (PipelineConfig.from_dict reads it back)
    kind: str = dataclasses.field(default="exact", init=False, repr=False)

    def description(self) -> str:
        """``"exact"``: the order as a config file writes it."""
        return "exact"

    def fingerprint(self) -> dict[str, Any]:
        """Nothing: the exact order is the default, so fingerprints of checkpoints saved
        before orders existed stay valid."""
        return {}

    def row_stream(
        self,
        corpus: Any,
        *,
        unit: str,
        block: int,
        seed: int,
        boundary: bool,
        selector: SequenceSelector | None,
        block_tokens: Callable[[int], np.ndarray] | None,
        name: str | None = None,
    ) -> SourceRows:
        """The source's :class:`~grainpack.index.stream.SourceRows` (from its ``lengths``)."""
        rows = SourceRows(
            corpus.lengths, unit=unit, block=block, seed=seed, boundary=boundary, selector=selector
        )
        rows.name = name
        return rows

    def index_bytes(self, corpus: Any, *, unit: str, block: int, selector: bool) -> int:
        """Peak bytes of the source's index: ``O(N)`` (see ``EXACT_BYTES_PER_DOCUMENT``)."""
        if unit == "windows":
            return 16 * len(corpus) + 8 * (corpus.num_tokens // (block + 1))
        extra = SELECTOR_BYTES_PER_DOCUMENT if selector else 0
        return (EXACT_BYTES_PER_DOCUMENT + extra) * len(corpus)
