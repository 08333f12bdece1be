# Over 400 lines, one module: one benchmark script: corpus writer, measurements and report belong
# together.
"""Scale benchmarks: the blocked order on 10**8-10**9-document corpora, and its randomness.

:func:`run_scale_benchmarks` writes a native corpus of ``documents`` documents with
realistic lengths (lognormal, median 600, clipped to [8, 32768]; token files are *sparse*:
their holes read as zeros, so 10**9 documents, about 10**12 tokens, take the 8 GB of
offsets on disk) into a temporary directory under ``directory`` (deleted afterwards unless
``keep``), and measures in fresh processes, with ``order=BlockedOrder(4096, 256)``,
``block=2048``, a global batch of 8 and one source:

* the first batch of ``make_dataset`` (wall and CPU time, from ``make_dataset`` to the
  first batch, Grain and JAX already imported);
* a restore at step 10**8 (``set_state``, which recomputes and checks the last batch,
  then ``next``);

each with the corpus files dropped from the page cache first (cold: a job starting on a
fresh machine) and again with them cached (warm);
* the peak anonymous memory (``RssAnon`` of ``/proc/self/status``, sampled every
  millisecond: the process's own memory; mapped corpus pages are page cache);
* that ``order="exact"`` refuses the corpus at once (the memory guard);

and, in-process on a second corpus (``boundary_documents``), the worst ``next()`` over 10**4
batches around an epoch boundary against the worst over 10**4 batches away from it.

Each with ``packing="concat"`` and again with ``packing="best_fit"`` (whose epochs' rows are
known only by packing their windows: its state of step 10**8 is made, in setup, by counting
every window before it, and its stall measurement adds a range around a window change in
the middle of the epoch).

:func:`order_quality` measures what the blocked order costs in randomness, next to the
exact order, on the index alone: distinct storage blocks per global batch, the correlation
of document ids between consecutive batches, the design effect of a storage-sorted
attribute, and that every document is visited once per epoch.
"""

from __future__ import annotations

import datetime
import gc
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from grainpack.corpus.native import FORMAT_NAME, FORMAT_VERSION, MANIFEST_NAME
from grainpack.corpus.summary import SUMMARY_BLOCK_DOCS

BLOCK, BATCH, SEED = 2048, 8, 0
ORDER = {"block_docs": 4096, "window_blocks": 256}
MEDIAN, SIGMA, LOW, HIGH = 600, 1.0, 8, 32768
RESTORE_STEP = 10**8
WINDOW_BATCHES = 10**4
# Token files are sparse, so their content is not hashed: the manifest records this marker
# (``grainpack verify`` reports the mismatch; the index math never reads tokens' hashes).
SPARSE_SHA256 = hashlib.sha256(b"grainpack sparse benchmark tokens").hexdigest()


def sparse_lengths(num_documents: int, *, seed: int = SEED, chunk: int = 1 << 22) -> Any:
    """Lognormal document lengths (median 600, clipped to [8, 32768]), in chunks.

    Example:
        >>> lengths = np.concatenate(list(sparse_lengths(10_000)))
        >>> len(lengths), int(lengths.min()) >= 8, bool(500 < np.median(lengths) < 700)
        (10000, True, True)
    """
    rng = np.random.default_rng([seed, 0x5CA1E])
    for lo in range(0, num_documents, chunk):
        draw = rng.lognormal(np.log(MEDIAN), SIGMA, size=min(chunk, num_documents - lo))
        yield np.clip(draw, LOW, HIGH).astype(np.int64)


