"""Packing benchmark (issue 34): ``concat`` against ``best_fit``, and Grain's
``BestFitPackIterDataset``, on the same documents in the same run.

Documents have realistic lengths: lognormal, median 600 tokens, sigma 1.2 (about 85 % fit
a row of 2049), clipped to [8, 32768], a boundary token each. At each block (2048 and 8192):

* from the index alone (document lengths, no tokens; the rows the pipeline builds, through
  the same order and packing classes): ``cut``, the share of the documents that fit a row
  (``length + 1 <= block + 1``) that are cut across rows; ``padding``, the share of row
  tokens that are padding; ``rows`` of an epoch; ``segments_per_row``, document pieces a
  row; ``index_s``, the time to count and lay out every row of the epoch. ``concat`` in the
  exact order, ``best_fit`` in the blocked order (windows of K·C documents) and the exact
  order (one window: the epoch).
* Grain: the same pieces (the tails left after the full rows of documents longer than a
  row, as ``best_fit`` cuts them) of the first ``grain_documents`` documents through
  ``grain.experimental.BestFitPackIterDataset`` with ``grain_bins`` open rows: padding and
  documents placed a second; and ``best_fit`` (K·C = 4,096) on the same documents.
* throughput: ``make_dataset`` end to end (plans, reads, model arrays) on a page-cached
  corpus written to a temporary folder, blocked order K·C = 4,096, 32 rows a batch; one
  iterator per packing, warmed up, then ``rounds`` rounds of ``steps`` batches each,
  alternating which packing goes first, so the machine's load hits both alike. The ratio
  is the median of the rounds' ``best_fit / concat`` ratios.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import grain
import numpy as np

import grainpack as gp
from grainpack.index.blocked import BlockedOrder
from grainpack.index.exact import ExactOrder
from grainpack.pipeline.packing import best_fit_stream

BLOCKS = (2048, 8192)
WINDOWS = (4096, 65536, None)  # best fit's K·C documents a window; None: the exact order
BLOCK_DOCS = 256  # C of the blocked order (K = window // C)
MEDIAN, SIGMA, LOW, HIGH = 600, 1.2, 8, 32768
BATCH, BOUNDARY_ID, VOCAB = 32, 1, 50_000
# round_tokens: tokens of a throughput round (batches of 32 rows: 2,047 at block 2048)
FULL = {
    "documents": 200_000,
    "grain_documents": 10_000,
    "corpus_documents": 40_000,
    "round_tokens": 1 << 27,
}
QUICK = {
    "documents": 4_000,
    "grain_documents": 300,
    "corpus_documents": 600,
    "round_tokens": 1 << 18,
}


def document_lengths(num_documents: int, *, seed: int = 0) -> np.ndarray:
    """Lognormal document lengths (median 600, sigma 1.2, clipped to [8, 32768]), int64.

    Example:
      >>> lengths = document_lengths(10_000)
      >>> int(lengths.min()) >= 8, bool(550 < np.median(lengths) < 650)
      (True, True)
    """
    rng = np.random.default_rng(seed)
    draw = rng.lognormal(np.log(MEDIAN), SIGMA, size=num_documents)
    return np.clip(draw, LOW, HIGH).astype(np.int64)


class _Lengths:
    """A corpus of these document lengths, as the orders read one (no tokens)."""

    def __init__(self, lengths: np.ndarray) -> None:
        self.lengths = lengths
        self.offsets = np.concatenate([[0], np.cumsum(lengths)])
        self.num_tokens = int(self.offsets[-1])

    def __len__(self) -> int:
        return len(self.lengths)

    def offsets_between(self, first: int, stop: int) -> np.ndarray:
        return self.offsets[first : stop + 1]

    def block_tokens(self, c: int) -> np.ndarray:
        edges = np.minimum(np.arange(0, len(self) + c, c), len(self))
        return np.diff(self.offsets[edges])[: -(-len(self) // c)]


def packing_metrics(
    lengths: np.ndarray, *, block: int, packing: str, window: int | None = None
) -> dict[str, Any]:
    """One epoch of ``lengths`` packed as the pipeline packs a source (seed 0, a boundary
    token after each document): ``cut``, ``padding``, ``rows``, ``segments_per_row`` and
    ``index_s`` (module docstring).

    Args:
      lengths: document lengths in tokens.
      block: model sequence length; rows hold ``block + 1`` tokens.
      packing: ``"concat"`` or ``"best_fit"``.
      window: documents a window of the blocked order (``K·C``, ``C`` = 256 or fewer), or
        ``None`` for the exact order.

    Example:
      >>> found = packing_metrics(document_lengths(2000), block=2048, packing="best_fit")
      >>> found["cut"], found["rows"]
      (0.0, 1140)
    """
    if packing not in ("concat", "best_fit"):
        raise ValueError(f"packing must be 'concat' or 'best_fit'; got {packing!r}")
    corpus = _Lengths(np.asarray(lengths, dtype=np.int64))
    if window is None:
        order: Any = ExactOrder()
    else:
        c = min(BLOCK_DOCS, window)
        order = BlockedOrder(block_docs=c, window_blocks=window // c)
    started = time.perf_counter()
    rows: Any = order.row_stream(
        corpus,
        unit="documents",
        block=block,
        seed=0,
        boundary=True,
        selector=None,
        block_tokens=corpus.block_tokens,
    )
    rows.plan_ahead = False  # every window is asked for once: nothing to plan ahead
    if packing == "best_fit":
        rows = best_fit_stream(rows, max_segments=None)
    n = rows.rows_in_epoch(0)
    spans = rows.spans(0, np.arange(n))
    elapsed = time.perf_counter() - started
    width = block + 1
    pieces = np.bincount(spans.document, minlength=len(corpus))
    fits = corpus.lengths + 1 <= width
    return {
        "cut": float((pieces[fits] > 1).sum() / fits.sum()),
        "padding": 1 - int(spans.filled.sum()) / (n * width),
        "rows": n,
        "segments_per_row": len(spans.document) / n,
        "index_s": elapsed,
    }


def grain_best_fit(lengths: np.ndarray, *, block: int, bins: int) -> dict[str, Any]:
    """Grain's online best fit over ``bins`` open rows, on the pieces ``best_fit`` packs
    (each document and its boundary token; a document longer than a row fills full rows
    first, and its tail is the piece): ``padding``, ``rows`` and ``docs_per_s``.

    Example:
      >>> found = grain_best_fit(document_lengths(200), block=2048, bins=16)
      >>> found["rows"], round(found["padding"], 4)
      (112, 0.034)
    """
    width = block + 1
    sizes = np.asarray(lengths, dtype=np.int64) + 1
    tails = sizes % width
    tails = tails[tails > 0]
    full_rows = int((sizes // width).sum())
    ones = np.ones(int(tails.max()), dtype=np.int32)
    pieces = grain.MapDataset.source(tails.tolist()).map(lambda size: {"tokens": ones[:size]})
    packed = grain.experimental.BestFitPackIterDataset(
        pieces.to_iter_dataset(), length_struct={"tokens": width}, num_packing_bins=bins, seed=0
    )
    started = time.perf_counter()
    rows = real = 0
    for element in packed:
        rows += 1
        real += int((element["tokens_segment_ids"] > 0).sum())
    elapsed = time.perf_counter() - started
    rows, real = rows + full_rows, real + full_rows * width
    return {
        "cut": 0.0,  # every piece fits a row: Grain places it whole
        "padding": 1 - real / (rows * width),
        "rows": rows,
        "docs_per_s": len(tails) / elapsed,
    }


def write_corpus(path: str | os.PathLike[str], num_documents: int) -> None:
    """A native corpus of ``num_documents`` random documents of :func:`document_lengths`
    (seed 3) at ``path``, for the throughput rounds."""
    rng = np.random.default_rng(2)
    documents = [
        rng.integers(2, VOCAB, size=n, dtype=np.uint16)
        for n in document_lengths(num_documents, seed=3)
    ]
    gp.write_corpus(path, documents, vocab_size=VOCAB)


def throughput(
    path: str | os.PathLike[str], *, block: int, round_tokens: int, rounds: int
) -> dict[str, Any]:
    """Tokens a second of ``make_dataset`` batches, ``concat`` and ``best_fit`` in
    alternating rounds of ``round_tokens`` (module docstring): per round and packing, the
    medians and the median ratio; also per CPU second of this process (``cpu_ratio``:
    steadier than the wall clock on a machine shared with other work)."""
    steps = max(1, round_tokens // (BATCH * (block + 1)))
    iterators = {}
    for packing in ("concat", "best_fit"):
        config = gp.PipelineConfig(
            sources={"web": str(path)},
            block=block,
            global_batch_size=BATCH,
            boundary_id=BOUNDARY_ID,
            order=gp.BlockedOrder(block_docs=BLOCK_DOCS, window_blocks=16),
            packing=packing,
        )
        iterators[packing] = iter(gp.make_dataset(config, process_index=0, process_count=1))
        for _ in range(steps):  # planning, numba's kernels, the page cache: not timed
            next(iterators[packing])
    tokens = steps * BATCH * (block + 1)
    wall: dict[str, list[float]] = {"concat": [], "best_fit": []}
    cpu: dict[str, list[float]] = {"concat": [], "best_fit": []}
    for k in range(rounds):
        for packing in ("concat", "best_fit") if k % 2 == 0 else ("best_fit", "concat"):
            started, used = time.perf_counter(), time.process_time()
            for _ in range(steps):
                next(iterators[packing])
            wall[packing].append(tokens / (time.perf_counter() - started))
            cpu[packing].append(tokens / (time.process_time() - used))
    ratios = [b / c for b, c in zip(wall["best_fit"], wall["concat"])]
    cpu_ratios = [b / c for b, c in zip(cpu["best_fit"], cpu["concat"])]
    return {
        "steps": steps,
        "tokens_per_s": {k: statistics.median(v) for k, v in wall.items()},
        "ratio": statistics.median(ratios),
        "cpu_ratio": statistics.median(cpu_ratios),
        "ratios": ratios,
        "cpu_ratios": cpu_ratios,
        "rounds": wall,
    }


def run_packing_benchmark(
    *,
    quick: bool = False,
    rounds: int = 5,
    grain_bins: int = 128,
    directory: str | os.PathLike[str] | None = None,
    json_path: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Measure and print the metrics table (module docstring) at blocks 2048 and 8192.

    Args:
      quick: small sizes (4,000 documents, a corpus of 600, rounds of 2**18 tokens): a
        smoke test whose index figures are exact.
      rounds: alternating throughput rounds (at least 5 for a median worth reading).
      grain_bins: open rows of Grain's packer.
      directory: where the throughput corpus goes (a temporary folder in it, deleted
        afterwards; default: the system's temporary folder).
      json_path: also write the results there.

    Returns:
      ``{"settings", "packing": [one row per block and packer], "throughput": [per block]}``.

    Example:
      >>> results = run_packing_benchmark(quick=True)  # doctest: +SKIP
    """
    sizes = QUICK if quick else FULL
    lengths = document_lengths(sizes["documents"])
    results: dict[str, Any] = {
        "settings": {
            "date": datetime.date.today().isoformat(),
            "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores usable",
            "quick": quick,
            "rounds": rounds,
            "grain_bins": grain_bins,
            "batch": BATCH,
            **sizes,
        },
        "packing": [],
        "throughput": [],
    }
    packing_metrics(lengths[:1000], block=BLOCKS[0], packing="best_fit")  # numba compiles
    for block in BLOCKS:
        rows = results["packing"]
        rows.append({"block": block, "packing": "concat", "window": None})
        rows[-1] |= packing_metrics(lengths, block=block, packing="concat")
        for window in WINDOWS:
            rows.append({"block": block, "packing": "best_fit", "window": window})
            rows[-1] |= packing_metrics(lengths, block=block, packing="best_fit", window=window)
        grain_lengths = lengths[: sizes["grain_documents"]]
        rows.append({"block": block, "packing": "grain", "window": None})
        rows[-1] |= grain_best_fit(grain_lengths, block=block, bins=grain_bins)
        same = {"block": block, "packing": "best_fit", "window": WINDOWS[0]}  # Grain's documents
        rows.append(same | {"documents": len(grain_lengths)})
        rows[-1] |= packing_metrics(
            grain_lengths, block=block, packing="best_fit", window=WINDOWS[0]
        )
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        write_corpus(f"{tmp}/web", sizes["corpus_documents"])
        for block in BLOCKS:
            found = throughput(
                f"{tmp}/web", block=block, round_tokens=sizes["round_tokens"], rounds=rounds
            )
            results["throughput"].append({"block": block, **found})
    print(format_packing_table(results))
    if json_path is not None:
        Path(json_path).write_text(json.dumps(results, indent=1) + "\n")
    return results


