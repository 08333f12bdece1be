"""Reading a corpus from object storage through a throttled store (issue 33, acceptance 2, 3).

Starts a real S3 server (moto's, on loopback) and the fault-injecting proxy of the tests
(tests/remote/proxy.py) in front of it, with ``--latency`` seconds added to every request
and ``--cap`` bytes per second for all responses together, both in a child process; uploads
two corpora to the server (directly, not through the proxy), then measures through the
proxy:

- **cold start**: a corpus of ``--documents`` short documents (1-31 tokens: startup depends
  on the number of documents, not on tokens), blocked order, from an empty host cache:
  seconds from ``make_dataset`` to the first batch, and the bytes and requests fetched before
  it; the same for a restore at step ``--restore-step``;
- **steady state**: the same pipeline (documents, blocked order with ``--order C K``, by
  default windows of 4 blocks of 8,192 documents, about 64 MB: three fit the default LRU
  beside the rows staged ahead and the requests in flight, so windows are read ahead
  whole, two ahead; block 2048, global batch 64) on a corpus of ``--steady-documents``
  documents of realistic lengths (lognormal, median 600; about 2 GB, four times the LRU),
  local, then remote in ``--rounds`` rounds, after every object was read once (the test
  store's first reads are slower): tokens per second in ``next()`` and its p99 over
  ``--steps`` steps after ``--warmup`` (until the LRU is full), from the start of the
  round's own epoch (a restore; the span inside it, so that no byte is read twice), then
  what the server delivers to plain concurrent ranged GETs of that span's mean request
  size (``--in-flight`` at a time, as many bytes as it fetched); requests per GiB
  delivered. The store's rate drifts by tens of percent within minutes: each round's
  ratio is to the plain GETs measured right after it, and the summary gives the medians
  over rounds.

Run: ``python benchmarks/bench_remote.py [--json out.json]`` (needs the ``remote`` and
test extras: obstore, moto). Every batch read from the URL is compared with the local one.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import datetime
import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

BUCKET = "grainpack-bench"
BLOCK, BATCH = 2048, 64
MiB = 1 << 20
# moto reads a whole object from its spooled file for every ranged GET: the cold-start corpus
# has 8 MiB token objects (its reads are small), the steady state's 32 MiB ones (reads of
# request_bytes; the writer's default shard is 512 MiB)
SHARD_TOKENS, STEADY_SHARD_TOKENS = 1 << 22, 1 << 24


# -- corpora ----------------------------------------------------------------------------------


def write_corpus(path: Path, lengths: np.ndarray, *, shard_tokens: int, seed: int) -> None:
    """A native corpus (uint16) of documents of ``lengths`` with random tokens, written shard
    by shard with numpy (10**7 documents in seconds, where the writer adds one at a time)."""
    from grainpack.corpus.native import FORMAT_NAME, FORMAT_VERSION, MANIFEST_NAME
    from grainpack.corpus.summary import SUMMARY_BLOCK_DOCS

    path.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    ends = np.cumsum(lengths)
    shards, first, total = [], 0, 0
    while first < len(lengths):
        base = int(ends[first - 1]) if first else 0
        stop = max(first + 1, int(np.searchsorted(ends, base + shard_tokens, side="right")))
        mine = lengths[first:stop]
        offsets = np.zeros(len(mine) + 1, dtype="<i8")
        np.cumsum(mine, out=offsets[1:])
        tokens = rng.integers(1, 50257, size=int(offsets[-1]), dtype=np.uint16)
        c = SUMMARY_BLOCK_DOCS
        cuts = np.unique(np.r_[0, np.arange(-first % c or c, len(mine), c), len(mine)])
        summary = np.diff(offsets[cuts]).astype("<i8")
        k = len(shards)
        names = [f"{kind}-{k:05d}.bin" for kind in ("tokens", "offsets", "summary")]
        for name, array in zip(names, (tokens, offsets, summary)):
            array.astype(array.dtype.newbyteorder("<")).tofile(path / name)
        shards.append(
            {
                "tokens_file": names[0],
                "offsets_file": names[1],
                "summary_file": names[2],
                "num_tokens": int(offsets[-1]),
                "num_documents": len(mine),
                "tokens_sha256": hashlib.sha256(tokens.tobytes()).hexdigest(),
                "offsets_sha256": hashlib.sha256(offsets.tobytes()).hexdigest(),
                "summary_sha256": hashlib.sha256(summary.tobytes()).hexdigest(),
            }
        )
        total += int(offsets[-1])
        first = stop
    manifest = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "dtype": "uint16",
        "vocab_size": 50257,
        "eos_id": None,
        "num_documents": len(lengths),
        "num_tokens": total,
        "summary_block_docs": SUMMARY_BLOCK_DOCS,
        "shards": shards,
    }
    (path / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1) + "\n")


def short_lengths(n: int) -> np.ndarray:
    """1 to 31 tokens (16 on average): a window of the default order (10**6 documents)
    holds about two Grain elements (2**23 tokens), as documents of hundreds of tokens'
    windows hold hundreds."""
    return np.random.default_rng([n, 1]).integers(1, 32, size=n)


def realistic_lengths(n: int) -> np.ndarray:
    from grainpack.bench.scale import sparse_lengths

    return np.concatenate(list(sparse_lengths(n)))


def upload(folder: Path, url: str) -> None:
    """Every file of ``folder`` under ``url``, ``manifest.json`` last."""
    import obstore
    from obstore.store import from_url

    store = from_url(url)
    files = sorted(p for p in folder.iterdir() if p.is_file())
    files.sort(key=lambda p: p.name == "manifest.json")
    for path in files:
        obstore.put(store, path.name, path.read_bytes())


# -- the store: moto and the proxy, in a child process -----------------------------------------


def _serve(
    ready: Any, stop: Any, latency: float, cap: float, cpus: set[int], files: str | None
) -> None:
    import logging

    if cpus:
        os.sched_setaffinity(0, cpus)

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "remote"))
    from proxy import FaultProxy

    if files is None:  # moto's S3 server
        import portpicker
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        port = portpicker.pick_unused_port()
        server: Any = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        upstream = f"127.0.0.1:{port}"
    else:  # the tests' static file server (ranges read from the files, ETags, If-Match)
        from http_files import FileServer

        server = FileServer(Path(files)).start()
        upstream = server.url.removeprefix("http://")
    proxy = FaultProxy(upstream).start()
    proxy.latency, proxy.bandwidth = latency, cap
    ready.put((f"http://{upstream}", proxy.url))
    stop.wait()
    proxy.stop()
    server.stop()


@contextlib.contextmanager
def store(
    latency: float, cap: float, cpus: set[int] = frozenset(), files: Path | None = None
) -> Iterator[tuple[str, str]]:
    """(server URL, proxy URL) of a store running in a child process (on ``cpus``, if
    given): moto's S3 server, or with ``files``, a static file server of that folder."""
    context = multiprocessing.get_context("spawn")
    ready, stop = context.Queue(), context.Event()
    args = (ready, stop, latency, cap, set(cpus), None if files is None else str(files))
    child = context.Process(target=_serve, args=args, daemon=True)
    child.start()
    try:
        yield ready.get(timeout=120)
    finally:
        stop.set()
        child.join(timeout=30)


