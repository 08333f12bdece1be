"""The window loader: ``PackedStream`` per language, ``MixedStream`` mixing them.

A corpus's token stream is cut into contiguous ``seq_len + 1`` windows; window ``w`` is tokens
``[w * (seq_len + 1), (w + 1) * (seq_len + 1))`` and epoch ``e`` visits them in the order
``window_permutation(n_windows, seed, e)``. Reads are bit-exact with the window loader.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from grainpack.corpus.formats import open_corpus
from grainpack.corpus.source import TokenShardSource
from grainpack.index.checks import check_int
from grainpack.index.mixing import (
    SlotMixer,
    choose_source,
    choose_sources,
    cumulative_probabilities,
)
from grainpack.index.orders import window_permutation
from grainpack.index.weights import normalize_probabilities

__all__ = ["MixedStream", "PackedStream", "StreamArgumentError", "StreamTooSmall"]


class StreamTooSmall(ValueError, RuntimeError):
    """A corpus shorter than one window: a ``ValueError``, as every bad input here, and the
    ``RuntimeError`` the specification raises."""


class StreamArgumentError(ValueError, AssertionError):
    """``probs`` that are not probabilities, or ``skip_to`` backwards: a ``ValueError``, as
    every bad input here, and the ``AssertionError`` of the specification's asserts."""


_PERM_CACHE = 2  # epochs of permutations kept: a batch may straddle an epoch boundary


def _consumed_of(state: Any) -> int:
    if not isinstance(state, Mapping) or "consumed" not in state:
        raise ValueError(f"expected a PackedStream state {{'consumed': int}}, got {state!r}")
    return check_int("consumed", state["consumed"], minimum=0)


