# Over 400 lines, one module: one order: the bijection, its inverse and the counting of rows are
# one proof.
"""The scalable order: blocks of stored documents permuted by a keyed bijection, documents
permuted inside windows of blocks (pure: numpy and the standard library only).

Epoch ``e`` of a source of ``N`` documents, with ``C`` documents per block and ``K`` blocks
per window (:class:`BlockedOrder`):

1. Block ``b`` holds the stored documents ``[b*C, min((b+1)*C, N))``; ``M = ceil(N / C)``.
2. Position ``i`` of the epoch's block order holds block ``feistel(i, M, key(seed, e))``: a
   keyed bijection on ``[0, M)`` (a Feistel network with cycle walking), so any position is
   found in O(1) time and memory.
3. Window ``w`` holds positions ``[w*K, (w+1)*K)``. Its documents, in ascending id order,
   are permuted by ``default_rng([seed, e, w, 0xB1D0])``.
4. The documents of windows ``0, 1, ...`` are concatenated with a boundary token after each
   but the epoch's last and cut into rows of ``block + 1`` tokens: the same stream rule, row
   count and padding as the exact order.

Rows are located by a binary search over the ``M / K + 1`` window prefix sums of the epoch
(from per-block token totals written with the corpus), then ``O(K*C)`` work in one window.
Nothing is ``O(N)``: per process an epoch costs ``O(M)`` time and ``O(M / K)`` memory, a
window ``O(K*C)``. Once rows of a window are asked for, the next window (after an epoch's
last window, the next epoch's plan and first window) is planned on a background thread:
crossing windows and epochs does not stall ``next()``, and the planning does not coincide
with the crossing (a corpus on object storage fetches the next window's tokens meanwhile,
a whole window ahead).

The windows unit (``unit="windows"``) visits the ``tokens // (block + 1)`` windows of the
stored stream in the order of the same bijection instead of a materialized permutation.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from grainpack.index.checks import check_int
from grainpack.index.hashing import MASK64, splitmix64, splitmix64_inplace
from grainpack.index.orders import check_selected_order
from grainpack.index.plancache import PlanCache
from grainpack.index.stream import EpochRows, Spans

__all__ = [
    "BLOCK_ORDER_STREAM",
    "WINDOWS_UNIT_STREAM",
    "WINDOW_DOCUMENTS_STREAM",
    "BlockSelector",
    "BlockedOrder",
    "BlockedRows",
    "DocumentOffsets",
    "feistel",
    "mix_key",
]

logger = logging.getLogger(__name__)

# Named streams (the last word of every key): block order, documents inside a window, and the
# windows unit's window order.
BLOCK_ORDER_STREAM = 0xB10C
WINDOW_DOCUMENTS_STREAM = 0xB1D0
WINDOWS_UNIT_STREAM = 0xB1A5
FEISTEL_ROUNDS = 6
_CHUNK = 1 << 16  # values encrypted at once: the temporaries stay in cache (3x faster than 2**20)
_CACHED_EPOCHS, _CACHED_WINDOWS = 3, 3  # the window before, the current one, the next one


def mix_key(*words: int) -> int:
    """A 64-bit key from integers, mixed by chained splitmix64 (never added).

    Example:
        >>> mix_key(1, 0) != mix_key(0, 1)
        True
    """
    key = 0
    for word in words:
        key = splitmix64(key ^ (int(word) & MASK64))
    return key


def feistel(x: np.ndarray, size: int, key: int) -> np.ndarray:
    """A keyed bijection on ``[0, size)``, evaluated elementwise (vectorized).

    A balanced Feistel network of ``FEISTEL_ROUNDS`` rounds (splitmix64 round function, one
    round key per round derived from ``key``) on the smallest even number of bits that
    covers ``size``, with cycle walking: a value that lands outside ``[0, size)`` is
    encrypted again until it lands inside, which keeps the map a bijection of the range.

    Args:
        x: integers in ``[0, size)``.
        size: the domain size, >= 1.
        key: any int (taken modulo 2**64).

    Returns:
        int64 array of the images, same shape as ``x``.

    Example:
        >>> sorted(feistel(np.arange(10), 10, key=7).tolist())
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    """
    size = check_int("size", size, minimum=1)
    arr = np.asarray(x, dtype=np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= size):
        raise ValueError(f"feistel inputs must lie in [0, {size}); got {arr.min()}..{arr.max()}")
    if size == 1:
        return np.zeros(arr.shape, dtype=np.int64)
    half = ((size - 1).bit_length() + 1) // 2
    keys = [np.uint64(mix_key(key, r)) for r in range(FEISTEL_ROUNDS)]
    flat = arr.reshape(-1)
    out = np.empty(flat.shape, dtype=np.int64)
    for lo in range(0, len(flat), _CHUNK):
        y = _encrypt(flat[lo : lo + _CHUNK].astype(np.uint64), half, keys)
        outside = np.flatnonzero(y >= size)
        while outside.size:  # cycle walking: the domain is < 4 * size, so a few passes
            y[outside] = _encrypt(y[outside], half, keys)
            outside = outside[y[outside] >= size]
        out[lo : lo + _CHUNK] = y
    return out.reshape(arr.shape)


def _encrypt(x: np.ndarray, half: int, keys: list[np.uint64]) -> np.ndarray:
    shift, mask = np.uint64(half), np.uint64((1 << half) - 1)
    left, right = x >> shift, x & mask
    tmp = np.empty_like(x)
    for k in keys:
        f = splitmix64_inplace(right ^ k, tmp)
        f &= mask
        f ^= left
        left, right = right, f
    return (left << shift) | right


MAX_BLOCK_PARAMETER = 1 << 40  # block_docs and window_blocks: int64 products stay exact


@dataclasses.dataclass(frozen=True)
class BlockedOrder:
    """The scalable document order (see :mod:`grainpack.index.blocked`).

    Attributes:
      block_docs: ``C``, stored documents per block. The per-epoch cost is
        ``O(num_documents / C)``; multiples of the corpus summary's block (256 for corpora
        written by grainpack) read the totals stored with the corpus, other values compute
        them once per machine.
      window_blocks: ``K``, blocks per window; a window's ``K * C`` documents are fully
        permuted, and it holds ``O(K * C)`` memory while in use.

    Example:
      >>> BlockedOrder(block_docs=4096, window_blocks=256).description()
      {'kind': 'blocked', 'block_docs': 4096, 'window_blocks': 256}
    """

    block_docs: int = 4096
    window_blocks: int = 256

    def __post_init__(self) -> None:
        for name in ("block_docs", "window_blocks"):  # numpy integers are stored as ints
            value = check_int(name, getattr(self, name), minimum=1)
            if value > MAX_BLOCK_PARAMETER:  # beyond any corpus; int64 index math overflows
                raise ValueError(
                    f"{name} must be <= 2**40 (a block or window larger than any corpus is "
                    f"the whole corpus: 2**40 means the same), got {name}={value}"
                )
            object.__setattr__(self, name, value)

    def description(self) -> dict[str, Any]:
        """JSON-able identity (part of the pipeline fingerprint)."""
        return {
            "kind": "blocked",
            "block_docs": self.block_docs,
            "window_blocks": self.window_blocks,
        }

    # -- the DocumentOrder interface (grainpack.index.exact), what the pipeline calls --

    counts_in_state: ClassVar[bool] = True  # a restore at a late step counts no earlier slot

    def fingerprint(self) -> dict[str, Any]:
        """What the order adds to the pipeline's description: ``{"order": description}``."""
        return {"order": self.description()}

    def row_stream(
        self,
        corpus: DocumentOffsets,
        *,
        unit: str,
        block: int,
        seed: int,
        boundary: bool,
        selector: Any,
        block_tokens: Callable[[int], np.ndarray] | None,
        name: str | None = None,
    ) -> BlockedRows:
        """The source's :class:`BlockedRows`. A ``selector`` must decide per block (have a
        ``for_blocks(block_docs)`` method); without one, the documents unit reads the
        corpus's per-block totals, ``block_tokens(block_docs)``.

        Raises:
          TypeError: the selector cannot decide per block.
        """
        if selector is not None:
            for_blocks = getattr(selector, "for_blocks", None)
            if for_blocks is None:
                raise TypeError(
                    "order=BlockedOrder needs a selector whose kept tokens per block are known "
                    "without reading documents (a gp.curriculum.LengthBuckets, "
                    "gp.curriculum.PerSource of them, or your own with a for_blocks(block_docs) "
                    "method returning a "
                    f"grainpack.index.blocked.BlockSelector); source {name!r} has "
                    f"{selector!r}. Use order='exact' for arbitrary per-document selectors"
                )
            selector = for_blocks(self.block_docs)
        totals = None
        if unit == "documents" and selector is None and block_tokens is not None:
            totals = block_tokens(self.block_docs)
        rows = BlockedRows(
            corpus,
            order=self,
            unit=unit,
            block=block,
            seed=seed,
            boundary=boundary,
            selector=selector,
            block_tokens=totals,
        )
        rows.name = name
        return rows

    def index_bytes(self, corpus: DocumentOffsets, *, unit: str, block: int, selector: bool) -> int:
        """0: the blocked order's memory does not grow with the corpus beyond ``O(N / C)``."""
        return 0