def endpoint(url: str) -> None:
    os.environ["AWS_ENDPOINT_URL"] = url


# -- measurements -------------------------------------------------------------------------------


def config(source: str, block_docs: int = 4096, window_blocks: int = 256) -> Any:
    import grainpack as gp

    return gp.PipelineConfig(
        sources={"c": source}, block=BLOCK, global_batch_size=BATCH, seed=3,
        order=gp.BlockedOrder(block_docs=block_docs, window_blocks=window_blocks),
    )  # fmt: skip


def remote_stats(iterator: Any) -> dict[str, float]:
    return iterator.remote_stats()["c"]


def cold_start(local: str, url: str, restore_step: int, cache: Path) -> dict[str, Any]:
    """First batch from an empty host cache, at step 0 and restored at ``restore_step``."""
    import grainpack as gp

    out: dict[str, Any] = {}
    for name, step in (("start", 0), ("restore", restore_step)):
        state = None
        if step:  # the state a checkpoint holds (computed on the local copy, not timed)
            state = iter(gp.make_dataset(config(local))).state_after(step)
        began = time.perf_counter()  # the same on the local copy (this process warmed up)
        expected = iter(gp.make_dataset(config(local)))
        if state is not None:
            expected.set_state(state)
        want = next(expected)
        local_seconds = time.perf_counter() - began
        os.environ["GRAINPACK_CACHE"] = str(cache / name)
        began = time.perf_counter()
        iterator = iter(gp.make_dataset(config(url)))
        if state is not None:
            iterator.set_state(state)
        batch = next(iterator)
        seconds = time.perf_counter() - began
        stats = remote_stats(iterator)
        same = all(np.array_equal(batch[k], want[k]) for k in want)
        out[name] = {
            "step": step,
            "first_batch_s": round(seconds, 3),
            "local_first_batch_s": round(local_seconds, 3),
            "bytes": int(stats.get("bytes", 0)),
            "requests": int(stats.get("requests", 0)),
            "offsets_bytes": int(stats.get("offsets_bytes", 0)),
            "bit_identical": same,
        }
    return out


