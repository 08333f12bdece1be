# Over 400 lines, one module: the ready-made selectors share one Selector base and state format;
# each is short.
"""Ready-made ``sequence_selector``s: length buckets, rate schedules, a bandit, composition.

A selector is a pure function ``(order, seed, epoch) -> order`` of its arguments and of its
own small, picklable state (:class:`Selector`). The pipeline calls it lazily, for every
source and epoch, in every process and Grain worker, so the same arguments must give the
same documents everywhere.

:class:`LengthBuckets` buckets documents by length (from the corpus ``lengths``, never by
reading tokens) and keeps a fraction of every bucket. Document ``d`` of an epoch is kept iff
``splitmix64(k ^ d) < rate * 2**64`` with ``k = splitmix64(splitmix64(seed ^ 0x5E1EC7) ^
epoch)``: a pure function of (seed, epoch, document), so another epoch keeps other long
documents, and kept documents stay in the order of the base permutation. Rates are a table
(one row per epoch, the last repeating), a :class:`LinearRamp`, or a :class:`LengthBandit`.

Lengths come from ``corpus=``: an object with ``.lengths`` such as the
``TokenShardSource`` of :func:`grainpack.open_corpus`, which pickles small (memmaps and
derived arrays are dropped) and computes ``lengths`` lazily in each process. A selector built
on one corpus serves single-source configs. A pipeline that calls ``bind(name, corpus)`` on
its selector for every source gives each source its own lengths and lets :class:`PerSource`
choose a selector by source name.

:class:`~grainpack.curriculum.bandit.LengthBandit` adapts the rates online; its contract with
the training loop is in :mod:`grainpack.curriculum.online`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from grainpack.curriculum.protocols import (
    HasLengths,
    RateSchedule,
    Reports,
    bind_selector,
    describe_selector,
)
from grainpack.index.checks import check_int, check_rates
from grainpack.index.hashing import splitmix64, splitmix64_array
from grainpack.index.orders import SequenceSelector, check_selected_order

__all__ = [
    "BlockLengthBuckets",
    "BucketReport",
    "Chain",
    "LengthBuckets",
    "LinearRamp",
    "PerSource",
]

KEEP_STREAM = 0x5E1EC7
BLOCK_KEEP_STREAM = 0x5E1EB10C


@dataclasses.dataclass(frozen=True)
class BucketReport:
    """What a :class:`LengthBuckets` kept in one epoch, per bucket (JSON via ``as_dict``).

    Attributes:
      epoch: the epoch.
      edges: bucket edges in tokens.
      rates: keep rate of each bucket.
      documents: documents offered per bucket.
      kept_documents: documents kept per bucket.
      tokens: tokens offered per bucket.
      kept_tokens: tokens kept per bucket.

    Example:
      >>> import tempfile, numpy as np, grainpack as gp
      >>> src = gp.write_corpus(tempfile.mkdtemp(), [np.ones(n, int) for n in (3, 5, 50)])
      >>> buckets = gp.curriculum.LengthBuckets(edges=(10,), rates=(1.0, 0.0), corpus=src)
      >>> report = buckets.report(None, 0, 0)
      >>> report.documents, report.kept_tokens, report.as_dict()["rates"]
      ((2, 1), (8, 0), (1.0, 0.0))
    """

    epoch: int
    edges: tuple[int, ...]
    rates: tuple[float, ...]
    documents: tuple[int, ...]
    kept_documents: tuple[int, ...]
    tokens: tuple[int, ...]
    kept_tokens: tuple[int, ...]

    @property
    def token_shares(self) -> tuple[float, ...]:
        """Fraction of the kept tokens that falls in each bucket."""
        total = sum(self.kept_tokens)
        return tuple(t / total if total else 0.0 for t in self.kept_tokens)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able data for a logger."""
        return {**dataclasses.asdict(self), "token_shares": self.token_shares}


