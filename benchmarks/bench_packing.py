"""Packing: concat against best fit (issue 34), and Grain's ``BestFitPackIterDataset``.

Run: ``python benchmarks/bench_packing.py [--documents N] [--steps S]``. Prints one JSON
line per measurement (no assertions). Documents have realistic lengths: lognormal, median
600 tokens (sigma 1.2: about 85 % fit a row of 2049), clipped to [8, 32768].

- ``cut``: share of the documents that fit a row (``length + 1 <= block + 1``) that are cut
  across two rows; ``padding``: share of row tokens that are padding; ``rows``: rows of an
  epoch. From the index alone (document lengths, no tokens), over ``--documents``.
- ``tokens_per_s``: end to end (plans, reads, model arrays), ``make_dataset`` on a corpus of
  ``--corpus-documents`` documents written to a temporary folder, concat and best fit
  alternating in the same run.
- Grain: the same documents (tails of documents longer than a row, after full rows, as
  grainpack cuts them) through ``grain.experimental.BestFitPackIterDataset``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np

import grainpack as gp
from grainpack.index.bestfit import BestFitRows
from grainpack.index.blocked import BlockedOrder, BlockedRows
from grainpack.index.stream import SourceRows
from grainpack.pipeline import fast

EOS = 1


def lengths_of(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(np.log(600), 1.2, size=n), 8, 32768).astype(np.int64)


class Offsets:
    def __init__(self, lengths: np.ndarray) -> None:
        self.offsets = np.concatenate([[0], np.cumsum(lengths)])
        self.num_tokens = int(self.offsets[-1])

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def offsets_between(self, first: int, stop: int) -> np.ndarray:
        return self.offsets[first : stop + 1]

    def block_tokens(self, c: int) -> np.ndarray:
        edges = np.minimum(np.arange(0, len(self) + c, c), len(self))
        return np.diff(self.offsets[edges])[: -(-len(self) // c)]


def concat_metrics(lengths: np.ndarray, block: int) -> dict[str, float]:
    """Documents end to end in a random order, a boundary token after each."""
    width = block + 1
    sizes = np.random.default_rng(1).permutation(lengths) + 1
    end = np.cumsum(sizes)
    start = end - sizes
    fits = sizes <= width
    cut = (start // width != (end - 1) // width) & fits
    rows = -(-int(end[-1]) // width)
    return {
        "cut": float(cut.sum() / fits.sum()),
        "padding": 1 - int(end[-1]) / (rows * width),
        "rows": rows,
    }


def best_fit_metrics(lengths: np.ndarray, block: int, window_docs: int | None) -> dict:
    width = block + 1
    kernel = None if fast.kernels() is None else fast.kernels().best_fit
    if window_docs is None:
        inner = SourceRows(lengths, unit="documents", block=block, seed=0, boundary=True)
    else:
        corpus = Offsets(lengths)
        c = min(256, window_docs)
        inner = BlockedRows(
            corpus,
            order=BlockedOrder(block_docs=c, window_blocks=window_docs // c),
            unit="documents",
            block=block,
            seed=0,
            boundary=True,
            block_tokens=corpus.block_tokens(c),
            plan_ahead=False,
        )
    rows = BestFitRows(inner, kernel=kernel)
    started = time.perf_counter()
    n = rows.rows_in_epoch(0)
    counted = time.perf_counter() - started
    spans = rows.spans(0, np.arange(n))
    sizes = lengths + 1
    pieces = np.bincount(spans.document, minlength=len(lengths))
    fits = sizes <= width
    return {
        "cut": float((pieces[fits] > 1).sum() / fits.sum()),
        "padding": 1 - int(spans.filled.sum()) / (n * width),
        "rows": n,
        "segments_per_row": len(spans.row) / n,
        "count_s": round(counted, 3),
    }


def grain_best_fit(lengths: np.ndarray, block: int, bins: int) -> dict:
    """Grain's online best fit over ``bins`` open rows, on the same pieces as grainpack's."""
    import grain

    width = block + 1
    sizes = lengths + 1
    tails = sizes % width
    tails = tails[tails > 0]
    full_rows = int((sizes // width).sum())
    data = np.ones(int(tails.max()), dtype=np.int32)
    ds = grain.MapDataset.source(tails.tolist()).map(lambda n: {"tokens": data[:n]})
    packed = grain.experimental.BestFitPackIterDataset(
        ds.to_iter_dataset(), length_struct={"tokens": width}, num_packing_bins=bins, seed=0
    )
    started = time.perf_counter()
    rows = real = 0
    for element in packed:
        rows += 1
        real += int((element["tokens_segment_ids"] > 0).sum())
    elapsed = time.perf_counter() - started
    rows += full_rows
    real += full_rows * width
    return {
        "padding": 1 - real / (rows * width),
        "rows": rows,
        "pieces_per_s": round(len(tails) / elapsed),
        "tokens_per_s": round(real / elapsed),
    }


def throughput(root: str, block: int, steps: int, order, packing: str) -> float:
    cfg = gp.PipelineConfig(
        sources={"web": root},
        block=block,
        global_batch_size=32,
        boundary_id=EOS,
        order=order,
        packing=packing,
    )
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    next(it)  # planning, numba's kernels
    started = time.perf_counter()
    for _ in range(steps):
        next(it)
    return steps * 32 * (block + 1) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--documents", type=int, default=200_000)
    parser.add_argument("--corpus-documents", type=int, default=40_000)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--grain-bins", type=int, default=128)
    args = parser.parse_args()
    lengths = lengths_of(args.documents)
    for block in (2048, 8192):
        print(json.dumps({"block": block, "packing": "concat", **concat_metrics(lengths, block)}))
        for window in (4096, 65536, None):
            found = best_fit_metrics(lengths, block, window)
            where = "exact (epoch)" if window is None else f"blocked K*C={window}"
            print(json.dumps({"block": block, "packing": f"best_fit {where}", **found}))
        grain = grain_best_fit(lengths[:10_000], block, args.grain_bins)
        print(json.dumps({"block": block, "packing": f"grain bins={args.grain_bins}", **grain}))
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(2)
        docs = [rng.integers(2, 50_000, size=n, dtype=np.uint16) for n in lengths_of(
            args.corpus_documents, seed=3
        )]  # fmt: skip
        gp.write_corpus(f"{tmp}/web", docs, vocab_size=50_000)
        order = gp.BlockedOrder(block_docs=256, window_blocks=16)
        for block in (2048, 8192):
            found: dict[str, list[float]] = {"concat": [], "best_fit": []}
            for _ in range(2):  # alternate: the machine's load hits both alike
                for packing in found:
                    found[packing].append(
                        throughput(f"{tmp}/web", block, args.steps, order, packing)
                    )
            best = {k: round(max(v)) for k, v in found.items()}
            ratio = best["best_fit"] / best["concat"]
            print(json.dumps({"block": block, "tokens_per_s": best, "ratio": round(ratio, 3)}))


if __name__ == "__main__":
    main()