def steady(
    source: str,
    warmup: int,
    steps: int,
    order: tuple[int, int],
    local: str | None = None,
    start: int = 0,
) -> dict[str, Any]:
    """Tokens per second and ``next()`` percentiles over ``steps`` after ``warmup``, from
    step ``start`` (a restore), in a loop that does nothing else (so the rate is the
    pipeline's, bounded by the store's); with ``local``, what it fetched meanwhile, and
    then, in a second pass not timed, whether every batch equals the local one (by
    digest)."""
    import grainpack as gp

    def opened(path: str) -> Any:
        iterator = iter(gp.make_dataset(config(path, *order)))
        if start:
            state = iter(gp.make_dataset(config(local or path, *order))).state_after(start)
            iterator.set_state(state)
        return iterator

    iterator = opened(source)
    for _ in range(warmup):
        next(iterator)
    before = dict(remote_stats(iterator)) if local is not None else {}
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        next(iterator)
        times.append(time.perf_counter() - t)
    seconds = sum(times)
    out: dict[str, Any] = {
        "steps": steps,
        "seconds": round(seconds, 3),
        "tokens_per_s": round(steps * BATCH * BLOCK / seconds),
        "p50_next_ms": round(1e3 * float(np.percentile(times, 50)), 2),
        "p99_next_ms": round(1e3 * float(np.percentile(times, 99)), 2),
        "max_next_ms": round(1e3 * max(times), 2),
    }
    if local is None:
        return out
    after = remote_stats(iterator)
    iterator.close()
    requests = after.get("requests", 0) - before.get("requests", 0)
    fetched = after.get("bytes", 0) - before.get("bytes", 0)
    delivered = steps * BATCH * (BLOCK + 1) * 2  # uint16 rows
    out["requests"] = int(requests)
    out["bytes_fetched"] = int(fetched)
    out["bytes_delivered"] = delivered
    out["requests_per_gib_delivered"] = round(requests / (delivered / 2**30), 1)
    out["mib_per_request"] = round(fetched / MiB / requests, 2) if requests else None
    out["wait_s"] = round(after.get("wait_seconds", 0) - before.get("wait_seconds", 0), 3)
    out["retries"] = int(after.get("retries", 0))
    out["run_requests"] = int(after.get("requests", 0))  # the opening's included
    from grainpack.pipeline.dataset import batch_digest

    mine, check = opened(source), opened(local)
    out["bit_identical"] = all(
        batch_digest(next(mine)) == batch_digest(next(check)) for _ in range(warmup + steps)
    )
    mine.close()  # its reads ahead would share the store with what is measured next
    check.close()
    return out