def _packer(row: dict[str, Any], bins: int) -> str:
    if row["packing"] == "grain":
        return f"Grain BestFitPackIterDataset, {bins} bins"
    if row["packing"] == "concat":
        return "concat (exact order)"
    window = row["window"]
    name = "best_fit, exact order" if window is None else f"best_fit, K·C = {window:,}"
    return name if "documents" not in row else f"{name}, Grain's {row['documents']:,} documents"


def format_packing_table(results: dict[str, Any]) -> str:
    """The results of :func:`run_packing_benchmark` as text tables.

    Example:
      >>> row = {"block": 8, "packing": "concat", "window": None, "cut": 0.25,
      ...        "padding": 0.001, "rows": 10, "segments_per_row": 1.5, "index_s": 0.01}
      >>> settings = {**QUICK, "date": "2026-12-04", "machine": "x86_64, 2 cores usable",
      ...             "quick": False, "rounds": 5, "grain_bins": 4, "batch": 32}
      >>> text = format_packing_table({"settings": settings, "packing": [row],
      ...                              "throughput": []})
      >>> print(text.splitlines()[4])
          8  concat (exact order)           25.00 %  0.1000 %    10          1.50    0.010
    """
    s = results["settings"]
    lines = [
        f"packing, {s['date']}, {s['machine']}: {s['documents']:,} documents (Grain: the "
        f"first {s['grain_documents']:,}), lognormal lengths (median {MEDIAN}, sigma {SIGMA})",
        "",
    ]
    header = ("block", "packer", "fitting docs cut", "padding", "rows", "segments/row", "index s")
    table = [
        (
            row["block"],
            _packer(row, s["grain_bins"]),
            f"{100 * row['cut']:.2f} %",
            f"{100 * row['padding']:.4f} %",
            f"{row['rows']:,}",
            "-" if "segments_per_row" not in row else f"{row['segments_per_row']:.2f}",
            f"{row['index_s']:.3f}" if "index_s" in row else f"{row['docs_per_s']:,.0f} docs/s",
        )
        for row in results["packing"]
    ]
    lines.append(_table(table, header))
    lines += [
        "",
        f"throughput, make_dataset, K·C = {16 * BLOCK_DOCS:,}, {s['batch']} rows a batch, "
        f"{s['rounds']} alternating rounds of {s['round_tokens']:,} tokens, corpus of "
        f"{s['corpus_documents']:,} documents (medians):",
        "",
    ]
    header = ("block", "concat tokens/s", "best_fit tokens/s", "best_fit/concat", "per round")
    header += ("per CPU second", "per round")
    table = [
        (
            t["block"],
            f"{t['tokens_per_s']['concat'] / 1e6:,.1f} M",
            f"{t['tokens_per_s']['best_fit'] / 1e6:,.1f} M",
            f"{t['ratio']:.2f}x",
            " ".join(f"{r:.2f}" for r in t["ratios"]),
            f"{t['cpu_ratio']:.2f}x",
            " ".join(f"{r:.2f}" for r in t["cpu_ratios"]),
        )
        for t in results["throughput"]
    ]
    lines.append(_table(table, header))
    if s["quick"]:
        lines += ["", "--quick: sizes too small for the throughput figures to mean anything"]
    return "\n".join(lines)


def _table(rows: list[tuple[Any, ...]], header: tuple[str, ...]) -> str:
    cells = [list(header), *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    out = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)