@dataclasses.dataclass(frozen=True)
class LinearRamp:
    """Rates moving linearly from ``start`` (epoch 0) to ``end`` (epoch ``epochs`` onwards).

    Args:
      start: Keep rate of each bucket in epoch 0, in ``[0, 1]``.
      end: Keep rate of each bucket from epoch ``epochs`` on.
      epochs: Epochs the ramp takes (>= 1).

    Example:
      >>> LinearRamp(start=(1.0, 0.0), end=(1.0, 1.0), epochs=4).rates(1)
      (1.0, 0.25)
    """

    start: tuple[float, ...]
    end: tuple[float, ...]
    epochs: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", check_rates("start", self.start))
        object.__setattr__(self, "end", check_rates("end", self.end))
        if len(self.start) != len(self.end):
            raise ValueError(
                f"start and end need one rate per bucket each; got {len(self.start)} and "
                f"{len(self.end)} rates"
            )
        check_int("epochs", self.epochs, minimum=1)

    @property
    def num_buckets(self) -> int:
        """Number of length buckets."""
        return len(self.start)

    def rates(self, epoch: int) -> tuple[float, ...]:
        """Rates of ``epoch``."""
        t = min(check_int("epoch", epoch, minimum=0), self.epochs) / self.epochs
        if t == 1.0:
            return self.end
        return tuple(min(1.0, max(0.0, a + (b - a) * t)) for a, b in zip(self.start, self.end))


def _document_ids(order: object, seed: int, epoch: int) -> np.ndarray:
    """``order`` as int64 document ids, after checking it and the selector's arguments."""
    check_int("seed", seed, minimum=0)
    check_int("epoch", epoch, minimum=0)
    docs = np.asarray(order)
    if docs.size and docs.dtype.kind not in "iu":
        raise TypeError(f"order must hold integer document ids; got dtype {docs.dtype}")
    return docs.astype(np.int64, copy=False)