def plain_gets(url: str, objects: list[str], size: int, in_flight: int, total: int) -> dict:
    """What the store delivers to plain concurrent ranged GETs of ``size`` bytes."""
    import obstore
    from obstore.store import from_url

    store_ = from_url(url, client_options={"allow_http": True})
    sizes = [obstore.head(store_, name)["size"] for name in objects]
    ranges = [
        (name, lo, min(lo + size, end))
        for name, end in zip(objects, sizes)
        for lo in range(0, end, size)
    ]
    ranges = (ranges * (total // max(1, sum(b - a for _, a, b in ranges)) + 1))[: total // size]

    def one(item: tuple[str, int, int]) -> int:
        name, lo, hi = item
        return len(obstore.get(store_, name, options={"range": (lo, hi)}).bytes())

    began = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(in_flight) as pool:
        got = sum(pool.map(one, ranges))
    seconds = time.perf_counter() - began
    return {
        "requests": len(ranges),
        "bytes": got,
        "seconds": round(seconds, 3),
        "bytes_per_s": round(got / seconds),
        "tokens_per_s": round(got / 2 / seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=10**7)
    parser.add_argument("--restore-step", type=int, default=10**6)
    parser.add_argument("--steady-documents", type=int, default=1_000_000)
    parser.add_argument(
        "--order", type=int, nargs=2, default=(8192, 4), metavar=("C", "K"),
        help="the steady state's blocked order: windows of about 64 MB",
    )  # fmt: skip
    # a window of the steady corpus is about 245 steps: warm up until the LRU is full (its
    # blocks then recycled, as in a long run), time sixteen windows
    parser.add_argument("--warmup", type=int, default=2400)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--cap", type=float, default=400e6, help="bytes per second")
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument(
        "--rounds", type=int, default=3,
        help="steady state: rounds of a pipeline span (from its own step) then plain GETs",
    )  # fmt: skip
    parser.add_argument("--skip", choices=["cold", "steady"], action="append", default=[])
    parser.add_argument(
        "--split-cpus", action="store_true",
        help="the store on the last CPU, this process on the others (as a store elsewhere)",
    )  # fmt: skip
    parser.add_argument(
        "--store", choices=["s3", "http"], default="s3",
        help="moto's S3 server (it reads a whole object for every ranged GET), or a static "
        "file server (http://, ranges read from the files)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the store's process stops too
    # a request the test store holds fails (and is retried, counted) instead of waiting 60 s
    os.environ.setdefault("GRAINPACK_TIMEOUT_S", "10")
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_REGION="us-east-1",
        AWS_ALLOW_HTTP="true",
    )  # fmt: skip
    results: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "cpus": len(os.sched_getaffinity(0)),
        "latency_s": args.latency,
        "cap_bytes_per_s": args.cap,
        "block": BLOCK,
        "global_batch": BATCH,
    }
    cpus = sorted(os.sched_getaffinity(0))
    server_cpus = set(cpus[-1:]) if args.split_cpus and len(cpus) > 1 else set()
    if server_cpus:
        os.sched_setaffinity(0, set(cpus) - server_cpus)
    results["store_cpus"] = sorted(server_cpus) or "shared"
    results["store"] = args.store
    with contextlib.ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        files = root / "served" if args.store == "http" else None
        server, proxy = stack.enter_context(store(args.latency, args.cap, server_cpus, files))
        import grainpack as gp

        def publish(name: str) -> str:
            """The URL of corpus ``root/name``, uploaded to the server (S3) or moved into
            the folder it serves (http); its local copy stays at ``root/name``."""
            if files is None:
                endpoint(server)
                upload(root / name, f"s3://{BUCKET}/{name}")
                return f"s3://{BUCKET}/{name}"
            shutil.copytree(root / name, files / name)
            return f"{proxy}/{name}"

        if files is None:
            import boto3

            boto3.client("s3", endpoint_url=server, region_name="us-east-1").create_bucket(
                Bucket=BUCKET
            )
        else:
            files.mkdir()
        if "cold" not in args.skip:
            began = time.perf_counter()
            lengths = short_lengths(args.documents)
            write_corpus(root / "many", lengths, shard_tokens=SHARD_TOKENS, seed=1)
            many = publish("many")
            print(f"wrote and uploaded {args.documents:,} documents in "
                  f"{time.perf_counter() - began:.0f} s", file=sys.stderr)  # fmt: skip
            endpoint(proxy)
            next(iter(gp.make_dataset(config(str(root / "many")))))  # imports, first calls
            results["cold"] = cold_start(
                str(root / "many"), many, args.restore_step, root / "cache"
            )
            results["cold"]["documents"] = args.documents
            manifest = json.loads((root / "many" / "manifest.json").read_text())
            objects = [s["tokens_file"] for s in manifest["shards"]]
            # the request rate the store sustains for requests of a window's run of offsets
            small = plain_gets(many, objects, 32 * 1024, args.in_flight, 16 * MiB)
            results["cold"]["plain_32k_gets"] = {
                **small,
                "requests_per_s": round(small["requests"] / small["seconds"], 1),
            }
            print(json.dumps(results["cold"], indent=1), file=sys.stderr)
        if "steady" not in args.skip:
            lengths = realistic_lengths(args.steady_documents)
            write_corpus(root / "steady", lengths, shard_tokens=STEADY_SHARD_TOKENS, seed=2)
            url = publish("steady")
            os.environ["GRAINPACK_CACHE"] = str(root / "cache" / "steady")
            from grainpack.corpus.remote import RemoteOptions

            local = steady(str(root / "steady"), args.warmup, args.steps, args.order)
            endpoint(proxy)
            manifest = json.loads((root / "steady" / "manifest.json").read_text())
            objects = [s["tokens_file"] for s in manifest["shards"]]
            # the test store's first read of an object is slower than later ones (about
            # 0.75x): every object once before anything is timed
            warm = plain_gets(url, objects, 8 * MiB, args.in_flight, int(lengths.sum()) * 2)
            # round r starts at epoch r (a fresh pipeline, restored there): a span inside one
            # epoch reads every byte once, where one across an epoch's end finds the last
            # epoch's bytes still in the LRU
            epoch_steps = int(lengths.sum()) // (BATCH * (BLOCK + 1))
            if args.warmup + args.steps > epoch_steps:
                raise SystemExit(
                    f"--warmup + --steps ({args.warmup + args.steps}) must fit an epoch of the "
                    f"steady corpus ({epoch_steps} steps): raise --steady-documents"
                )
            rounds = []
            for r in range(args.rounds):  # a pipeline span, then plain GETs of its bytes
                remote = steady(
                    url, args.warmup, args.steps, args.order,
                    local=str(root / "steady"), start=r * (epoch_steps + 1),
                )  # fmt: skip
                # of the pipeline's mean request size, as many bytes as it fetched
                mean = round(remote["bytes_fetched"] / max(remote["requests"], 1))
                gets = plain_gets(url, objects, mean, args.in_flight, remote["bytes_fetched"])
                lowest = min(local["tokens_per_s"], args.cap / 2, gets["tokens_per_s"])
                rounds.append(
                    {
                        "start_step": r * (epoch_steps + 1),
                        "remote": remote,
                        "plain_gets": gets,
                        "lowest_tokens_per_s": round(lowest),
                        "ratio_to_lowest": round(remote["tokens_per_s"] / lowest, 3),
                        "p99_ratio_to_local": round(
                            remote["p99_next_ms"] / local["p99_next_ms"], 2
                        ),
                    }
                )
                print(json.dumps(rounds[-1], indent=1), file=sys.stderr)

            def median(key: str, within: str | None = None) -> float:
                return statistics.median((x[within] if within else x)[key] for x in rounds)

            results["steady"] = {
                "documents": args.steady_documents,
                "order": {"block_docs": args.order[0], "window_blocks": args.order[1]},
                "memory_bytes": RemoteOptions.from_env().memory_bytes,
                "tokens": int(lengths.sum()),
                "local": local,
                "store_warmed": warm,
                "rounds": rounds,
                "cap_tokens_per_s": round(args.cap / 2),
                "tokens_per_s": median("tokens_per_s", "remote"),
                "plain_gets_tokens_per_s": median("tokens_per_s", "plain_gets"),
                "ratio_to_lowest": median("ratio_to_lowest"),
                "p99_ratio_to_local": median("p99_ratio_to_local"),
                "requests_per_gib_delivered": median("requests_per_gib_delivered", "remote"),
                "bit_identical": all(x["remote"]["bit_identical"] for x in rounds),
            }
            print(json.dumps(results["steady"], indent=1), file=sys.stderr)
    text = json.dumps(results, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