def write_sparse_corpus(
    path: str | os.PathLike[str], num_documents: int, *, shard_tokens: int = 1 << 30
) -> dict[str, Any]:
    """Writes a native corpus (format version 2, uint16) with sparse token files.

    Shards roll over as :class:`~grainpack.ingest.CorpusWriter`'s do; offsets and block totals
    are real (with their sha256); the token files are holes of the right size.

    Returns:
        The manifest.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=False)
    shards: list[dict[str, Any]] = []
    pending = np.zeros(0, dtype=np.int64)
    chunks = sparse_lengths(num_documents, chunk=1 << 20)
    first = total = 0
    while first < num_documents:
        while len(pending) < num_documents - first and pending.sum() < shard_tokens:
            pending = np.concatenate([pending, next(chunks)])
        ends = np.cumsum(pending)
        n = max(1, int(np.searchsorted(ends, shard_tokens, side="right")))
        n = min(n, num_documents - first)
        lengths, pending = pending[:n], pending[n:]
        shards.append(_write_shard(path, len(shards), first, lengths))
        first += n
        total += int(ends[n - 1])
    manifest = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "dtype": "uint16",
        "vocab_size": 50257,
        "eos_id": None,
        "num_documents": num_documents,
        "num_tokens": total,
        "summary_block_docs": SUMMARY_BLOCK_DOCS,
        "shards": shards,
    }
    (path / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _write_shard(path: Path, k: int, first: int, lengths: np.ndarray) -> dict[str, Any]:
    offsets = np.zeros(len(lengths) + 1, dtype="<i8")
    np.cumsum(lengths, out=offsets[1:])
    names = [f"{kind}-{k:05d}.bin" for kind in ("tokens", "offsets", "summary")]
    with open(path / names[0], "wb") as f:
        f.truncate(2 * int(offsets[-1]))  # a hole: reads as zeros, takes no disk
    offsets.tofile(path / names[1])
    c = SUMMARY_BLOCK_DOCS
    cuts = np.r_[0, np.arange(-first % c or c, len(lengths), c), len(lengths)]
    cuts = np.unique(cuts)
    summary = np.diff(offsets[cuts]).astype("<i8")
    summary.tofile(path / names[2])
    return {
        "tokens_file": names[0],
        "offsets_file": names[1],
        "summary_file": names[2],
        "num_tokens": int(offsets[-1]),
        "num_documents": len(lengths),
        "tokens_sha256": SPARSE_SHA256,
        "offsets_sha256": hashlib.sha256(offsets.tobytes()).hexdigest(),
        "summary_sha256": hashlib.sha256(summary.tobytes()).hexdigest(),
    }


# -- measurements in a fresh process -----------------------------------------------------------


class _AnonPeak:
    """Samples ``RssAnon`` every millisecond on a thread; ``peak`` in bytes."""

    def __init__(self) -> None:
        self.peak, self._stop = _status("RssAnon"), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.001):
            self.peak = max(self.peak, _status("RssAnon"))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _status("RssAnon"))
        return self.peak


def _status(key: str) -> int:
    """A ``/proc/self/status`` field in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _config(path: str, order: Any, packing: str = "concat") -> Any:
    import grainpack as gp

    return gp.PipelineConfig(
        sources={"c": path}, block=BLOCK, global_batch_size=BATCH, seed=SEED,
        boundary_id=50256, order=order, packing=packing,
    )  # fmt: skip


def _blocked() -> Any:
    import grainpack as gp

    return gp.BlockedOrder(**ORDER)


def _task(name: str, path: str, extra: dict[str, Any]) -> dict[str, Any]:
    """One measurement, in this (fresh) process."""
    import grainpack as gp
    from grainpack.pipeline.dataset import make_dataset  # imports Grain, JAX

    baseline = _status("RssAnon")
    packing = extra.get("packing", "concat")
    config = _config(path, _blocked(), packing)
    if name == "state":  # the checkpoint state of step RESTORE_STEP (setup, not timed)
        dataset = gp.make_dataset(config, process_index=0, process_count=1)
        return iter(dataset).state_after(extra.get("step", RESTORE_STEP))
    if name == "exact":
        t0 = time.perf_counter()
        try:
            gp.make_dataset(_config(path, "exact"), process_index=0, process_count=1)
        except ValueError as err:
            return {"refused_s": time.perf_counter() - t0, "message": str(err)}
        return {"refused_s": None}
    peak = _AnonPeak()
    wall, cpu = time.perf_counter(), time.process_time()
    iterator = iter(make_dataset(config, process_index=0, process_count=1))
    if name == "restore":
        iterator.set_state(extra["state"])
    batch = next(iterator)
    out = {
        "wall_s": time.perf_counter() - wall,
        "cpu_s": time.process_time() - cpu,
        "anon_peak_bytes": peak.stop(),
        "anon_import_bytes": baseline,
        "rss_peak_bytes": _status("VmHWM"),
        "tokens": int(batch["loss_mask"].sum()),
    }
    return out