class DocumentOffsets(Protocol):
    """What the blocked order reads of a corpus (``TokenShardSource`` is one): document
    offsets of contiguous runs and of single documents, which document holds a position."""

    @property
    def num_tokens(self) -> int: ...

    def __len__(self) -> int: ...

    def offsets_between(self, first: int, stop: int) -> np.ndarray: ...

    def document_offsets(self, documents: np.ndarray) -> np.ndarray: ...

    def documents_at(self, positions: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class BlockSelector(Protocol):
    """A curriculum selector usable with :class:`BlockedOrder`.

    ``__call__(order, seed, epoch)`` keeps a subset of the documents it is given (the
    per-document, pure-function contract of every selector; the blocked order calls it on
    each window's documents), and ``block_totals(seed, epoch)`` returns, without reading
    documents, the int64 ``(kept tokens, kept documents)`` of every block of
    ``block_docs`` documents: exactly what the calls keep. Rows per epoch then follow from
    the totals, so a late step never replays earlier epochs.
    """

    block_docs: int

    def __call__(self, order: np.ndarray, seed: int, epoch: int) -> np.ndarray: ...

    def block_totals(self, seed: int, epoch: int) -> tuple[np.ndarray, np.ndarray]: ...


@dataclasses.dataclass(frozen=True)
class _Epoch:
    """One epoch of the blocked documents order: window prefix sums and the last window."""

    prefix: np.ndarray  # W + 1 stream positions: window w is [prefix[w], prefix[w + 1])
    last_window: int  # the window holding the epoch's last document (no boundary after it)

    @property
    def total(self) -> int:
        return int(self.prefix[-1])


@dataclasses.dataclass(frozen=True)
class _Window:
    """The documents of one window in stream order and their stream bounds (12 bytes per
    document): a document's length is its extent, less its boundary token."""

    documents: np.ndarray
    bounds: np.ndarray  # absolute epoch stream positions, len(documents) + 1
    boundary: bool  # a boundary token after every document
    last: bool  # the window ends the epoch (no boundary after its last document)

    def lengths_at(self, k: np.ndarray) -> np.ndarray:
        lengths = self.bounds[k + 1] - self.bounds[k]
        if self.boundary:
            lengths -= (k < len(self.bounds) - 2) | (not self.last)
        return lengths


_executor: concurrent.futures.ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _prefetcher() -> concurrent.futures.ThreadPoolExecutor:
    """One background thread per process plans windows and epochs ahead of use."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(1, "grainpack-plan-ahead")
        return _executor


class BlockedRows(EpochRows):
    """The endless row stream of one source in the blocked order; the interface of
    :class:`~grainpack.index.stream.SourceRows` (occurrence -> (epoch, row) -> spans).

    Args:
      corpus: the source's document offsets (read from its maps).
      order: ``C`` and ``K``.
      unit: ``"documents"`` or ``"windows"``.
      block: model sequence length; rows hold ``block + 1`` tokens.
      seed: this source's seed (the pipeline passes ``seed + j`` for source ``j``).
      boundary: documents unit only: a boundary token between consecutive documents.
      selector: documents unit only: a :class:`BlockSelector`.
      block_tokens: documents unit without a selector: int64 tokens of every block of
        ``order.block_docs`` documents (``ceil(N / C)`` values; from
        :mod:`grainpack.corpus.summary`).
      plan_ahead: plan the next window and epoch on a background thread.

    Example:
      >>> class Corpus:  # 10 documents of 3 tokens
      ...     num_tokens, offsets = 30, np.arange(0, 31, 3)
      ...     def __len__(self): return 10
      ...     def offsets_between(self, a, b): return self.offsets[a : b + 1]
      >>> rows = BlockedRows(Corpus(), order=BlockedOrder(2, 2), unit="documents", block=5,
      ...                    seed=0, block_tokens=np.full(5, 6))
      >>> rows.rows_per_epoch, int(rows.spans(0, np.arange(5)).length.sum())
      (5, 30)
    """

    def __init__(
        self,
        corpus: DocumentOffsets,
        *,
        order: BlockedOrder,
        unit: str,
        block: int,
        seed: int,
        boundary: bool = False,
        selector: BlockSelector | None = None,
        block_tokens: np.ndarray | None = None,
        plan_ahead: bool = True,
    ) -> None:
        self.corpus, self.order, self.unit = corpus, order, unit
        self.block, self.seed, self.boundary, self.selector = block, seed, boundary, selector
        self.plan_ahead = plan_ahead
        self.num_documents = n = len(corpus)
        width = block + 1
        self.rows_per_epoch: int | None
        if unit == "windows":
            self._num_windows = corpus.num_tokens // width
            self.rows_per_epoch = self._num_windows
        else:
            c, k = order.block_docs, order.window_blocks
            self.num_blocks = m = -(-n // c)
            self.num_windows = -(-m // k)
            self.unselected_tokens = corpus.num_tokens + (n - 1 if boundary and n else 0)
            if selector is not None:
                if getattr(selector, "block_docs", None) != c:
                    raise ValueError(
                        f"the selector decides per block of {getattr(selector, 'block_docs', None)}"
                        f" documents, the order has blocks of {c}; build it for this order"
                    )
                self._tokens = None
                self.rows_per_epoch = None
            else:
                tokens = np.asarray(block_tokens, dtype=np.int64)
                if tokens.shape != (m,):
                    raise ValueError(
                        f"block_tokens must hold one total per block of {c} documents: "
                        f"{m} values for {n} documents, got shape {tokens.shape}"
                    )
                self._tokens = tokens
                if boundary:  # one boundary token per document (the last one's removed below)
                    self._tokens = tokens + c
                    self._tokens[-1:] += n - m * c
                self._total = int(self._tokens.sum()) - (1 if boundary and n else 0)
                self.rows_per_epoch = -(-self._total // width)
        self._totals: list[int] = []  # stream tokens of each epoch (selector only)
        self._epoch_starts = np.zeros(1, dtype=np.int64)
        self._plans = PlanCache()

    # -- epochs ------------------------------------------------------------------------------

    def _key(self, epoch: int, stream: int) -> int:
        return mix_key(self.seed, epoch, stream)

    def epoch_tokens(self, epoch: int) -> int:
        """Real (non-padding) tokens in ``epoch``: the length of its stream."""
        if self.unit == "windows":
            return (self.rows_per_epoch or 0) * (self.block + 1)
        if self.selector is None:
            return self._total
        while len(self._totals) <= epoch:
            e = len(self._totals)
            tokens, docs = self._kept(e)
            total = int(tokens.sum()) - (1 if self.boundary and docs.any() else 0)
            if total <= 0:
                raise self._kept_nothing(e, self.seed)
            self._totals.append(total)
        return self._totals[epoch]

    def _kept(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Stream tokens (with boundaries) and documents the selector keeps per block."""
        tokens, docs = self.selector.block_totals(self.seed, epoch)  # type: ignore[union-attr]
        tokens, docs = np.asarray(tokens, dtype=np.int64), np.asarray(docs, dtype=np.int64)
        if tokens.shape != (self.num_blocks,) or docs.shape != (self.num_blocks,):
            raise ValueError(
                f"{self.selector!r}.block_totals returned shapes {tokens.shape} and "
                f"{docs.shape}; expected ({self.num_blocks},) each (one per block)"
            )
        return (tokens + docs if self.boundary else tokens), docs

    @property
    def epoch_items(self) -> int:
        return self.num_blocks

    def rows_in_epoch(self, epoch: int) -> int:
        """Rows in ``epoch`` (constant unless a selector changes the epoch's documents)."""
        if self.rows_per_epoch is not None:
            return self.rows_per_epoch
        return -(-self.epoch_tokens(epoch) // (self.block + 1))

    def real_tokens_before(self, occurrence: int) -> int:
        """Real tokens in the first ``occurrence`` rows of the stream."""
        epochs, rows = self.locate(np.array([occurrence]))
        epoch, row = int(epochs[0]), int(rows[0])
        if self.selector is None:
            done = epoch * self.epoch_tokens(0)
        else:
            done = sum(self.epoch_tokens(e) for e in range(epoch))
        return done + min(row * (self.block + 1), self.epoch_tokens(epoch))

    # -- planning, cached and ahead of use ------------------------------------------------------

    def _epoch(self, epoch: int) -> _Epoch:
        return self._plans.get(("epoch", epoch), lambda: self._plan_epoch(epoch), _CACHED_EPOCHS)

    def _window(self, epoch: int, window: int) -> _Window:
        return self._plans.get(
            ("window", epoch, window), lambda: self._plan_window(epoch, window), _CACHED_WINDOWS
        )

    def _plan_ahead(self, epoch: int, window: int) -> None:
        """Plans the window after ``(epoch, window)`` on the background thread."""
        if not self.plan_ahead:
            return
        nxt = self.window_after(epoch, window)
        if ("window", *nxt) in self._plans:
            return
        _prefetcher().submit(self._ahead, *nxt)

    def window_after(self, epoch: int, window: int) -> tuple[int, int]:
        """``(epoch, window)`` of the window read after ``window`` of ``epoch``."""
        return (epoch, window + 1) if window + 1 < self.num_windows else (epoch + 1, 0)

    def _ahead(self, epoch: int, window: int) -> None:
        try:
            self._window(epoch, window)
            self.announce_after(epoch, window)
        except Exception:  # raised again where the window is used, if it ever is
            logger.debug("planning window %d of epoch %d ahead failed", window, epoch)

    def announce_after(self, epoch: int, window: int) -> None:
        """Announces the runs of the window after ``window`` of ``epoch``, which is planned
        ahead (the one being read is two windows before): a remote corpus then has two
        windows' requests in flight while the consumer reads one, where a window at a time
        leaves the network idle between windows (planning, a burst's first round trip)."""
        self._announce(*self._runs(*self.window_after(epoch, window)), ahead=2)

    def _plan_epoch(self, epoch: int) -> _Epoch:
        started = time.perf_counter()
        c, k, m = self.order.block_docs, self.order.window_blocks, self.num_blocks
        if self.selector is None:
            tokens, docs = self._tokens, None
        else:
            tokens, docs = self._kept(epoch)
        key = self._key(epoch, BLOCK_ORDER_STREAM)
        sums = np.zeros(self.num_windows, dtype=np.int64)
        chunk = k * max(1, _CHUNK // k)
        for lo in range(0, m, chunk):
            blocks = feistel(np.arange(lo, min(lo + chunk, m)), m, key)
            sums[lo // k : lo // k + -(-len(blocks) // k)] = np.add.reduceat(
                tokens[blocks], np.arange(0, len(blocks), k)
            )
        prefix = np.zeros(self.num_windows + 1, dtype=np.int64)
        np.cumsum(sums, out=prefix[1:])
        nonempty = np.flatnonzero(sums)
        last = int(nonempty[-1]) if nonempty.size else 0
        if self.boundary and (docs is None or docs.any()) and self.num_documents:
            prefix[last + 1 :] -= 1  # no boundary after the epoch's last document
        logger.info(
            "planned blocked epoch %d (seed %d): %d blocks of %d documents, %d windows, %.3f s",
            epoch,
            self.seed,
            m,
            c,
            self.num_windows,
            time.perf_counter() - started,
        )
        return _Epoch(prefix, last)

    def _runs(self, epoch: int, window: int) -> tuple[np.ndarray, np.ndarray]:
        """First and stop documents of the runs of a window (its blocks, ascending)."""
        c, k, m = self.order.block_docs, self.order.window_blocks, self.num_blocks
        positions = np.arange(window * k, min((window + 1) * k, m))
        firsts = np.sort(feistel(positions, m, self._key(epoch, BLOCK_ORDER_STREAM))) * c
        return firsts, np.minimum(firsts + c, self.num_documents)

    def _announce(self, firsts: np.ndarray, stops: np.ndarray, *, ahead: int) -> None:
        """Tells a corpus that may fetch runs early (one on object storage) those of the
        window ``ahead`` windows after the one being read."""
        read_ahead = getattr(self.corpus, "read_ahead", None)
        if read_ahead is not None:
            read_ahead(list(zip(firsts.tolist(), stops.tolist())), ahead=ahead)

    def _plan_window(self, epoch: int, window: int) -> _Window:
        plan = self._epoch(epoch)
        n = self.num_documents
        firsts, stops = self._runs(epoch, window)
        counts = stops - firsts
        self._announce(firsts, stops, ahead=1)
        documents = np.repeat(firsts - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        lengths = np.concatenate(
            [
                np.diff(self.corpus.offsets_between(a, b))
                for a, b in zip(firsts.tolist(), stops.tolist())
            ]
            or [np.zeros(0, np.int64)]
        )
        rng = np.random.default_rng([self.seed, epoch, window, WINDOW_DOCUMENTS_STREAM])
        permutation = rng.permutation(len(documents))
        if self.selector is None:
            documents, lengths = documents[permutation], lengths[permutation]
        else:
            documents, lengths = self._select(epoch, documents, lengths, permutation)
        bounds = np.zeros(len(documents) + 1, dtype=np.int64)
        bounds[1:] = lengths
        if self.boundary:
            bounds[1:] += 1
            if window == plan.last_window and len(documents):
                bounds[-1] -= 1  # the epoch's last document
        bounds[0] = plan.prefix[window]
        np.cumsum(bounds, out=bounds)
        if bounds[-1] != plan.prefix[window + 1]:
            raise ValueError(
                f"window {window} of epoch {epoch} holds {bounds[-1] - bounds[0]} stream tokens "
                f"by its document offsets but {plan.prefix[window + 1] - plan.prefix[window]} by "
                "the block token totals: the corpus summary does not match the corpus (rebuild "
                "the summary cache or the corpus), or a selector's block_totals disagree with "
                "the documents it keeps"
            )
        ids = documents.astype(np.uint32) if n <= 1 << 32 else documents
        return _Window(ids, bounds, self.boundary, window == plan.last_window)

    def _select(
        self, epoch: int, documents: np.ndarray, lengths: np.ndarray, permutation: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Applies the selector to the window's permuted documents (ascending ``documents``)."""
        offered = documents[permutation]
        kept = check_selected_order(
            self.selector(offered.copy(), self.seed, epoch),  # type: ignore[misc]
            self.num_documents,
        )
        where = np.searchsorted(documents, kept)
        if kept.size and (where.max() >= len(documents) or (documents[where] != kept).any()):
            raise ValueError(
                f"{self.selector!r} returned document ids it was not given; a selector must "
                "return a subset of its input"
            )
        return kept, lengths[where]

    # -- rows ----------------------------------------------------------------------------------

    def spans(self, epoch: int, rows: np.ndarray) -> Spans:
        """Spans of rows ``rows`` of ``epoch``."""
        rows = np.asarray(rows, dtype=np.int64)
        n_rows = self.rows_in_epoch(epoch)
        if len(rows) and (rows.min() < 0 or rows.max() >= n_rows):
            raise IndexError(f"rows must lie in [0, {n_rows}); got {rows.min()}..{rows.max()}")
        if self.unit == "windows":
            return self._window_unit_spans(epoch, rows)
        width = self.block + 1
        plan = self._epoch(epoch)
        a = rows * width
        b = np.minimum(a + width, plan.total)
        first = np.searchsorted(plan.prefix, a, side="right") - 1
        last = np.searchsorted(plan.prefix, b - 1, side="right") - 1
        counts = last - first + 1
        touched = np.unique(
            np.repeat(first - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        )
        pieces = []
        for w in touched.tolist():
            if plan.prefix[w] == plan.prefix[w + 1]:
                continue  # no tokens (empty documents only, or none kept)
            mine = np.flatnonzero((first <= w) & (last >= w))
            pieces.append(_clipped_spans(self._window(epoch, w), mine, a[mine], b[mine]))
        if touched.size:  # the next window, while this one is read (a whole window ahead:
            # a remote corpus fetches it meanwhile, two fit the memory it is given)
            self._plan_ahead(epoch, int(touched[-1]))
        return _merge(pieces, b - a)

    def _window_unit_spans(self, epoch: int, rows: np.ndarray) -> Spans:
        width = self.block + 1
        windows = feistel(rows, self._num_windows, self._key(epoch, WINDOWS_UNIT_STREAM))
        a = windows * width
        b = a + width
        first = self.corpus.documents_at(a)
        counts = self.corpus.documents_at(b - 1) - first + 1
        span_row = np.repeat(np.arange(len(rows)), counts)
        i = np.arange(len(span_row)) + np.repeat(first - np.cumsum(counts) + counts, counts)
        starts = self.corpus.document_offsets(i)
        ends = self.corpus.document_offsets(i + 1)
        if (ends < starts).any():  # the documents between a row's ends were not searched
            d = int(i[np.argmax(ends < starts)])
            raise ValueError(
                f"document offsets decrease from document {d} to {d + 1} of the source "
                "(corrupt offsets): run grainpack verify on it and rebuild it"
            )
        lo, hi = np.maximum(starts, a[span_row]), np.minimum(ends, b[span_row])
        keep = hi > lo
        span_row, i, starts, lo, hi = (x[keep] for x in (span_row, i, starts, lo, hi))
        return Spans(
            row=span_row,
            offset=lo - a[span_row],
            document=i,
            start=lo - starts,
            length=hi - lo,
            boundary=np.zeros(len(i), dtype=bool),
            filled=b - a,
        )


def _clipped_spans(window: _Window, rows: np.ndarray, a: np.ndarray, b: np.ndarray) -> Spans:
    """Spans of the parts of stream ranges ``[a, b)`` inside ``window`` (``rows`` are their
    indices among the requested rows); as :func:`~grainpack.index.stream.row_spans`."""
    bounds = window.bounds
    a_in, b_in = np.maximum(a, bounds[0]), np.minimum(b, bounds[-1])
    first = np.searchsorted(bounds, a_in, side="right") - 1
    counts = np.searchsorted(bounds, b_in - 1, side="right") - first
    k = np.repeat(np.arange(len(rows)), counts)
    i = np.arange(len(k)) + np.repeat(first - np.cumsum(counts) + counts, counts)
    starts = bounds[i]
    lo, hi = np.maximum(starts, a_in[k]), np.minimum(bounds[i + 1], b_in[k])
    keep = hi > lo  # drops empty documents (no tokens, no boundary)
    k, i, starts, lo, hi = (x[keep] for x in (k, i, starts, lo, hi))
    local_lo, local_hi = lo - starts, hi - starts
    lengths = window.lengths_at(i)
    return Spans(
        row=rows[k],
        offset=lo - a[k],
        document=window.documents[i].astype(np.int64),
        start=local_lo,
        length=np.minimum(local_hi, lengths) - local_lo,
        boundary=local_hi > lengths,
        filled=np.zeros(0, dtype=np.int64),
    )


def _merge(pieces: list[Spans], filled: np.ndarray) -> Spans:
    """Spans of several windows as one table sorted by (row, offset)."""
    fields = [f.name for f in dataclasses.fields(Spans) if f.name != "filled"]
    if len(pieces) == 1:
        merged = {f: getattr(pieces[0], f) for f in fields}
    else:
        merged = {
            f: np.concatenate([getattr(p, f) for p in pieces])
            if pieces
            else np.zeros(0, dtype=bool if f == "boundary" else np.int64)
            for f in fields
        }
        by_row = np.argsort(merged["row"], kind="stable")  # windows are in stream order
        merged = {f: v[by_row] for f, v in merged.items()}
    return Spans(**merged, filled=filled)