class PackedStream:
    """Contiguous ``seq_len + 1`` windows of one corpus, a seeded permutation per epoch.

    ``get(k)`` is the ``k``-th window in the global consumption order (epoch ``k //
    n_windows``), a pure lookup; ``next()`` returns ``get(consumed)`` and advances. Past the last
    window the stream rolls over into the next epoch with a new order.

    Args:
        path: corpus directory (flat-shard format with ``index.json``, or native) or Megatron
            prefix, or an already opened ``TokenShardSource``. Its token stream is the documents
            concatenated in stored order (flat-shard format: shards in sorted name order).
        seq_len: model sequence length; windows hold ``seq_len + 1`` tokens.
        seed: window-order seed, >= 0.
        lang: the language the stream holds, kept as ``lang`` (``MixedStream`` sets it).

    Attributes:
        paths, lens, cum: as the specification's: the files of the non-empty shards in
            stream order, their token counts, and the stream position where each starts,
            then the total (int64).

    Raises:
        StreamTooSmall: the corpus has fewer than ``seq_len + 1`` tokens (a ``ValueError``
            and a ``RuntimeError``).

    Example:
        >>> import tempfile
        >>> from grainpack import write_corpus
        >>> path = tempfile.mkdtemp()
        >>> _ = write_corpus(path, [list(range(10))])
        >>> stream = PackedStream(path, 2, 0)
        >>> stream.n_windows, sorted(int(stream.get(k)[0]) for k in range(3))
        (3, [0, 3, 6])
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | TokenShardSource,
        seq_len: int,
        seed: int,
        *,
        lang: str | None = None,
    ) -> None:
        self.lang = lang
        self.seq_len = check_int("seq_len", seq_len, minimum=1)
        self.seed = check_int("seed", seed, minimum=0)
        self.source = path if isinstance(path, TokenShardSource) else open_corpus(path)
        self.path = path if not isinstance(path, TokenShardSource) else None
        self.dtype = self.source.dtype
        shards = [s for s in self.source.shards if s.num_tokens > 0]
        self.paths = [Path(s.tokens_path) for s in shards]
        self.lens = np.array([s.num_tokens for s in shards], dtype=np.int64)
        self.cum = np.concatenate([[0], np.cumsum(self.lens)])
        self.total_tokens = int(self.source.num_tokens)
        self.n_windows = self.total_tokens // (self.seq_len + 1)
        if self.n_windows == 0:
            raise StreamTooSmall(
                f"corpus {path} has {self.total_tokens} tokens, fewer than one window of "
                f"seq_len + 1 = {self.seq_len + 1}; use a smaller seq_len or a larger corpus"
            )
        self._perms: dict[int, np.ndarray] = {}
        self.consumed = 0

    def __repr__(self) -> str:
        return (
            f"PackedStream({self.source!r}, seq_len={self.seq_len}, seed={self.seed}, "
            f"consumed={self.consumed})"
        )

    def permutation(self, epoch: int) -> np.ndarray:
        """Window order of ``epoch`` (cached for the last two epochs used)."""
        perm = self._perms.get(epoch)
        if perm is None:
            perm = window_permutation(self.n_windows, self.seed, epoch)
            if len(self._perms) >= _PERM_CACHE:
                self._perms.pop(next(iter(self._perms)))
            self._perms[epoch] = perm
        return perm

    def window(self, w: int) -> np.ndarray:
        """Window ``w`` of the token stream (corpus dtype), ``0 <= w < n_windows``."""
        if not 0 <= w < self.n_windows:
            raise IndexError(f"window must be in [0, {self.n_windows}), got {w=}")
        out = np.empty(self.seq_len + 1, dtype=self.dtype)
        self.source.read_into(out, int(w) * (self.seq_len + 1))
        return out

    def get(self, k: int) -> np.ndarray:
        """``k``-th window in the global consumption order (deterministic)."""
        k = check_int("k", k, minimum=0)
        epoch, pos = divmod(k, self.n_windows)
        return self.window(int(self.permutation(epoch)[pos]))

    def get_many(self, ks: np.ndarray | Sequence[int]) -> np.ndarray:
        """``get(k)`` for each ``k``, stacked into ``(len(ks), seq_len + 1)``."""
        ks = np.asarray(ks, dtype=np.int64).reshape(-1)
        if ks.size and ks.min() < 0:
            raise ValueError(f"window indices must be >= 0, got {ks[ks < 0][:5].tolist()}")
        out = np.empty((ks.size, self.seq_len + 1), dtype=self.dtype)
        epochs, pos = np.divmod(ks, self.n_windows)
        windows = np.empty(ks.size, dtype=np.int64)
        for epoch in np.unique(epochs).tolist():
            sel = epochs == epoch
            windows[sel] = self.permutation(epoch)[pos[sel]]
        starts = (windows * (self.seq_len + 1)).tolist()
        for i, start in enumerate(starts):  # one memmap slice per row
            self.source.read_into(out[i], start)
        return out

    def next(self) -> np.ndarray:
        """The next window; advances ``consumed``."""
        x = self.get(self.consumed)
        self.consumed += 1
        return x

    @property
    def epochs(self) -> float:
        """Epochs consumed so far (fractional)."""
        return self.consumed / self.n_windows

    def state_dict(self) -> dict[str, int]:
        """``{"consumed": int}``: JSON-serialisable."""
        return {"consumed": int(self.consumed)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        self.consumed = _consumed_of(state)


class MixedStream:
    """Token-level mixing of several PackedStreams by a stateless hash of (seed, slot).

    Slot ``s`` picks language ``j`` by ``splitmix64(seed * 0x100000001 + s) / 2**64`` against
    the cumulative ``probs``: reproducible, independent of world size, resumable from the slot
    counter. Stream ``j`` uses window seed ``seed + j``.

    Args:
        sources: mapping language -> corpus path (or ``TokenShardSource``); its order is the
            language order.
        seq_len: model sequence length.
        seed: mix seed, >= 0.
        probs: per-language probabilities (sequence in language order or mapping language ->
            probability); None (or empty, as the seed's ``probs or ...``) for equal. See
            ``content_probabilities`` for content mode.

    Raises:
        StreamArgumentError: bad probabilities (a ``ValueError`` and an ``AssertionError``).
        StreamTooSmall: a corpus shorter than one window.

    Example:
        >>> import tempfile
        >>> from grainpack import write_corpus
        >>> paths = {lang: tempfile.mkdtemp() for lang in ("en", "ar")}
        >>> _ = [write_corpus(p, [list(range(30))]) for p in paths.values()]
        >>> mix = MixedStream(paths, 4, 0)
        >>> rows, counts = mix.next_batch(8)
        >>> rows.shape, counts
        ((8, 5), {'en': 4, 'ar': 4})
    """

    def __init__(
        self,
        sources: Mapping[str, str | os.PathLike[str] | TokenShardSource],
        seq_len: int,
        seed: int,
        probs: Sequence[float] | Mapping[str, float] | None = None,
    ) -> None:
        if not isinstance(sources, Mapping) or not sources:
            raise TypeError(
                f"sources must be a non-empty mapping language -> corpus path, got {sources!r}"
            )
        self.langs = list(sources)
        self.seed = check_int("seed", seed, minimum=0)
        if isinstance(probs, list | tuple | Mapping) and not probs:  # the seed's `probs or ...`
            probs = None
        if isinstance(probs, Mapping):
            if set(probs) != set(self.langs):
                raise ValueError(
                    f"probs must name exactly the languages {self.langs}, got {list(probs)}"
                )
            probs = [probs[lang] for lang in self.langs]
        try:
            self.probs = list(normalize_probabilities(probs, len(self.langs)))
        except ValueError as err:
            raise StreamArgumentError(str(err)) from None
        given = self.probs if probs is None else list(probs)  # summed as the seed sums them
        self._cumulative = cumulative_probabilities(given)
        self._mixer = SlotMixer(self.seed, given)
        self.streams = {
            lang: PackedStream(sources[lang], seq_len, self.seed + j, lang=lang)
            for j, lang in enumerate(self.langs)
        }
        self.seq_len = self.streams[self.langs[0]].seq_len
        self._dtype = np.result_type(*(s.dtype for s in self.streams.values()))
        self.slot = 0

    def __repr__(self) -> str:
        return (
            f"MixedStream(langs={self.langs}, seq_len={self.seq_len}, seed={self.seed}, "
            f"probs={self.probs}, slot={self.slot})"
        )

    def _choose(self, slot: int) -> str:
        return self.langs[choose_source(self.seed, slot, self._cumulative)]

    def _draw_many(self, n: int) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
        """Advance ``n`` slots; per language, its global positions and occurrence indices."""
        choices = choose_sources(self.seed, self.slot, self.slot + n, self._cumulative)
        occurrences = []
        for j, lang in enumerate(self.langs):
            stream = self.streams[lang]
            positions = np.flatnonzero(choices == j)
            occurrences.append((positions, stream.consumed + np.arange(positions.size)))
            stream.consumed += positions.size
        self.slot += n
        return choices, occurrences

    def next_batch(self, n: int) -> tuple[np.ndarray, dict[str, int]]:
        """``n`` windows -> array ``(n, seq_len + 1)``; also per-language window counts."""
        n = check_int("n", n, minimum=0)
        rows = np.empty((n, self.seq_len + 1), dtype=self._dtype)
        counts = {lang: 0 for lang in self.langs}
        _, per_lang = self._draw_many(n)
        for lang, (positions, occ) in zip(self.langs, per_lang, strict=True):
            rows[positions] = self.streams[lang].get_many(occ)
            counts[lang] = int(positions.size)
        return rows, counts

    def draw(self) -> tuple[str, int]:
        """Advance one global slot; return ``(lang, occurrence index)`` without reading."""
        lang = self._choose(self.slot)
        occ = self.streams[lang].consumed
        self.streams[lang].consumed += 1
        self.slot += 1
        return lang, occ

    def rank_batch(self, n_global: int, rank: int, world: int) -> tuple[np.ndarray, dict[str, int]]:
        """Draw ``n_global`` slots; return the rows of ``rank`` (global rows ``j % world ==
        rank``) and per-language counts of those rows only. Every rank advances every stream.
        """
        n_global = check_int("n_global", n_global, minimum=0)
        world = check_int("world", world, minimum=1)
        rank = check_int("rank", rank, minimum=0)
        if rank >= world:
            raise ValueError(f"rank must be in [0, world), got {rank=} with {world=}")
        rows = np.empty((len(range(rank, n_global, world)), self.seq_len + 1), dtype=self._dtype)
        counts = {lang: 0 for lang in self.langs}
        _, per_lang = self._draw_many(n_global)
        for lang, (positions, occ) in zip(self.langs, per_lang, strict=True):
            mine = positions % world == rank
            rows[(positions[mine] - rank) // world] = self.streams[lang].get_many(occ[mine])
            counts[lang] = int(mine.sum())
        return rows, counts

    def skip_to(self, slot: int) -> None:
        """Fast-forward the mixture state to ``slot`` without reading data (for resume)."""
        slot = check_int("slot", slot, minimum=0)
        if slot < self.slot:
            raise StreamArgumentError(
                f"skip_to can only move forward: at slot {self.slot}, got {slot=}; "
                "use load_state_dict to go back to a saved state"
            )
        counts = self._mixer.counts_between(self.slot, slot).tolist()
        for lang, count in zip(self.langs, counts, strict=True):
            self.streams[lang].consumed += count
        self.slot = slot

    def state_dict(self) -> dict[str, Any]:
        """``{"slot": int, "streams": {lang: {"consumed": int}}}``: JSON-serialisable."""
        return {
            "slot": int(self.slot),
            "streams": {lang: s.state_dict() for lang, s in self.streams.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict` (streams not listed keep their counters)."""
        if not isinstance(state, Mapping) or not {"slot", "streams"} <= set(state):
            raise ValueError(
                f"expected a MixedStream state {{'slot': int, 'streams': {{lang: ...}}}}, "
                f"got {state!r}"
            )
        unknown = [lang for lang in state["streams"] if lang not in self.streams]
        if unknown:
            raise ValueError(f"state names unknown languages {unknown}; this mix has {self.langs}")
        slot = check_int("slot", state["slot"], minimum=0)
        consumed = {lang: _consumed_of(st) for lang, st in state["streams"].items()}
        for lang, count in consumed.items():  # all validated before anything changes
            self.streams[lang].consumed = count
        self.slot = slot

    def stats(self) -> dict[str, dict[str, float]]:
        """Per language: windows consumed and epochs (rounded to 4 places)."""
        return {
            lang: {"windows": s.consumed, "epochs": round(s.epochs, 4)}
            for lang, s in self.streams.items()
        }
