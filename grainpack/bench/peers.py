"""The loaders the throughput benchmark compares grainpack with, each as a ``step()`` that
returns one batch of ``batch`` rows of ``block + 1`` (or ``block``) tokens from a corpus."""

from __future__ import annotations

from collections.abc import Callable

import grain
import numpy as np

from grainpack.corpus.formats import open_corpus
from grainpack.reference.windows import PackedStream

__all__ = ["grain_packer", "limit", "nanogpt", "packed_stream"]


def limit(path: str, *, block: int, batch: int) -> Callable[[], object]:
    """The limit: ``block + 1``-token rows copied from the memmap at sequential offsets."""
    shard = open_corpus(path).shards[0]
    stream = np.asarray(
        np.memmap(shard.tokens_path, np.uint16, "r", shard.byte_offset, (shard.num_tokens,))
    )
    width = block + 1
    out = np.empty((batch, width), dtype=stream.dtype)
    position = [0]

    def step() -> None:
        pos = position[0] if position[0] + batch * width <= len(stream) else 0
        for i in range(batch):
            out[i] = stream[pos + i * width : pos + (i + 1) * width]
        position[0] = pos + batch * width

    return step


def nanogpt(path: str, *, block: int, batch: int, seed: int) -> Callable[[], object]:
    """nanoGPT's ``get_batch`` (``train.py``) with numpy in place of torch: re-opens the
    memmap on every call (as nanoGPT does, against a memmap leak), draws ``batch`` offsets
    with replacement, and stacks ``x`` and ``y`` as int64 (``torch.from_numpy`` is a view,
    ``torch.stack`` a copy, as ``np.stack``)."""
    shard = open_corpus(path).shards[0]
    rng = np.random.default_rng(seed)

    def step() -> tuple[np.ndarray, np.ndarray]:
        data = np.memmap(shard.tokens_path, np.uint16, "r", shard.byte_offset, (shard.num_tokens,))
        ix = rng.integers(len(data) - block, size=batch)
        x = np.stack([data[i : i + block].astype(np.int64) for i in ix])
        y = np.stack([data[i + 1 : i + 1 + block].astype(np.int64) for i in ix])
        return x, y

    return step


def packed_stream(path: str, *, block: int, batch: int, seed: int) -> Callable[[], object]:
    """The window loader's ``PackedStream``, one ``next()`` per row."""
    stream = PackedStream(path, block, seed)
    return lambda: np.stack([stream.next() for _ in range(batch)])


def grain_packer(path: str, *, block: int, batch: int, seed: int) -> Callable[[], object]:
    """Grain's own packer: source -> shuffle -> to_iter_dataset -> ConcatThenSplit -> batch."""
    ds = (
        grain.MapDataset.source(open_corpus(path))
        .shuffle(seed=seed)
        .repeat()  # the quick corpus is smaller than a timed pass
        .map(lambda d: {"tokens": d})
        .to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
    )
    ds = grain.experimental.ConcatThenSplitIterDataset(ds, length_struct={"tokens": block + 1})
    iterator = iter(ds.batch(batch))
    return lambda: next(iterator)
