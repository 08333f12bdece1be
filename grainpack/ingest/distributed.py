"""The same build on a cluster: the parts are tokenized by Ray Data tasks, then merged.

Ray Data is the engine Levanter and Marin use to tokenize for JAX training. Here it only
schedules the parts of :func:`~grainpack.ingest.build.plan_build` (one task per part, one
CPU each, retried 3 times if it dies); each task writes its part with the same code as a
local worker, so the corpus and its fingerprint are those of ``build_corpus``. Every node
must see the input and ``OUT`` at the same paths (a shared file system), because the parts
are written under ``.OUT.parts`` (beside ``OUT``) and merged into ``OUT`` by hard links.
"""

from __future__ import annotations

import os
import socket
import warnings
from collections.abc import Sequence
from typing import Any

from grainpack.corpus.errors import CorpusError, CorpusExistsError
from grainpack.corpus.native import plain_int
from grainpack.corpus.source import TokenShardSource
from grainpack.corpus.urls import output_url
from grainpack.index.checks import check_seed
from grainpack.ingest.build import (
    BuildPlan,
    PathLike,
    Progress,
    WorkerDied,
    build_part,
    finish,
    part_index,
    plan_build,
    staging,
    task_plan,
)
from grainpack.ingest.shuffled import write_shuffled
from grainpack.ingest.tokenizers import Tokenizer

__all__ = ["build_corpus_ray"]


def _ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError as err:
        raise ImportError("building with Ray needs Ray Data: pip install 'grainpack[ray]'") from err
    return ray


# Retries of a part whose task dies (killed, its node lost): a part that kills every worker
# it runs on fails the build instead of retrying without end (Ray's memory monitor has its
# own budget, task_oom_retries).
TASK_RETRIES = 3

_ERRORS = {e.__name__: e for e in (ValueError, TypeError, CorpusError, CorpusExistsError)}

# How long a cluster's address may take to accept a connection: Ray itself retries an
# address where nothing listens without end.
CONNECT_SECONDS = 10.0


def check_reachable(address: str | None) -> None:
    """Raises ``ValueError`` if nothing accepts a connection at a Ray cluster's
    ``host:port`` (or ``ray://host:port``) address, or ``RAY_ADDRESS``'s when ``None``;
    other forms (``auto``, ``local``) are left to Ray.

    Example:
        >>> check_reachable("auto")
        >>> check_reachable("127.0.0.1:1")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: no Ray cluster answers at 127.0.0.1:1 (...); ...
    """
    address = address or os.environ.get("RAY_ADDRESS")
    host, _, port = (address or "").removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), CONNECT_SECONDS).close()
    except OSError as err:
        raise ValueError(
            f"no Ray cluster answers at {address} ({err}); start one there (`ray start "
            "--head`), pass the address `ray status` prints, or give no address for a local "
            "cluster"
        ) from None


def _task_deaths(ray: Any) -> tuple[type[BaseException], ...]:
    """Ray's errors for a task that died rather than failed."""
    names = ("WorkerCrashedError", "OutOfMemoryError", "NodeDiedError")
    return tuple(getattr(ray.exceptions, n) for n in names if hasattr(ray.exceptions, n))


def _build_row(row: dict[str, Any], plan: BuildPlan) -> dict[str, Any]:
    """Builds one part; a bad input comes back as data (Ray would drop its type)."""
    try:
        documents, tokens = build_part(plan, row["index"], row["path"])
    except (ValueError, TypeError) as err:
        return {"documents": 0, "tokens": 0, "error": str(err), "type": type(err).__name__}
    return {"documents": documents, "tokens": tokens, "error": "", "type": ""}


def build_corpus_ray(
    inputs: PathLike | Sequence[PathLike],
    out: PathLike,
    *,
    tokenizer: str | os.PathLike[str] | Tokenizer,
    field: str = "text",
    lines: bool = False,
    eos: int | str | None = None,
    dtype: str | None = None,
    part_bytes: int | None = None,
    shard_tokens: int = 1 << 28,
    overwrite: bool = False,
    progress: bool = False,
    address: str | None = None,
    shuffle: int | None = None,
) -> TokenShardSource:
    """:func:`~grainpack.ingest.build.build_corpus` with the parts built by Ray tasks.

    Uses the running Ray session if there is one, else ``ray.init(address=address)``
    (``None``: the cluster in ``RAY_ADDRESS``, or a local one on this machine's cores),
    shut down again at the end. Other arguments are those of ``build_corpus``; the result
    is the same corpus, with the same fingerprint (with ``shuffle``, too).

    Raises:
        ImportError: Ray Data is not installed.
        ValueError: As ``build_corpus`` (a task's error is raised with its message); an
            object-storage URL as ``out``.
        WorkerDied: A part's task died on every one of its attempts (the complete parts
            are kept; the same call again builds the rest).
    """
    if output_url(out, "build_corpus_ray") is not None:
        raise ValueError(
            f"build_corpus_ray: cannot write to {out}: Ray tasks write the parts on a file "
            "system every node sees; build to a shared folder, then publish it with "
            f"grainpack.ingest.upload.publish(folder, {str(out)!r}), or build on one host "
            "with build_corpus (it writes to URLs)"
        )
    ray = _ray()
    plan = plan_build(
        inputs,
        tokenizer=tokenizer,
        field=field,
        lines=lines,
        eos=eos,
        dtype=dtype,
        part_bytes=part_bytes,
        shard_tokens=shard_tokens,
    )
    if shuffle is None:
        return _build(ray, plan, out, overwrite=overwrite, progress=progress, address=address)
    return write_shuffled(
        out,
        lambda staged: _build(
            ray, plan, staged, overwrite=True, progress=progress, address=address
        ),
        seed=check_seed("shuffle", plain_int(shuffle)),
        shard_tokens=shard_tokens,
        overwrite=overwrite,
        key=plan.key,
    )


def _build(
    ray: Any,
    plan: BuildPlan,
    out: PathLike,
    *,
    overwrite: bool,
    progress: bool,
    address: str | None,
) -> TokenShardSource:
    """Builds the parts of ``plan`` not built yet with Ray tasks, and merges them into ``out``."""
    with staging(out, plan, overwrite=overwrite) as todo:
        started = not ray.is_initialized()
        if started:
            check_reachable(address)
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        bar = Progress(len(plan.parts), len(plan.parts) - len(todo), progress)
        try:
            ray.data.DataContext.get_current().enable_progress_bars = False
            if todo:
                items = [{"index": part_index(p), "path": str(p)} for p in todo]
                with warnings.catch_warnings():  # the ray extra stays below 2.64 for it
                    warnings.filterwarnings("ignore", "`ray_remote_args` is deprecated")
                    rows = ray.data.from_items(items, override_num_blocks=len(items)).map(
                        _build_row,
                        fn_kwargs={"plan": task_plan(plan)},
                        num_cpus=1,
                        max_retries=TASK_RETRIES,  # Ray Data's default retries forever
                    )
                try:
                    for row in rows.iter_rows():
                        if row["error"]:  # as its type: a part locked elsewhere keeps parts
                            raise _ERRORS.get(row["type"], ValueError)(row["error"])
                        bar.part_done((row["documents"], row["tokens"]))
                except _task_deaths(ray) as err:
                    raise WorkerDied(
                        f"a Ray task died building a part ({type(err).__name__}: killed, out "
                        f"of memory or its node lost, after Ray's retries); the complete parts "
                        f"are kept in {todo[0].parent}: run the same command again to build "
                        "the rest"
                    ) from None
        finally:
            bar.close()
            if started:
                ray.shutdown()
        return finish(out, plan, overwrite=overwrite)