@dataclasses.dataclass(frozen=True)
class LengthBuckets:
    """Keep a per-epoch fraction of each document-length bucket.

    Args:
      edges: strictly increasing token counts; bucket ``i`` holds documents with
        ``edges[i-1] <= length < edges[i]`` (``len(edges) + 1`` buckets).
      rates: keep rate per bucket in ``[0, 1]``: one sequence for every epoch, a table of
        them (row ``e`` for epoch ``e``, the last row afterwards), or a :class:`RateSchedule`
        such as :class:`LinearRamp` or :class:`LengthBandit`.
      corpus: where lengths come from (e.g. ``gp.open_corpus(path)``), or ``None`` for a
        pipeline that binds selectors to sources.

    Example:
      >>> import tempfile, numpy as np, grainpack as gp
      >>> src = gp.write_corpus(tempfile.mkdtemp(), [np.ones(n, int) for n in (3, 5, 50, 70)])
      >>> short_only = LengthBuckets(edges=(10,), rates=(1.0, 0.0), corpus=src)
      >>> sorted(short_only(gp.global_document_order(4, seed=0, epoch=0), 0, 0).tolist())
      [0, 1]
    """

    edges: tuple[int, ...]
    rates: tuple[tuple[float, ...], ...] | RateSchedule
    corpus: HasLengths | None = None

    def __post_init__(self) -> None:
        edges = tuple(self.edges) if isinstance(self.edges, Sequence) else self.edges
        if not isinstance(edges, tuple):
            raise TypeError(f"edges must be a sequence of ints; got {self.edges!r}")
        for x in edges:
            check_int("edges", x, minimum=1)
        if any(b <= a for a, b in itertools.pairwise(edges)):
            raise ValueError(
                f"edges must be strictly increasing token counts; got {edges=}; sort them "
                "and drop duplicates"
            )
        object.__setattr__(self, "edges", tuple(int(x) for x in edges))
        rates = self.rates.tolist() if isinstance(self.rates, np.ndarray) else self.rates
        if not isinstance(rates, RateSchedule):
            if not isinstance(rates, Sequence) or not rates:
                raise TypeError(
                    "rates must be a sequence of per-bucket rates, a table of them (one row "
                    f"per epoch) or a RateSchedule; got {rates!r}"
                )
            rows = rates if isinstance(rates[0], Sequence | np.ndarray) else [rates]
            rates = tuple(check_rates("rates", row) for row in rows)
            object.__setattr__(self, "rates", rates)
        counts = {len(row) for row in rates} if isinstance(rates, tuple) else {rates.num_buckets}
        if counts != {self.num_buckets}:
            raise ValueError(
                f"{len(self.edges)} edges make {self.num_buckets} buckets, so rates need "
                f"{self.num_buckets} values per epoch; got {sorted(counts)}"
            )
        # HasLengths, without reading a class's property (a source's builds 8 bytes a document)
        has = "lengths" in dir(type(self.corpus)) or hasattr(self.corpus, "lengths")
        if self.corpus is not None and not has:
            raise TypeError(
                f"corpus must expose .lengths (e.g. gp.open_corpus(path)); got {self.corpus!r}"
            )

    @property
    def num_buckets(self) -> int:
        """Number of length buckets."""
        return len(self.edges) + 1

    @property
    def components(self) -> tuple[object, ...]:
        """The rate schedule (a :class:`LengthBandit` makes this selector adapt online)."""
        return () if isinstance(self.rates, tuple) else (self.rates,)

    def rates_for(self, epoch: int) -> tuple[float, ...]:
        """Keep rate of each bucket in ``epoch``."""
        if isinstance(self.rates, tuple):
            return self.rates[min(epoch, len(self.rates) - 1)]
        rates = check_rates("schedule rates", self.rates.rates(epoch))
        if len(rates) != self.num_buckets:
            raise ValueError(
                f"the rate schedule {self.rates!r} gave {len(rates)} rates for epoch {epoch}, "
                f"but {len(self.edges)} edges make {self.num_buckets} buckets: its rates() "
                "must return one rate per bucket"
            )
        return rates

    def bucket_of(self, documents: np.ndarray) -> np.ndarray:
        """Bucket index (int64) of each document id."""
        return np.searchsorted(self.edges, self._lengths(documents), side="right")

    def _all_lengths(self) -> np.ndarray:
        if self.corpus is None:
            raise ValueError(
                "LengthBuckets needs document lengths: pass corpus=gp.open_corpus(path) for a "
                "single-source config, or use a pipeline that binds selectors to sources"
            )
        return np.asarray(self.corpus.lengths)

    def _lengths(self, documents: np.ndarray) -> np.ndarray:
        lengths = self._all_lengths()
        docs = np.asarray(documents, dtype=np.int64)
        if docs.size and (docs.min() < 0 or docs.max() >= len(lengths)):
            raise ValueError(
                f"document ids up to {docs.max()} given to a selector built on a corpus of "
                f"{len(lengths)} documents ({self.corpus!r}); a selector with corpus= serves "
                "that corpus only: use one source, or PerSource with a binding pipeline"
            )
        return lengths[docs]

    def _keep(self, order: np.ndarray, seed: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(bucket of each document of ``order``, keep mask)."""
        docs = _document_ids(order, seed, epoch)
        buckets = self.bucket_of(docs)
        rates = self.rates_for(epoch)
        limits = np.array([min(int(r * 2.0**64), 2**64 - 1) for r in rates], dtype=np.uint64)
        always = np.array([r >= 1.0 for r in rates])
        key = splitmix64(splitmix64(int(seed) ^ KEEP_STREAM) ^ int(epoch))
        hashes = splitmix64_array(docs.astype(np.uint64) ^ np.uint64(key))
        return buckets, (hashes < limits[buckets]) | always[buckets]

    def __call__(self, order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
        keep = self._keep(order, seed, epoch)[1]
        return np.asarray(order, dtype=np.int64)[keep]

    def report(self, order: np.ndarray | None, seed: int, epoch: int) -> BucketReport:
        """What ``self(order, seed, epoch)`` keeps per bucket; ``None``: every document.

        Selection ignores positions, so ``None`` gives the same counts as the base order.
        """
        if order is None:
            order = np.arange(len(self._all_lengths()))
        buckets, keep = self._keep(order, seed, epoch)
        return self._report(epoch, buckets, keep, self._lengths(order))

    def _report(
        self, epoch: int, buckets: np.ndarray, keep: np.ndarray, lengths: np.ndarray
    ) -> BucketReport:
        """The report of documents with these ``buckets``, ``keep`` mask and ``lengths``."""
        k = self.num_buckets

        def count(mask: np.ndarray | None, weights: np.ndarray | None) -> tuple[int, ...]:
            b = buckets if mask is None else buckets[mask]
            w = None if weights is None else (weights if mask is None else weights[mask])
            return tuple(int(x) for x in np.bincount(b, weights=w, minlength=k))

        return BucketReport(
            epoch=int(epoch),
            edges=self.edges,
            rates=self.rates_for(epoch),
            documents=count(None, None),
            kept_documents=count(keep, None),
            tokens=count(None, lengths),
            kept_tokens=count(keep, lengths),
        )

    def for_blocks(self, block_docs: int) -> BlockLengthBuckets:
        """This selector as ``order=BlockedOrder(block_docs=...)`` applies it: decisions per
        (block, bucket), so kept tokens per block are known without reading documents."""
        return BlockLengthBuckets(self, block_docs)

    def bind(self, name: str, corpus: HasLengths) -> LengthBuckets:
        """This selector for pipeline source ``name`` (its lengths come from ``corpus``)."""
        if self.corpus is None:
            return dataclasses.replace(self, corpus=corpus)
        mine, theirs = (getattr(c, "fingerprint", None) for c in (self.corpus, corpus))
        if mine is not None and theirs is not None and mine != theirs:
            raise ValueError(
                f"this LengthBuckets was built on {self.corpus!r} but the pipeline applies it "
                f"to source {name!r} ({corpus!r}); drop corpus= or use PerSource"
            )
        return self


@dataclasses.dataclass(frozen=True)
class BlockLengthBuckets:
    """:class:`LengthBuckets` for the blocked order: one decision per (block, bucket).

    The documents of bucket ``k`` in block ``b`` (stored documents ``[b*C, (b+1)*C)``) are
    all kept in epoch ``e`` iff ``splitmix64(key_e ^ (b * buckets + k)) < rate_k * 2**64``,
    with ``key_e`` mixed from (seed, epoch). It is still a pure per-document function (a
    document's block and bucket decide), applied to each window's documents, and its kept
    tokens per block (:meth:`block_totals`) come from a table of tokens and documents per
    (block, bucket), built once per process in one streaming pass over the offsets:
    ``O(N)`` time once, ``O(N / C * buckets)`` memory. Kept documents are correlated inside
    a block, which is harmless when storage order is random (``build --shuffle``).

    Example:
      >>> import tempfile, numpy as np, grainpack as gp
      >>> src = gp.write_corpus(tempfile.mkdtemp(), [np.ones(n, int) for n in (3, 5, 50, 70)])
      >>> short = LengthBuckets(edges=(10,), rates=(1.0, 0.0), corpus=src).for_blocks(2)
      >>> short(np.array([3, 0, 2, 1]), 0, 0).tolist(), short.block_totals(0, 0)[0].tolist()
      ([0, 1], [8, 0])
    """

    buckets: LengthBuckets
    block_docs: int

    def __post_init__(self) -> None:
        check_int("block_docs", self.block_docs, minimum=1)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_cached")}

    def _corpus(self) -> Any:
        corpus = self.buckets.corpus
        if corpus is None or not hasattr(corpus, "offsets_between"):
            raise ValueError(
                "the blocked order's LengthBuckets reads document offsets from its corpus: use "
                f"a pipeline that binds selectors to sources (got corpus={corpus!r})"
            )
        return corpus

    def _keep(self, blocks: np.ndarray, buckets: np.ndarray, seed: int, epoch: int) -> np.ndarray:
        rates = self.buckets.rates_for(epoch)
        limits = np.array([min(int(r * 2.0**64), 2**64 - 1) for r in rates], dtype=np.uint64)
        always = np.array([r >= 1.0 for r in rates])
        key = splitmix64(splitmix64(int(seed) ^ BLOCK_KEEP_STREAM) ^ int(epoch))
        cells = blocks.astype(np.uint64) * np.uint64(len(rates)) + buckets.astype(np.uint64)
        hashes = splitmix64_array(cells ^ np.uint64(key))
        return (hashes < limits[buckets]) | always[buckets]

    def _documents(
        self, order: np.ndarray, seed: int, epoch: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(bucket, keep mask, length) of each document of ``order``."""
        docs = _document_ids(order, seed, epoch)
        corpus = self._corpus()
        lengths = corpus.document_offsets(docs + 1) - corpus.document_offsets(docs)
        buckets = np.searchsorted(self.buckets.edges, lengths, side="right")
        return buckets, self._keep(docs // self.block_docs, buckets, seed, epoch), lengths

    def __call__(self, order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
        keep = self._documents(order, seed, epoch)[1]
        return np.asarray(order, dtype=np.int64)[keep]

    def report(self, order: np.ndarray | None, seed: int, epoch: int) -> BucketReport:
        """What ``self(order, seed, epoch)`` keeps per bucket (as
        :meth:`LengthBuckets.report`); ``None``: every document, counted from the table of
        tokens and documents per (block, bucket), no document read.

        Example:
          >>> import tempfile, numpy as np, grainpack as gp
          >>> src = gp.write_corpus(tempfile.mkdtemp(), [np.ones(n, int) for n in (3, 5, 50)])
          >>> short = LengthBuckets(edges=(10,), rates=(1.0, 0.0), corpus=src).for_blocks(2)
          >>> r = short.report(None, 0, 0)
          >>> r.documents, r.kept_documents, r.kept_tokens
          ((2, 1), (2, 0), (8, 0))
        """
        if order is not None:
            return self.buckets._report(epoch, *self._documents(order, seed, epoch))
        tokens, docs, keep = self._kept_table(seed, epoch)

        def column_sums(table: np.ndarray) -> tuple[int, ...]:
            return tuple(int(x) for x in table.sum(axis=0))

        return BucketReport(
            epoch=int(epoch),
            edges=self.buckets.edges,
            rates=self.buckets.rates_for(epoch),
            documents=column_sums(docs),
            kept_documents=column_sums(docs * keep),
            tokens=column_sums(tokens),
            kept_tokens=column_sums(tokens * keep),
        )

    def _table(self) -> tuple[np.ndarray, np.ndarray]:
        """Tokens and documents per (block, bucket), ``(M, buckets)`` int64: kept on the
        object, and for a corpus with a fingerprint in the cache folder too (processes,
        workers and restarts read it instead of passing over the offsets again)."""
        table = self.__dict__.get("_cached_table")
        if table is None:
            corpus, c, k = self._corpus(), self.block_docs, self.buckets.num_buckets
            shape = (2, -(-len(corpus) // c), k)
            cache = getattr(corpus, "cached_array", None)  # a TokenShardSource's
            if cache is None:
                both = self._scan(shape)
            else:
                edges = hashlib.sha256(repr(self.buckets.edges).encode()).hexdigest()[:16]
                both = cache(f"{c}-buckets-{edges}", shape, lambda: self._scan(shape))
            table = both[0], both[1]
            object.__setattr__(self, "_cached_table", table)
        return table

    def _scan(self, shape: tuple[int, int, int]) -> np.ndarray:
        """The (tokens, documents) table, in one streaming pass over the offsets."""
        corpus, c, k = self._corpus(), self.block_docs, self.buckets.num_buckets
        n, size = len(corpus), shape[1] * k
        tokens, docs = np.zeros(size, np.int64), np.zeros(size, np.int64)
        step = c * max(1, (1 << 22) // c)
        for first in range(0, n, step):
            lengths = np.diff(corpus.offsets_between(first, min(first + step, n)))
            ids = np.arange(first, first + len(lengths)) // c * k
            ids += np.searchsorted(self.buckets.edges, lengths, side="right")
            tokens += np.bincount(ids, weights=lengths, minlength=size).astype(np.int64)
            docs += np.bincount(ids, minlength=size)
        return np.stack([tokens, docs]).reshape(shape)

    def _kept_table(self, seed: int, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_table` and the keep decision of each (block, bucket) in ``epoch``."""
        tokens, docs = self._table()
        m, k = tokens.shape
        keep = self._keep(
            np.repeat(np.arange(m), k), np.tile(np.arange(k), m), seed, epoch
        ).reshape(m, k)
        return tokens, docs, keep

    def block_totals(self, seed: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """int64 ``(kept tokens, kept documents)`` of every block in ``epoch`` (the last two
        epochs asked are kept: the planner asks for an epoch more than once)."""
        recent = self.__dict__.setdefault("_cached_totals", {})
        lock = self.__dict__.setdefault("_cached_lock", threading.Lock())  # plan-ahead thread
        with lock:
            totals = recent.get((seed, epoch))
        if totals is None:
            tokens, docs, keep = self._kept_table(seed, epoch)
            totals = (tokens * keep).sum(axis=1), (docs * keep).sum(axis=1)
            for array in totals:
                array.flags.writeable = False
            with lock:
                if len(recent) >= 2:
                    recent.pop(next(iter(recent)))
                recent[(seed, epoch)] = totals
        return totals


def _check_selector(selector: object, what: str) -> None:
    if not callable(selector):
        raise TypeError(f"{what} must be callable (order, seed, epoch) -> order; got {selector!r}")


@dataclasses.dataclass(frozen=True, init=False, repr=False)
class Chain:
    """Selectors applied in order, each to the previous one's output.

    Two :class:`LengthBuckets` in a chain draw the same per-document hash, so together they
    keep ``min`` of their rates (e.g. a fixed cap on long documents around a bandit).

    Args:
      *selectors: One or more ``(order, seed, epoch) -> order`` selectors, applied first to
        last.

    Example:
      >>> import tempfile, numpy as np, grainpack as gp
      >>> src = gp.write_corpus(tempfile.mkdtemp(), [np.ones(n, int) for n in (3, 5, 50, 70)])
      >>> every = LengthBuckets(edges=(10,), rates=(1.0, 1.0), corpus=src)
      >>> no_long = LengthBuckets(edges=(10,), rates=(1.0, 0.0), corpus=src)
      >>> Chain(every, no_long)(np.array([3, 2, 1, 0]), 0, 0).tolist()
      [1, 0]
    """

    selectors: tuple[SequenceSelector, ...]

    def __init__(self, *selectors: SequenceSelector) -> None:
        if not selectors:
            raise TypeError("Chain needs at least one selector; got none")
        for i, s in enumerate(selectors):
            _check_selector(s, f"Chain selector {i}")
        object.__setattr__(self, "selectors", tuple(selectors))

    def __repr__(self) -> str:
        return f"Chain({', '.join(describe_selector(s) for s in self.selectors)})"

    @property
    def components(self) -> tuple[object, ...]:
        return self.selectors

    def __call__(self, order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
        out = np.asarray(order, dtype=np.int64)
        for i, selector in enumerate(self.selectors):
            out = _checked_stage(i, selector, out, selector(out.copy(), seed, epoch))
        return out

    def report(self, order: np.ndarray | None, seed: int, epoch: int) -> tuple[Any, ...]:
        """Reports of the stages that have ``report``, each on the order that stage saw
        (``None``: every document, as for :meth:`LengthBuckets.report`)."""
        if order is None:
            sized = [
                s for s in self.selectors if isinstance(s, LengthBuckets) and s.corpus is not None
            ]
            if not sized:
                raise ValueError(
                    "Chain.report(None, ...) needs a LengthBuckets stage with a corpus to "
                    "count the documents; pass the order"
                )
            order = np.arange(len(sized[0].corpus.lengths))
        out, reports = np.asarray(order, dtype=np.int64), []
        for i, selector in enumerate(self.selectors):
            if isinstance(selector, Reports):
                reports.append(selector.report(out, seed, epoch))
            out = _checked_stage(i, selector, out, selector(out.copy(), seed, epoch))
        return tuple(reports)

    def bind(self, name: str, corpus: HasLengths) -> Chain | None:
        """The chain for source ``name``: stages bound, stages binding to ``None`` dropped."""
        stages = [bind_selector(s, name, corpus) for s in self.selectors]
        kept = [s for s in stages if s is not None]
        return Chain(*kept) if kept else None


def _checked_stage(i: int, selector: object, given: np.ndarray, result: object) -> np.ndarray:
    upper = int(given.max()) + 1 if given.size else 0
    try:
        out = check_selected_order(result, upper)
    except ValueError as err:
        raise ValueError(f"Chain stage {i} ({describe_selector(selector)}): {err}") from None
    if out.size and not np.isin(out, given).all():
        raise ValueError(
            f"Chain stage {i} ({describe_selector(selector)}) returned ids it was not given; a "
            "selector must return a subset of its input"
        )
    return out


@dataclasses.dataclass(frozen=True, repr=False)
class PerSource:
    """A selector per source name (sources not named are not filtered).

    Not a :class:`~grainpack.curriculum.SequenceSelector` itself: ``(order, seed, epoch)`` does not
    say which source an order is from, so it only binds (the pipeline calls
    ``bind(name, corpus)`` for every source).
    Give every source its own :class:`LengthBandit`: its epochs are that source's epochs.

    Args:
      selectors: Source name -> its selector (``None``: no selection for that source); the
        names must be the pipeline's sources.

    Example:
      >>> import tempfile, numpy as np, grainpack as gp
      >>> src = gp.write_corpus(tempfile.mkdtemp(), [np.ones(n, int) for n in (3, 50)])
      >>> sel = PerSource({"en": LengthBuckets(edges=(10,), rates=(1.0, 0.0))})
      >>> sel.bind("en", src)(np.array([1, 0]), 0, 0).tolist(), sel.bind("fr", src)
      ([0], None)
    """

    selectors: Mapping[str, SequenceSelector | None]

    def __post_init__(self) -> None:
        if not isinstance(self.selectors, Mapping):
            raise TypeError(f"PerSource takes a mapping name -> selector; got {self.selectors!r}")
        for name, s in self.selectors.items():
            if not isinstance(name, str):
                raise TypeError(f"PerSource keys must be source names (str); got {name!r}")
            if s is not None:
                _check_selector(s, f"PerSource[{name!r}]")
        object.__setattr__(self, "selectors", dict(self.selectors))

    def __repr__(self) -> str:
        inner = ", ".join(
            f"{k!r}: {'None' if s is None else describe_selector(s)}"
            for k, s in self.selectors.items()
        )
        return f"PerSource({{{inner}}})"

    @property
    def components(self) -> tuple[object, ...]:
        return tuple(s for s in self.selectors.values() if s is not None)

    def check_sources(self, names: Sequence[str]) -> None:
        """Raises ``ValueError`` if a key is not one of the pipeline's source ``names`` (a
        misspelled key would leave its source unfiltered without a word)."""
        unknown = [k for k in self.selectors if k not in names]
        if unknown:
            raise ValueError(
                f"PerSource names {unknown}, which are not sources of this pipeline "
                f"{list(names)}; key each selector by a source name"
            )

    def bind(self, name: str, corpus: HasLengths) -> SequenceSelector | None:
        """The selector of source ``name`` (bound to ``corpus``), or ``None``."""
        return bind_selector(self.selectors.get(name), name, corpus)
