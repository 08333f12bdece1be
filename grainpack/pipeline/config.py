"""``PipelineConfig``: everything that decides which tokens a slot yields, validated once."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any, Literal

from grainpack.checks import check_float, check_int
from grainpack.corpus.native import MAX_TOKEN_ID
from grainpack.curriculum.protocols import BindsToSource, describe_selector
from grainpack.index.blocked import BlockedOrder
from grainpack.index.orders import SequenceSelector
from grainpack.index.weights import content_probabilities

Unit = Literal["documents", "windows"]
Layout = Literal["full", "compact"]


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """A grainpack pipeline: sources, row shape, batch size, seed and mixture.

    Attributes:
      sources: name -> corpus path; the mapping order is the source order (source ``j`` is
        seeded ``seed + j``). One entry means no mixing.
      block: model sequence length; every row holds ``block + 1`` tokens.
      global_batch_size: rows per global batch (all processes together).
      seed: non-negative int.
      weights: name -> probability of a slot choosing that source (token share); equal
        when omitted. Same names as ``sources``; must sum to 1.
      premiums: content mode instead of ``weights``: name -> tokens that source needs per
        unit of content; probabilities are then ``premium / sum(premiums)`` (see
        :func:`grainpack.content_probabilities`).
      unit: ``"documents"`` (shuffled documents, concatenated and chunked, as
        ``pack_documents``) or ``"windows"`` (permuted fixed windows of the stored token
        stream, as ``PackedStream``).
      boundary_id: documents unit: token inserted between consecutive documents.
      pad_id: token of padding positions (the last row of a documents epoch).
      sequence_selector: documents unit: curriculum hook ``(order, seed, epoch) -> order``.
        Must be picklable (a module-level function or a small object) and have a stable
        ``repr`` (it is part of the config fingerprint). A selector with a
        ``bind(name, source)`` method is bound to each source before use (the ready-made
        ones in :mod:`grainpack.curriculum` read document lengths that way).
      provenance: also emit, per row, ``source`` and ``epoch``, and per segment of the row's
        ``block + 1`` tokens (index ``segment_id - 1``) ``segment_document`` and
        ``segment_offset`` (the document id and the offset of the segment's first token in
        it; -1 past the row's last segment). A segment made of the row's last token only (a
        target, after a boundary token) has an entry but no position in ``segment_ids``.
        Does not change any token (not part of the fingerprint).
      order: ``"exact"`` (the specification's orders, bit for bit: ``O(N)`` memory per
        source and process) or a :class:`~grainpack.BlockedOrder` (blocks of documents
        permuted by a keyed bijection, documents permuted inside windows of blocks:
        ``O(N / C + K * C)``). See the README's "Scale" section.
      layout: ``"full"``: batches hold the five int32 model arrays. ``"compact"``: batches
        hold the rows in the corpus dtype plus a few bytes per row (``tokens``,
        ``segment_starts``, ``filled``), expanded on the accelerator by
        :func:`grainpack.expand` into exactly the full layout's arrays. Does not change
        any token (not part of the fingerprint: a checkpoint restores in either layout).

    Example:
      >>> cfg = PipelineConfig(sources={"en": "/data/en", "fr": "/data/fr"}, block=2048,
      ...                      global_batch_size=256, weights={"en": 0.7, "fr": 0.3})
      >>> cfg.probabilities
      (0.7, 0.3)
    """

    sources: Mapping[str, str | os.PathLike[str]]
    block: int
    global_batch_size: int
    seed: int = 0
    weights: Mapping[str, float] | None = None
    premiums: Mapping[str, float] | None = None
    unit: Unit = "documents"
    boundary_id: int | None = None
    pad_id: int = 0
    sequence_selector: SequenceSelector | None = None
    provenance: bool = False
    order: Literal["exact"] | BlockedOrder = "exact"
    layout: Layout = "full"

    def __post_init__(self) -> None:
        if not isinstance(self.sources, Mapping) or not self.sources:
            raise TypeError(
                f"sources must be a non-empty mapping name -> corpus path; got {self.sources!r}"
            )
        for name, path in self.sources.items():
            if not isinstance(name, str) or not isinstance(path, str | os.PathLike):
                raise TypeError(f"sources must map str -> path; got {name!r}: {path!r}")
        object.__setattr__(self, "sources", {k: os.fspath(v) for k, v in self.sources.items()})
        check_int("block", self.block, minimum=1)
        check_int("global_batch_size", self.global_batch_size, minimum=1)
        check_int("seed", self.seed, minimum=0)
        for token in ("pad_id", "boundary_id"):
            value = getattr(self, token)
            if value is not None and check_int(token, value, minimum=0) > MAX_TOKEN_ID:
                raise ValueError(
                    f"{token} must be < 2**31 (batches hold int32 token ids); got {token}={value}"
                )
        if self.layout not in ("full", "compact"):
            raise ValueError(
                f"layout must be 'full' (five int32 arrays) or 'compact' (tokens expanded on "
                f"the accelerator by grainpack.expand); got {self.layout!r}"
            )
        if self.unit not in ("documents", "windows"):
            raise ValueError(f"unit must be 'documents' or 'windows'; got {self.unit!r}")
        if self.order != "exact" and not isinstance(self.order, BlockedOrder):
            raise TypeError(
                f"order must be 'exact' or a gp.BlockedOrder(block_docs=..., window_blocks=...); "
                f"got {self.order!r}"
            )
        if self.unit == "windows" and (
            self.boundary_id is not None or self.sequence_selector is not None
        ):
            raise ValueError(
                "boundary_id and sequence_selector apply to unit='documents' only: windows "
                "are cut from the stored token stream; drop them or use unit='documents'"
            )
        selector = self.sequence_selector
        if selector is not None and not (callable(selector) or isinstance(selector, BindsToSource)):
            raise TypeError(
                "sequence_selector must be callable (order, seed, epoch) -> order or bind to "
                f"sources (gp.PerSource); got {selector!r}"
            )
        if self.weights is not None and self.premiums is not None:
            raise ValueError("give either weights (token mode) or premiums (content mode)")
        for field in ("weights", "premiums"):
            value = getattr(self, field)
            if value is not None:
                object.__setattr__(self, field, self._per_source(field, value))
        object.__setattr__(self, "_probabilities", self._compute_probabilities())

    def _per_source(self, field: str, value: Any) -> dict[str, float]:
        if not isinstance(value, Mapping):
            raise TypeError(f"{field} must be a mapping name -> number; got {value!r}")
        if set(value) != set(self.sources):
            raise ValueError(
                f"{field} must name exactly the sources {list(self.sources)}; got {list(value)}"
            )
        return {
            name: check_float(
                f"{field}[{name!r}]", value[name], 0.0, math.inf, fix="drop a source instead"
            )
            for name in self.sources
        }

    def _compute_probabilities(self) -> tuple[float, ...]:
        n = len(self.sources)
        if self.premiums is not None:
            return content_probabilities([self.premiums[k] for k in self.sources])
        if self.weights is None:
            return tuple([1.0 / n] * n)
        probs = tuple(self.weights[k] for k in self.sources)
        if abs(sum(probs) - 1.0) > 1e-6:
            raise ValueError(
                f"weights must sum to 1 (within 1e-6); got {dict(self.weights)} summing to "
                f"{sum(probs)!r}: divide each weight by their sum"
            )
        return probs

    @property
    def probabilities(self) -> tuple[float, ...]:
        """Probability of a slot choosing each source, in source order."""
        return self._probabilities  # type: ignore[attr-defined]

    @property
    def blocked(self) -> BlockedOrder | None:
        """The blocked order, or ``None`` for the exact order."""
        return self.order if isinstance(self.order, BlockedOrder) else None

    def description(self) -> dict[str, Any]:
        """Everything that determines the tokens, as JSON-able data (paths excluded; the
        exact order adds nothing, so fingerprints of saved checkpoints stay valid)."""
        selector = self.sequence_selector
        if selector is not None:
            # A function's name is quoted, an object's repr is not (fingerprints of saved
            # checkpoints depend on this text).
            text = describe_selector(selector, allow_local=True)
            selector = repr(text) if hasattr(selector, "__qualname__") else text
        return {
            "sources": list(self.sources),
            "block": self.block,
            "global_batch_size": self.global_batch_size,
            "seed": self.seed,
            "probabilities": list(self.probabilities),
            "unit": self.unit,
            "boundary_id": self.boundary_id,
            "pad_id": self.pad_id,
            "sequence_selector": selector,
        } | ({} if self.blocked is None else {"order": self.blocked.description()})
