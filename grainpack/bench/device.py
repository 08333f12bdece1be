# Over 400 lines, one module: one benchmark run; its loops must share one process, one JAX
# client and one corpus, and its table and checks read the one results dict it builds.
"""``grainpack bench --device``: what one host feeds its accelerator at global batch 256.

One run on ``grainpack bench``'s synthetic corpus (two sources mixed, documents with a
boundary token, ``block=2048``; a token is one of a row's ``block + 1``, as ``grainpack
bench`` counts) measures, and prints as it goes:

* ``gp.expand`` on the device: bit identity with the full layout, and its time per batch of
  8, 64 and 256 rows (median of many calls after a warm-up, each waited for);
* the device feed, tokens/s of a loop that puts each batch on the devices and waits for it
  (``jax.block_until_ready``, so device time counts): nanoGPT-style random windows +
  ``jax.device_put`` (the baseline), the full layout + ``device_put``, compact +
  ``device_put`` + ``gp.expand``, compact through ``gp.prefetch_to_device`` + ``gp.expand``;
  in-process (the four loops take turns, one pass each per round) and with Grain workers;
  each as a ratio to the baseline of the same run;
* host only, tokens/s of ``next()`` by worker count (0, 2, 4, 8, ... up to the cores), for
  the full and compact layouts;
* issue 36's acceptance checks, as PASS / FAIL (or n/a, with the reason) lines.

The quick figures come first, and the JSON (when asked for) is rewritten after each
section, so a run that a timeout cuts short leaves what it measured.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import tqdm

from grainpack.bench import peers
from grainpack.bench.throughput import (
    BLOCK,
    BOUNDARY_ID,
    SEED,
    _machine,
    _pass,
    _warm,
    bench_corpus,
)
from grainpack.corpus.cache import cache_root
from grainpack.jax import expand, prefetch_to_device
from grainpack.pipeline import fast
from grainpack.pipeline.config import PipelineConfig
from grainpack.pipeline.dataset import make_dataset
from grainpack.pipeline.expand import FULL_KEYS

BATCH = 256
EXPAND_ROWS = (8, 64, 256)
LAYOUTS = ("full", "compact")
FEEDS = {
    "nanogpt": "nanoGPT-style random windows + device_put",
    "full": "full layout + device_put",
    "compact": "compact + device_put + gp.expand",
    "prefetch": "compact through gp.prefetch_to_device + gp.expand",
}
# issue 36, acceptance 2 (an accelerator host with >= 8 cores)
WORKER_RATIO, PREFETCH_TOKENS, PREFETCH_RATIO = 2.5, 1.5e9, 4.0


def worker_counts(cores: int, *, quick: bool = False) -> list[int]:
    """0, then 2, 4, 8, ... up to ``cores`` (2 at most when ``quick``; 0 alone on 1 core).

    Example:
        >>> worker_counts(16), worker_counts(12), worker_counts(2), worker_counts(16, quick=True)
        ([0, 2, 4, 8, 16], [0, 2, 4, 8], [0, 2], [0, 2])
    """
    counts, n = [0], 2
    while n <= (min(cores, 2) if quick else cores):
        counts.append(n)
        n *= 2
    return counts


def _config(paths: dict[str, str], rows: int, layout: str) -> PipelineConfig:
    return PipelineConfig(
        sources=paths,
        block=BLOCK,
        global_batch_size=rows,
        seed=SEED,
        boundary_id=BOUNDARY_ID,
        layout=layout,
    )


def _sharding(rows: int) -> jax.sharding.Sharding:
    """Rows split over this host's devices (the first alone when they do not divide ``rows``)."""
    devices = jax.local_devices()
    if rows % len(devices):
        devices = devices[:1]
    mesh = jax.sharding.Mesh(np.array(devices), ("data",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))


def _iterator(config: PipelineConfig, workers: int) -> Any:
    return iter(make_dataset(config, process_index=0, process_count=1, worker_count=workers))