def evict(path: str | os.PathLike[str]) -> None:
    """Drops the corpus's files from the page cache (``posix_fadvise(DONTNEED)``), so the
    next measurement reads from disk, as a job starting on a fresh machine does."""
    for file in Path(path).iterdir():
        fd = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _in_fresh_process(name: str, path: str, *, cold: bool = False, **extra: Any) -> dict[str, Any]:
    if cold:
        evict(path)
    code = (
        "import json, sys; from grainpack.bench.scale import _task; "
        "print(json.dumps(_task(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, name, path, json.dumps(extra)],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        raise RuntimeError(f"scale task {name!r} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def boundary_stall(
    path: str, *, batches: int = WINDOW_BATCHES, repeats: int = 3, packing: str = "concat"
) -> dict[str, Any]:
    """Worst ``next()`` over ``batches`` batches around the first epoch boundary, and over
    as many away from it (the middle of the epoch), in this process (``worker_count=0``);
    with ``packing="best_fit"`` also around a window change in the middle of the epoch (a
    window is packed when its rows are first needed), "away" then lying inside one window.

    Each range is run ``repeats`` times from a restore shortly before it (one Grain element
    of warm-up and the planning ahead the restore starts are not timed: a restore is not a
    boundary); a batch's time is its minimum over the runs, so the machine's
    noise (other processes on shared cores) drops out while a stall of the pipeline's own,
    which happens in every run, stays. The raw worst and the worst main-thread CPU time are
    reported too. ``ratio``: the worst of the "around" ranges over the worst "away".
    """
    import grainpack as gp
    from grainpack.index.blocked import _prefetcher
    from grainpack.pipeline.batches import PipelineBatches

    config = _config(path, _blocked(), packing)
    boundary, warmup, batches, starts = stall_ranges(PipelineBatches(config), batches)
    out: dict[str, Any] = {"boundary_step": boundary, "batches": batches, "repeats": repeats}
    # the restores' states, in step order from one iterator (best_fit counts each window once)
    setup = iter(gp.make_dataset(config, process_index=0, process_count=1))
    states = {
        label: setup.state_after(starts[label] - warmup) for label in sorted(starts, key=starts.get)
    }
    for label, start in starts.items():
        wall, cpu = np.empty((repeats, batches)), np.empty((repeats, batches))
        for r in range(repeats):
            iterator = iter(gp.make_dataset(config, process_index=0, process_count=1))
            iterator.set_state(states[label])
            for _ in range(warmup):
                next(iterator)
            _prefetcher().submit(lambda: None).result()  # the restore's planning ahead is done
            for i in range(batches):
                t0, c0 = time.perf_counter(), time.thread_time()
                next(iterator)
                wall[r, i], cpu[r, i] = time.perf_counter() - t0, time.thread_time() - c0
            iterator.close()
            gc.collect()
        best = wall.min(axis=0)
        out[label] = {
            "first_step": start,
            "worst_s": float(best.max()),
            "worst_step": start + int(best.argmax()),
            "worst_raw_s": float(wall.max()),
            "worst_raw_step": start + int(wall.max(axis=0).argmax()),
            "worst_cpu_s": float(cpu.min(axis=0).max()),
            "p99_s": float(np.percentile(best, 99)),
            "median_s": float(np.median(best)),
        }
    around = [label for label in starts if label.startswith("around")]
    out["ratio"] = max(out[a]["worst_s"] for a in around) / out["away"]["worst_s"]
    out["cpu_ratio"] = max(out[a]["worst_cpu_s"] for a in around) / out["away"]["worst_cpu_s"]
    return out


def stall_ranges(
    pipeline: Any, batches: int = WINDOW_BATCHES
) -> tuple[int, int, int, dict[str, int]]:
    """``(boundary, warmup, batches, starts)`` of :func:`boundary_stall`: the step that
    crosses into epoch 1, the element of warm-up before each range, the batches per range
    (fewer on a small corpus) and the first step of each range by label. The ranges are
    apart: "away" starts mid-epoch and ends before "around", which straddles the boundary.
    With ``packing="best_fit"`` (its epoch's rows counted here, window by window) and two
    or more windows an epoch: "around_window" straddles the change into the middle window
    of epoch 0, "away" lies in the middle of the window before it, "around_epoch"
    straddles the boundary.

    Raises:
        ValueError: the epoch (or the window) is too short for such ranges.
    """
    rows = pipeline.rows(0)
    boundary = rows.rows_in_epoch(0) // BATCH
    warmup = pipeline.steps_per_element
    changes = []  # steps whose batch holds the first row of a window of epoch 0
    if pipeline.config.packing == "best_fit":
        changes = [rows.window_anchor(0, w).occurrence // BATCH for w in range(1, rows.num_windows)]
    if changes:
        k = len(changes) // 2
        change, before = changes[k], changes[k - 1] if k else 0
        batches = min(batches, (change - before) // 2)
        away = max((before + change) // 2 - batches // 2, warmup + 1)
        starts = {
            "away": away,
            "around_window": change - batches // 2,
            "around_epoch": boundary - batches // 2,
        }
        short = batches < 2 or away + batches > change - batches // 2
    else:
        away = max(boundary // 2, warmup + 1)  # after one element of warm-up from step >= 0
        batches = min(batches, (boundary - away) * 2 // 3)  # away + batches <= around
        starts = {"away": away, "around": boundary - batches // 2}
        short = batches < 2
    if short:
        raise ValueError(
            f"the boundary corpus's first epoch ends at step {boundary}, too soon for two "
            f"ranges of batches after {warmup} steps of warm-up (it must end at step "
            f"{warmup + 4} or later); give more --boundary-documents (default 10**8)"
        )
    return boundary, warmup, batches, starts


# -- randomness --------------------------------------------------------------------------------


class _Lengths:
    """A corpus layout over an in-memory lengths array (quality is index math only)."""

    def __init__(self, lengths: np.ndarray) -> None:
        self.offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
        self.num_tokens = int(self.offsets[-1])

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def offsets_between(self, first: int, stop: int) -> np.ndarray:
        return self.offsets[first : stop + 1]


def order_quality(
    *,
    num_documents: int = 10**7,
    configs: tuple[tuple[int, int], ...] = ((4096, 256), (1024, 1024), (256, 4096), (64, 16384)),
    batch_rows: tuple[int, ...] = (256, 2048),
) -> list[dict[str, Any]]:
    """Randomness of the blocked order next to the exact order, on realistic lengths.

    Epoch 0 of one source (so a global batch of ``batch_rows`` rows is consecutive rows of
    the stream), over every global batch of the epoch. Two storages: documents stored in
    their input order, where the input is clustered (think of a corpus sorted by domain or
    crawl date: the attribute of interest follows the input position), and stored with
    ``shuffle`` (write time). Per order, storage and batch size:

    * ``storage_regions_per_batch``: distinct storage regions of 4096 documents a global
      batch reads, and that divided by its documents (1.0: each from its own region);
    * ``lag1_correlation``: correlation of the mean input position of consecutive batches
      (0 for independent batches);
    * ``design_effect``: variance of a batch's share of the first input decile over its
      variance under independent draws (1.0: as random as independent draws);
    * ``visited_once``: every document starts exactly once in the epoch.
    """
    from grainpack.index.blocked import BlockedOrder, BlockedRows
    from grainpack.index.stream import SourceRows
    from grainpack.ingest.writer import shuffled_order

    lengths = np.concatenate(list(sparse_lengths(num_documents, seed=1)))
    results = []
    for storage in ("input order", "shuffled"):
        stored = lengths
        if storage == "shuffled":  # stored document i is input document order[i]
            order = shuffled_order(np.arange(num_documents), num_documents, SEED)
            stored = lengths[order]
        streams: list[tuple[str, Any]] = []
        if storage == "input order":  # the exact order is a full permutation either way
            rows = SourceRows(stored, unit="documents", block=BLOCK, seed=SEED, boundary=True)
            streams.append(("exact", rows))
        for c, k in configs:
            totals = np.add.reduceat(stored, np.arange(0, len(stored), c))
            rows = BlockedRows(
                _Lengths(stored), order=BlockedOrder(c, k), unit="documents", block=BLOCK,
                seed=SEED, boundary=True, block_tokens=totals, plan_ahead=False,
            )  # fmt: skip
            streams.append((f"blocked C={c} K={k}", rows))
        for label, rows in streams:
            t0 = time.process_time()
            per_row, visits = _epoch_first_documents(rows, num_documents)
            once = bool((visits == 1).all())
            for size in batch_rows:
                metrics = _batch_metrics(
                    per_row, size, num_documents, order if storage == "shuffled" else None
                )
                results.append(
                    {"order": label, "storage": storage, "batch_rows": size, "visited_once": once}
                    | metrics
                )
            results[-1]["cpu_s"] = time.process_time() - t0
    return results


def _epoch_first_documents(rows: Any, n: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Per row of epoch 0, the documents that start in it; and visits per document."""
    visits = np.zeros(n, dtype=np.int64)
    per_row: list[np.ndarray] = []
    total = rows.rows_in_epoch(0)
    step = 1 << 16
    for lo in range(0, total, step):
        spans = rows.spans(0, np.arange(lo, min(lo + step, total)))
        first = spans.start == 0
        docs, row = spans.document[first], spans.row[first]
        np.add.at(visits, docs, 1)
        per_row.extend(np.split(docs, np.searchsorted(row, np.arange(1, min(step, total - lo)))))
    return per_row, visits


def _batch_metrics(
    per_row: list[np.ndarray], size: int, n: int, input_of: np.ndarray | None
) -> dict[str, Any]:
    batches = [np.concatenate(per_row[i : i + size]) for i in range(0, len(per_row), size)]
    batches = [b for b in batches if len(b)]
    docs = np.array([len(b) for b in batches])
    regions = np.array([len(np.unique(b // 4096)) for b in batches])
    inputs = batches if input_of is None else [input_of[b] for b in batches]
    means = np.array([b.mean() for b in inputs])
    share = np.array([(b < n // 10).mean() for b in inputs])
    deff = share.var() / (0.1 * 0.9 / docs.mean())
    return {
        "batches": len(batches),
        "documents_per_batch": float(docs.mean()),
        "storage_regions_per_batch": float(regions.mean()),
        "storage_regions_per_document": float((regions / docs).mean()),
        "lag1_correlation": float(np.corrcoef(means[:-1], means[1:])[0, 1]),
        "design_effect": float(deff),
    }


# -- the whole run -----------------------------------------------------------------------------


def run_scale_benchmarks(
    *,
    documents: int = 10**9,
    boundary_documents: int = 10**8,
    directory: str | os.PathLike[str] | None = None,
    keep: bool = False,
    quality_documents: int = 10**7,
    json_path: str | os.PathLike[str] | None = None,
    packings: tuple[str, ...] = ("concat", "best_fit"),
) -> dict[str, Any]:
    """Writes the corpora, runs every measurement, prints and returns the results: those
    of ``packing="concat"`` at the top level, those of ``"best_fit"`` under ``best_fit``
    (each packing in ``packings``)."""
    root = Path(tempfile.mkdtemp(prefix="grainpack-scale-", dir=directory))
    results: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "machine": {
            "cpu_count": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "numpy": np.__version__,
        },
        "directory": str(root),
        "order": ORDER,
        "block": BLOCK,
        "global_batch_size": BATCH,
    }
    try:
        for label, n in (("boundary", boundary_documents), ("large", documents)):
            t0 = time.perf_counter()
            manifest = write_sparse_corpus(root / label, n)
            results[f"{label}_corpus"] = {
                "documents": n,
                "tokens": manifest["num_tokens"],
                "shards": len(manifest["shards"]),
                "disk_bytes": _disk_usage(root / label),
                "write_s": time.perf_counter() - t0,
            }
            print(f"wrote {label} corpus: {results[f'{label}_corpus']}", flush=True)
            if label == "boundary":  # too small for the stall measurement: say so now
                from grainpack.pipeline.batches import PipelineBatches

                stall_ranges(PipelineBatches(_config(str(root / label), _blocked())))
        large = str(root / "large")
        for packing in packings:
            out = results if packing == "concat" else results.setdefault(packing, {})
            # best_fit makes the state by counting every window before the step: a step of about
            # two epochs at most (10**8 at 10**9 documents; a small corpus has many epochs)
            step = RESTORE_STEP if packing == "concat" else min(RESTORE_STEP, documents // BATCH)
            t0 = time.perf_counter()
            state = _in_fresh_process("state", large, packing=packing, step=step)
            out["state_setup_s"] = time.perf_counter() - t0
            out["restore_step"] = step
            print(f"{packing}: state of step {step} made in {out['state_setup_s']:.1f} s")
            for cache in ("cold", "warm"):  # corpus files evicted from the page cache, or not
                cold = cache == "cold"
                first = _in_fresh_process("first", large, cold=cold, packing=packing)
                out[f"first_batch_{cache}"] = first
                print(f"{packing}: first batch ({cache} page cache): {first}", flush=True)
                restore = _in_fresh_process(
                    "restore", large, cold=cold, state=state, packing=packing
                )
                out[f"restore_{cache}"] = restore
                print(
                    f"{packing}: restore at step {step} ({cache} page cache): {restore}",
                    flush=True,
                )
            if packing == "concat":
                results["exact_refused"] = _in_fresh_process("exact", large)
                print(f"exact order: {results['exact_refused']}", flush=True)
            out["boundary_stall"] = boundary_stall(str(root / "boundary"), packing=packing)
            print(f"{packing}: boundaries: {out['boundary_stall']}", flush=True)
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    if quality_documents:
        results["quality"] = order_quality(num_documents=quality_documents)
        for row in results["quality"]:
            print(row, flush=True)
    if json_path is not None:
        Path(json_path).write_text(json.dumps(results, indent=1) + "\n")
    return results


def _disk_usage(path: Path) -> int:
    return sum(f.stat().st_blocks * 512 for f in path.iterdir())