def _identity(paths: dict[str, str], rows: int, batches: int) -> bool:
    """Whether ``gp.expand`` of ``batches`` compact batches on the devices equals the full
    layout's arrays of the same steps, bit for bit (dtype, shape and every value)."""
    full = _iterator(_config(paths, rows, "full"), 0)
    compact = _iterator(_config(paths, rows, "compact"), 0)
    same = True
    for _ in range(batches):
        want = next(full)
        got = expand(jax.device_put(next(compact), _sharding(rows)))
        for key in FULL_KEYS:
            out = np.asarray(got[key])
            same &= out.dtype == want[key].dtype and np.array_equal(out, want[key])
    full.close()
    compact.close()
    return bool(same)


def _expand_time(paths: dict[str, str], rows: int, calls: int, seconds: float) -> dict[str, Any]:
    """Microseconds of ``gp.expand`` on a batch already on the devices, each call waited
    for: median and spread of up to ``calls`` calls (or ``seconds``), after a warm-up."""
    iterator = _iterator(_config(paths, rows, "compact"), 0)
    batch = jax.device_put(next(iterator), _sharding(rows))
    iterator.close()
    for _ in range(10):  # the first call compiles
        jax.block_until_ready(expand(batch))
    times: list[float] = []
    t_end = time.perf_counter() + seconds
    while len(times) < calls and (time.perf_counter() < t_end or len(times) < 5):
        t0 = time.perf_counter()
        jax.block_until_ready(expand(batch))
        times.append((time.perf_counter() - t0) * 1e6)
    p10, median, p90 = np.percentile(times, [10, 50, 90])
    return {"rows": rows, "calls": len(times), "median_us": median, "p10_us": p10, "p90_us": p90}


def _feed(kind: str, paths: dict[str, str], workers: int) -> tuple[Callable[[], object], Any]:
    """One step of the device-feed loop ``kind`` (a batch on the devices, waited for), and
    what to close after."""
    sharding = _sharding(BATCH)
    if kind == "nanogpt":  # int64 windows: JAX (x64 off) makes them int32 on the way
        get = peers.nanogpt(paths["a"], block=BLOCK, batch=BATCH, seed=SEED)
        return lambda: jax.block_until_ready(jax.device_put(get(), sharding)), None
    iterator = _iterator(_config(paths, BATCH, "full" if kind == "full" else "compact"), workers)
    if kind == "full":
        return lambda: jax.block_until_ready(jax.device_put(next(iterator), sharding)), iterator
    if kind == "compact":
        return (
            lambda: jax.block_until_ready(expand(jax.device_put(next(iterator), sharding))),
            iterator,
        )
    device_batches = prefetch_to_device(iterator, sharding, size=2)
    return lambda: jax.block_until_ready(expand(next(device_batches))), device_batches


def _host(paths: dict[str, str], layout: str, workers: int) -> tuple[Callable[[], object], Any]:
    iterator = _iterator(_config(paths, BATCH, layout), workers)
    return lambda: next(iterator), iterator


def _timed(
    step: Callable[[], object], passes: int, seconds: float, startup: float
) -> dict[str, Any]:
    tokens = BATCH * (BLOCK + 1)
    _pass(step, tokens, seconds / 2)  # warm-up: compiles, fills the workers' buffers
    rates = [_pass(step, tokens, seconds) for _ in range(passes)]
    return {"tokens_per_s": statistics.median(rates), "passes": rates, "startup_seconds": startup}


def _started(make: Callable[..., tuple[Callable[[], object], Any]], *args: Any) -> tuple:
    """``make(*args)``'s step and closer, and the seconds to its first step."""
    t0 = time.perf_counter()
    step, closer = make(*args)
    step()
    return step, closer, time.perf_counter() - t0


def _close(closer: Any) -> None:
    if closer is not None:
        closer.close()


def run_device_benchmark(
    *,
    tokens: int = 200_000_000,
    directory: str | os.PathLike[str] | None = None,
    passes: int = 5,
    quick: bool = False,
    json_path: str | os.PathLike[str] | None = None,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Measures an accelerator host's feed (see the module), prints it and returns it.

    Args:
      tokens: corpus size (half per source); the corpus of ``grainpack bench``, written once
        under ``directory`` and reused.
      directory: where the corpus lives (default ``bench-<tokens>`` in the cache).
      passes: timed passes of one second per figure (the median is reported).
      quick: a smoke test: a 4M-token corpus, 2 passes of 0.2 s, at most 2 workers.
      json_path: also write the results there (rewritten after each section).
      progress: a progress bar on stderr (default: when stderr is a terminal).

    Returns:
      ``{"date", "machine", "settings", "corpus", "identity", "expand_us", "device_feed",
      "host_only", "checks", "complete"}``.
    """
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
        raise ValueError(f"passes must be an int >= 1; got {passes=}")
    least = 4 * BATCH * (BLOCK + 1)  # two batches from each source
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < least:
        raise ValueError(f"tokens must be an int >= {least} for batches of {BATCH}; got {tokens=}")
    if progress is None:
        progress = sys.stderr.isatty()
    if quick:
        tokens, passes = min(tokens, 4_000_000), min(passes, 2)
    seconds, calls, checked = (0.2, 20, 2) if quick else (1.0, 500, 4)
    if directory is None:
        directory = cache_root() / f"bench-{tokens}"
    from absl import flags

    if not flags.FLAGS.is_parsed():  # Grain workers need them parsed (google/grain#1355)
        flags.FLAGS.mark_as_parsed()
    # the cores this process may use (a container's share), not the machine's
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    counts = worker_counts(cores, quick=quick)
    feed_workers = 8 if 8 in counts else counts[-1]
    device = jax.local_devices()[0]
    results: dict[str, Any] = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {
            **_machine(),
            "cores": cores,
            "jax": jax.__version__,
            "jax_platform": device.platform,
            "device_kind": device.device_kind,
            "device_count": jax.local_device_count(),
            "numba": fast.kernels() is not None,
        },
        "settings": {
            "block": BLOCK,
            "batch": BATCH,
            "passes": passes,
            "pass_seconds": seconds,
            "quick": quick,
            "worker_counts": counts,
            "feed_workers": feed_workers,
        },
        "complete": False,
    }

    def say(line: str) -> None:
        tqdm.tqdm.write(line, file=sys.stdout)
        sys.stdout.flush()

    def save() -> None:
        results["checks"] = checks(results)
        if json_path is not None:
            Path(json_path).write_text(json.dumps(results, indent=2) + "\n")

    t0 = time.perf_counter()
    paths = bench_corpus(directory, tokens)
    _warm(paths)
    results["corpus"] = {
        "directory": str(directory),
        "tokens": tokens,
        "setup_seconds": time.perf_counter() - t0,
    }
    say(_head(results))
    worker_feeds = [kind for kind in FEEDS if kind != "nanogpt"] if feed_workers else []
    stages = 2 + len(worker_feeds) + len(LAYOUTS) * len(counts)
    bar = tqdm.tqdm(total=stages, desc="bench --device", disable=not progress, file=sys.stderr)

    try:  # a timeout's SIGINT: what was measured is saved and shown
        bar.set_postfix_str("gp.expand: identity and time")
        results["identity"] = {str(r): _identity(paths, r, checked) for r in EXPAND_ROWS}
        say(f"gp.expand on the device == the full layout, bit for bit: {results['identity']}")
        results["expand_us"] = {}
        for rows in EXPAND_ROWS:
            x = results["expand_us"][str(rows)] = _expand_time(paths, rows, calls, 2 * seconds)
            say(
                f"gp.expand, {rows} rows: {x['median_us']:,.1f} µs per batch (median of "
                f"{x['calls']}; p10 {x['p10_us']:,.1f}, p90 {x['p90_us']:,.1f})"
            )
        bar.update()
        save()

        bar.set_postfix_str("device feed, in-process")
        feed: dict[str, dict[str, Any]] = {"0": {}}
        results["device_feed"] = feed
        loops = {kind: _started(_feed, kind, paths, 0) for kind in FEEDS}
        rates: dict[str, list[float]] = {kind: [] for kind in FEEDS}
        width = BATCH * (BLOCK + 1)
        for step, _, _ in loops.values():
            _pass(step, width, seconds / 2)  # warm-up
        for _ in range(passes):  # the loops take turns: the machine's load falls on all alike
            for kind, (step, _, _) in loops.items():
                rates[kind].append(_pass(step, width, seconds))
        for kind, (_, closer, startup) in loops.items():
            _close(closer)
            feed["0"][kind] = {
                "label": FEEDS[kind],
                "tokens_per_s": statistics.median(rates[kind]),
                "passes": rates[kind],
                "startup_seconds": startup,
                # a loop's pass against the baseline's pass of the same round
                "x_nanogpt": statistics.median(
                    a / b for a, b in zip(rates[kind], rates["nanogpt"])
                ),
            }
            say(_feed_line(feed["0"][kind], "in-process"))
        bar.update()
        save()

        baseline = feed["0"]["nanogpt"]["tokens_per_s"]
        for kind in worker_feeds:
            bar.set_postfix_str(f"device feed, {feed_workers} workers: {kind}")
            step, closer, startup = _started(_feed, kind, paths, feed_workers)
            entry = {"label": FEEDS[kind], **_timed(step, passes, seconds, startup)}
            _close(closer)
            entry["x_nanogpt"] = entry["tokens_per_s"] / baseline
            feed.setdefault(str(feed_workers), {})[kind] = entry
            say(_feed_line(entry, f"{feed_workers} workers"))
            bar.update()
            save()

        results["host_only"] = {layout: {} for layout in LAYOUTS}
        for layout in LAYOUTS:
            for workers in counts:
                bar.set_postfix_str(f"host only, {layout}, {workers} workers")
                step, closer, startup = _started(_host, paths, layout, workers)
                entry = _timed(step, passes, seconds, startup)
                _close(closer)
                results["host_only"][layout][str(workers)] = entry
                say(
                    f"host only, {layout} layout, {workers} workers: "
                    f"{entry['tokens_per_s'] / 1e6:,.1f} M tokens/s (first batch after "
                    f"{startup:.2f} s)"
                )
                bar.update()
                save()
    except KeyboardInterrupt:
        bar.close()
        save()
        say("\ninterrupted; the figures measured so far:\n")
        say(format_table(results, head=False))
        raise
    bar.close()
    results["complete"] = True
    save()
    say("")
    say(format_table(results, head=False))
    return results


def _head(results: dict[str, Any]) -> str:
    m, s, c = results["machine"], results["settings"], results["corpus"]
    return (
        f"grainpack bench --device, {results['date']}: {m['cores']} cores ({m['cpu']}), "
        f"{m['device_count']} x {m['device_kind']} ({m['jax_platform']}), jax {m['jax']}, "
        f"grain {m['grain']}, numba kernels {'on' if m['numba'] else 'off'}; corpus "
        f"{c['tokens']:,} tokens (2 sources mixed, documents), block {s['block']}, global "
        f"batch {s['batch']}, median of {s['passes']} passes of {s['pass_seconds']} s"
        + (" (--quick: a smoke test, not figures to report)" if s["quick"] else "")
    )


def _feed_line(entry: dict[str, Any], where: str) -> str:
    return (
        f"device feed, {entry['label']}, {where}: {entry['tokens_per_s'] / 1e6:,.1f} M "
        f"tokens/s ({entry['x_nanogpt']:.2f}x nanoGPT)"
    )


def checks(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The identity check and issue 36's acceptance 2 on ``results`` (measured or partial):
    ``{"check", "value", "bound", "status": "PASS" | "FAIL" | "n/a", "why"}`` each; a check
    is n/a where the run cannot show it (``why`` says why)."""
    m, s = results["machine"], results["settings"]
    host, feed = results.get("host_only", {}), results.get("device_feed", {})
    identity = results.get("identity")
    quick = "--quick: sizes too small to show it" if s["quick"] else ""
    n = m.get("cores", m["cpu_count"])
    cores = "" if n >= 8 else f"{n} cores: the check needs >= 8"
    device = "" if m["jax_platform"] != "cpu" else "no accelerator (JAX's device is the CPU)"
    # (check, value, bound: the value must be >= it, why it does not apply)
    rows: list[tuple[str, Any, float | bool, str]] = [
        (
            "gp.expand on the device == the full layout, bit for bit (8, 64, 256 rows)",
            None if identity is None else all(identity.values()),
            True,
            "",
        )
    ]
    for layout in LAYOUTS:
        h = host.get(layout, {})
        ratio = h["8"]["tokens_per_s"] / h["0"]["tokens_per_s"] if "8" in h and "0" in h else None
        check = f"host only, {layout} layout: 8 workers / in-process"
        rows.append((check, ratio, WORKER_RATIO, quick or cores))
    prefetch = [e["prefetch"] for e in feed.values() if "prefetch" in e]
    best = max(prefetch, key=lambda e: e["tokens_per_s"], default=None)
    for name, key, bound in (
        ("tokens/s", "tokens_per_s", PREFETCH_TOKENS),
        ("x the nanoGPT-style loop", "x_nanogpt", PREFETCH_RATIO),
    ):
        check = (
            "device feed, compact through gp.prefetch_to_device (the better of in-process "
            f"and workers), {name}"
        )
        rows.append((check, None if best is None else best[key], bound, quick or cores or device))
    out = []
    for check, value, bound, why in rows:
        why = why or ("" if value is not None else "not measured (the run stopped before)")
        status = "n/a" if why else "PASS" if value >= bound else "FAIL"
        out.append(
            {
                "check": check,
                "value": value,
                "bound": "== True" if bound is True else f">= {bound:g}",
                "status": status,
                "why": why,
            }
        )
    return out


def format_table(results: dict[str, Any], *, head: bool = True) -> str:
    """The figures of :func:`run_device_benchmark` as issue 36's tables, then the checks
    (``head``: after a first line that says the machine and the settings)."""
    lines = [_head(results), ""] if head else []
    host, counts = results.get("host_only", {}), results["settings"]["worker_counts"]
    columns = "".join(f"{f'{n} workers':>12}" for n in counts)
    lines.append(f"{'host only, M tokens/s':<40}{columns}")
    for layout in LAYOUTS:
        cells = [_mega(host.get(layout, {}).get(str(n))) for n in counts]
        lines.append(f"{f'{layout} layout':<40}" + "".join(f"{c:>12}" for c in cells))
    feed, n = results.get("device_feed", {}), results["settings"]["feed_workers"]
    lines += ["", f"{'to the device, M tokens/s (x nanoGPT)':<52}{'in-process':>20}{n:>10} workers"]
    for kind, label in FEEDS.items():
        cells = [_mega(feed.get(w, {}).get(kind), ratio=True) for w in ("0", str(n))]
        lines.append(f"{label:<52}" + "".join(f"{c:>20}" for c in cells))
    lines += ["", "gp.expand on the device, µs per batch: median (p10-p90)"]
    for rows, x in results.get("expand_us", {}).items():
        spread = f"{x['p10_us']:,.1f}-{x['p90_us']:,.1f}"
        lines.append(f"{rows:>5} rows: {x['median_us']:,.1f} ({spread})")
    lines.append("")
    for c in results.get("checks") or checks(results):
        value = c["value"]
        shown = "-" if value is None else str(value) if isinstance(value, bool) else f"{value:,.3g}"
        why = f" ({c['why']})" if c["why"] else ""
        lines.append(f"{c['status']:<5} {c['check']} {c['bound']}: {shown}{why}")
    return "\n".join(lines)


def _mega(entry: dict[str, Any] | None, *, ratio: bool = False) -> str:
    """An entry's M tokens/s (and its ratio to nanoGPT's loop), or ``-`` if not measured."""
    if entry is None:
        return "-"
    text = f"{entry['tokens_per_s'] / 1e6:,.1f}"
    return f"{text} ({entry['x_nanogpt']:.2f}x)" if ratio else text
