# Over 400 lines, one module: one pipeline (plan parts, tokenize, merge, resume); its stages share
# the part records.
"""Corpora from text: tokenize parts of the input in parallel, then merge them.

::

    inputs ──plan_parts──▶ parts (fixed slices of the input, whatever the worker count)
    part k ──tokenize, CorpusWriter──▶ .OUT.parts/part-0000k/  (a complete native corpus)
    parts ──merge_corpora──▶ OUT: shard files hard-linked in part order, manifest last

Documents keep input order and the parts do not depend on the number of workers, so the
corpus (its manifest, hence its fingerprint) is the same for 1 worker, N workers or a Ray
cluster. Until the merged manifest is published, ``OUT`` does not open as a corpus; a killed
build is resumed by running it again (complete parts of the same plan are kept), and a
failed one (bad input) removes what it wrote.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import logging
import multiprocessing
import os
import pickle
import queue
import shutil
import signal
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tqdm

from grainpack.corpus.errors import CorpusExistsError, os_error
from grainpack.corpus.native import MANIFEST_NAME, MAX_TOKEN_ID, plain_int, read_manifest
from grainpack.corpus.source import TokenShardSource
from grainpack.corpus.urls import output_url
from grainpack.index.checks import check_seed
from grainpack.index.options import OptionError
from grainpack.ingest.merge import merge_corpora
from grainpack.ingest.shuffled import write_shuffled
from grainpack.ingest.text import TextSlice, describe_slice, find_inputs, plan_parts, read_documents
from grainpack.ingest.tokenizers import Tokenizer, load_tokenizer
from grainpack.ingest.transaction import check_target, write_lock, write_synced
from grainpack.ingest.upload import write_to_url
from grainpack.ingest.writer import CorpusWriter
from grainpack.processes import exit_with_parent, importing_main_in_a_child, starting_children

logger = logging.getLogger(__name__)  # notes: parts reused or discarded (printed by the CLI)

__all__ = ["BuildPlan", "build_corpus", "build_part", "plan_build"]

PathLike = str | os.PathLike[str]
PLAN_VERSION = 1
BATCH_CHARS = 1 << 20  # texts per encode_batch call: about 1 MiB of text


@dataclasses.dataclass(frozen=True)
class BuildPlan:
    """Everything that decides the corpus: the parts, the tokenizer and the writer options.

    ``key`` hashes all of it (with each file's path, size and modification time): a resumed
    build keeps only parts written under the same key.
    """

    parts: tuple[tuple[TextSlice, ...], ...]
    tokenizer: Tokenizer
    field: str
    lines: bool
    eos_id: int | None
    dtype: str
    vocab_size: int
    shard_tokens: int
    key: str

    def writer_options(self) -> dict[str, Any]:
        """Keywords of the ``CorpusWriter`` of every part."""
        identity = {**self.tokenizer.identity(), "eos_appended": self.eos_id is not None}
        return dict(
            dtype=self.dtype,
            vocab_size=self.vocab_size,
            eos_id=self.eos_id,
            shard_tokens=self.shard_tokens,
            tokenizer=identity,
        )


def _eos_id(eos: int | str | None, tokenizer: Tokenizer) -> int | None:
    if eos is None or (isinstance(eos, int) and not isinstance(eos, bool)):
        if eos is not None and eos < 0:
            raise ValueError(f"eos must be a non-negative id or a token string, got {eos=}")
        return eos
    if isinstance(eos, str):
        if eos.isascii() and eos.isdigit():
            return int(eos)
        if eos.startswith("-") and eos[1:].isascii() and eos[1:].isdigit():
            raise ValueError(f"eos must be a non-negative id or a token string, got {eos!r}")
        return tokenizer.token_id(eos)
    raise TypeError(f"eos must be an int id, a token string or None, got {eos!r}")


def plan_build(
    inputs: PathLike | Sequence[PathLike],
    *,
    tokenizer: str | os.PathLike[str] | Tokenizer,
    field: str = "text",
    lines: bool = False,
    eos: int | str | None = None,
    dtype: str | None = None,
    part_bytes: int | None = None,
    shard_tokens: int = 1 << 28,
) -> BuildPlan:
    """Checks the options and the input and splits it into parts (see :func:`build_corpus`).

    Nothing is written. The vocabulary (with ``eos``) must fit ``dtype``; by default ``dtype``
    is ``"uint16"`` when it does and ``"uint32"`` otherwise.
    """
    tok = load_tokenizer(tokenizer)
    eos_id = _eos_id(eos, tok)
    vocab_size = max(tok.vocab_size, 0 if eos_id is None else eos_id + 1)
    if dtype is None:
        dtype = "uint16" if vocab_size <= 1 << 16 else "uint32"
    if dtype not in ("uint16", "uint32"):
        raise ValueError(f"dtype must be 'uint16', 'uint32' or None, got {dtype=}")
    if eos_id is not None and eos_id > MAX_TOKEN_ID:
        raise ValueError(
            f"eos id {eos_id:,} is beyond the largest id a corpus holds ({MAX_TOKEN_ID:,}: "
            "batches hold int32); pass the tokenizer's end-of-text id"
        )
    limit = min(int(np.iinfo(dtype).max), MAX_TOKEN_ID) + 1
    if vocab_size > limit:
        raise OptionError(
            f"the tokenizer's vocabulary ({vocab_size:,} ids"
            f"{'' if eos_id is None else ' with eos'}) does not fit "
            f"dtype={dtype!r} (at most {limit:,} ids); use {{dtype=}} or leave it unset",
            dtype="uint32",
        )
    if not isinstance(shard_tokens, int) or shard_tokens < 1:
        raise ValueError(f"shard_tokens must be a positive int, got {shard_tokens=}")
    files = find_inputs(inputs, field=field)
    if sum(f.size for f in files) == 0:
        raise ValueError(
            f"the input is empty: {len(files)} file(s) of 0 bytes: "
            f"{_named([f.path for f in files])}; build from files that hold text"
        )
    parts = tuple(plan_parts(files, lines=lines, part_bytes=part_bytes))
    described = {
        "version": PLAN_VERSION,
        "parts": [[describe_slice(s) for s in part] for part in parts],
        "tokenizer": tok.identity(),
        "options": [field, lines, eos_id, dtype, vocab_size, shard_tokens],
    }
    key = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()
    return BuildPlan(parts, tok, field, lines, eos_id, dtype, vocab_size, shard_tokens, key)


def _batches(texts: Iterator[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    chars = 0
    for text in texts:
        batch.append(text)
        chars += len(text)
        if chars >= BATCH_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def build_part(
    plan: BuildPlan,
    index: int,
    path: PathLike,
    *,
    report: Callable[[int, int], None] | None = None,
) -> tuple[int, int]:
    """Tokenizes part ``index`` of ``plan`` into a native corpus at ``path``.

    ``report(documents, tokens)`` is called after each batch. Returns (documents, tokens).
    """
    eos = plan.eos_id
    with CorpusWriter(path, overwrite=True, **plan.writer_options()) as writer:
        for piece in plan.parts[index]:
            texts = read_documents(piece, field=plan.field, lines=plan.lines)
            for batch in _batches(texts):
                tokens = 0
                for ids in plan.tokenizer.encode_batch(batch):
                    if eos is not None:
                        ids = _append(ids, eos)
                    writer.add(np.asarray(ids))  # a tokenizer's ints: no per-id type check
                    tokens += len(ids)
                if report is not None:
                    report(len(batch), tokens)
        return writer.num_documents, writer.num_tokens


def _append(ids: Any, eos: int) -> Any:
    if isinstance(ids, list):
        ids.append(eos)
        return ids
    out = np.empty(len(ids) + 1, np.int64)
    out[:-1] = ids
    out[-1] = eos
    return out


# -- worker processes --------------------------------------------------------------------------

_PROGRESS: Any = None  # the queue a worker process reports to


def _init_worker(progress: Any) -> None:
    global _PROGRESS
    _PROGRESS = progress
    exit_with_parent()  # a killed build leaves no worker writing a part


def _worker_part(plan: BuildPlan, index: int, path: str) -> tuple[int, int]:
    _PROGRESS.put((index, os.getpid()))  # which process builds the part
    try:
        return build_part(plan, index, path, report=lambda d, t: _PROGRESS.put((index, d, t)))
    except BaseException as err:  # a Rust panic in a tokenizer is a BaseException
        try:  # the error travels pickled: one that cannot would break the pool
            pickle.loads(pickle.dumps(err))
        except Exception:
            raise RuntimeError(f"{type(err).__qualname__}: {err}") from None
        raise


# Workers are spawned: each imports the main module of the process that starts them.
_UNGUARDED = (
    "a script that calls build_corpus with workers must call it under "
    '`if __name__ == "__main__":`, or each worker builds again as it starts'
)


class WorkerDied(ChildProcessError):
    """A build worker process died (killed, or out of memory) while building a part."""


def task_plan(plan: BuildPlan, index: int | None = None) -> BuildPlan:
    """The plan as a worker runs it: a one-thread tokenizer (the workers already use every
    core) and, with ``index``, only that part (a task then pickles small)."""
    parts = plan.parts
    if index is not None:
        parts = tuple(p if k == index else () for k, p in enumerate(parts))
    return dataclasses.replace(plan, parts=parts, tokenizer=plan.tokenizer.with_threads(1))


class Progress:
    """A tqdm bar over tokens (its rate is tokens/s) with documents and parts as postfix."""

    def __init__(self, parts: int, done: int, enabled: bool) -> None:
        resumed = f"resumed, {done} part(s) kept" if done else None  # of an interrupted build
        self.bar = tqdm.tqdm(desc=resumed, unit="tok", unit_scale=True, disable=not enabled)
        self.parts, self.done, self.documents = parts, done, 0
        self._show()

    def _show(self) -> None:
        self.bar.set_postfix_str(
            f"documents={self.documents:,}, parts={self.done}/{self.parts}", refresh=False
        )

    def update(self, documents: int, tokens: int) -> None:
        self.documents += documents
        self._show()
        self.bar.update(tokens)

    def part_done(self, counts: tuple[int, int] | None = None) -> None:
        """One more part done; ``counts`` (its documents and tokens) if not reported yet."""
        if counts is not None:
            self.update(*counts)
        self.done += 1
        self._show()
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


# -- staging: OUT/.parts -----------------------------------------------------------------------


@contextlib.contextmanager
def staging(out: PathLike, plan: BuildPlan, *, overwrite: bool) -> Iterator[list[Path]]:
    """Prepares the parts folder ``.OUT.parts`` (next to ``OUT``) for ``plan`` and yields
    the part paths still to build.

    Complete parts of the same plan (a killed build) are kept; anything else there is
    removed. If the body raises (bad input, a failed part), everything the build wrote is
    removed, unless the build can be resumed (:func:`_resumable`); on success the caller
    merges and the parts folder is removed afterwards. Nothing is written at ``OUT`` until
    the merge publishes the corpus.
    """
    out = Path(out)
    check_target(out, overwrite=overwrite)  # what the merge would refuse, before the work
    stage = parts_folder(out)
    created = [p for p in (stage, *stage.parents) if not p.exists()]  # removed on failure
    try:
        stage.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # permissions, a read-only file system
        raise os_error(err, "creating the folder of", out) from None
    try:
        lock = write_lock(stage)  # one build of OUT at a time: the parts folder is its own
    except CorpusExistsError as err:
        raise CorpusExistsError(f"another build of {out} is in progress: {err}") from None
    try:
        yield from _staged(stage, plan)
    except BaseException as err:
        lock.release()  # its file is in the folders to remove
        if not _resumable(err):
            for folder in created[1:]:  # the folders made for OUT, if still empty
                with contextlib.suppress(OSError):
                    folder.rmdir()
        raise
    finally:
        lock.release()


def _staged(stage: Path, plan: BuildPlan) -> Iterator[list[Path]]:
    """The body of :func:`staging`, under the lock of ``stage``."""
    plan_file = stage / "plan.json"
    if stage.exists() and _staged_key(plan_file) != plan.key:
        discarded = len(list(stage.glob(f"part-*/{MANIFEST_NAME}")))
        shutil.rmtree(stage)  # parts of another input, tokenizer or options
        if discarded:
            logger.info(
                "discarded %d complete part(s) kept in %s by an interrupted build of other "
                "inputs, tokenizer or options; building all %d part(s) of this one",
                discarded,
                stage,
                len(plan.parts),
            )
    stage.mkdir(exist_ok=True)
    if not plan_file.exists():
        described = [[describe_slice(s) for s in part] for part in plan.parts]
        tmp = stage / "plan.json.tmp"
        text = json.dumps({"key": plan.key, "parts": described}, indent=1)
        try:  # fsync'd, with its folder, before parts are kept (and resumed) under its key
            write_synced(plan_file, text.encode())
        except OSError as err:  # a full disk: nothing is built, nothing is left
            shutil.rmtree(stage, ignore_errors=True)
            raise os_error(err, "writing the build plan", tmp) from err
    paths = [stage / f"part-{k:05d}" for k in range(len(plan.parts))]
    todo = [p for p in paths if not (p / MANIFEST_NAME).is_file()]
    if len(todo) < len(paths):
        logger.info(
            "reusing %d of %d parts kept in %s by an interrupted build; building the other %d",
            len(paths) - len(todo),
            len(paths),
            stage,
            len(todo),
        )
    try:
        yield todo
    except BaseException as err:
        if not _resumable(err):
            _remove_stage(stage)
        raise
    _remove_stage(stage)


def _remove_stage(stage: Path) -> None:
    """Removes a parts folder, its plan first: a removal cut short (killed, a Ctrl-C) must
    not leave a part that looks complete (its manifest kept, a shard gone) for a rerun to
    resume."""
    with contextlib.suppress(OSError):
        (stage / "plan.json").unlink(missing_ok=True)
    shutil.rmtree(stage, ignore_errors=True)


def _resumable(err: BaseException) -> bool:
    """Whether a build that raised ``err`` keeps its complete parts for the same command to
    resume: an interrupt, a dead worker, or a corpus in the way (a part still written by
    another process, or a corpus published at ``OUT`` meanwhile), not bad input."""
    return isinstance(err, KeyboardInterrupt | WorkerDied | CorpusExistsError)


def _staged_key(plan_file: Path) -> str | None:
    try:
        return json.loads(plan_file.read_text()).get("key")
    except (OSError, ValueError, AttributeError):
        return None


def _named(files: Sequence[str]) -> str:
    """The first three of ``files``, and how many more."""
    more = f" and {len(files) - 3} more" if len(files) > 3 else ""
    return f"{', '.join(files[:3])}{more}"


def part_paths(out: PathLike, plan: BuildPlan) -> list[Path]:
    """The directories of the parts of ``plan`` under ``out``, in order."""
    return [parts_folder(out) / f"part-{k:05d}" for k in range(len(plan.parts))]


def parts_folder(out: PathLike) -> Path:
    """Where the parts of a build of ``out`` are written: ``.NAME.parts`` beside it."""
    out = Path(out)
    return out.parent / f".{out.name}.parts"


def finish(out: PathLike, plan: BuildPlan, *, overwrite: bool) -> TokenShardSource:
    """Merges the complete parts of ``plan`` into ``out`` (replacing a corpus there only if
    ``overwrite``: one may have appeared since the build started); refuses an input without
    documents."""
    parts = part_paths(out, plan)
    if sum(read_manifest(p)["num_documents"] for p in parts) == 0:
        files = list(dict.fromkeys(s.file.path for part in plan.parts for s in part))
        raise ValueError(
            f"the input holds no documents (empty files, blank lines or empty row groups): "
            f"{len(files)} file(s): {_named(files)}; nothing was written: build from files "
            "that hold text"
        )
    return merge_corpora(parts, out, overwrite=overwrite)


def build_corpus(
    inputs: PathLike | Sequence[PathLike],
    out: PathLike,
    *,
    tokenizer: str | os.PathLike[str] | Tokenizer,
    field: str = "text",
    lines: bool = False,
    eos: int | str | None = None,
    dtype: str | None = None,
    workers: int | None = None,
    part_bytes: int | None = None,
    shard_tokens: int = 1 << 28,
    overwrite: bool = False,
    progress: bool = False,
    shuffle: int | None = None,
) -> TokenShardSource:
    """Tokenizes text files into a native corpus at ``out``, on every core, deterministically.

    Document ``i`` of the corpus is the ``i``-th document of the input (files in the given
    order, see :mod:`grainpack.ingest.text`) encoded by ``tokenizer``, followed by ``eos`` if
    given. The manifest records the tokenizer's identity. The corpus, and its fingerprint, do
    not depend on ``workers``.

    Args:
        inputs: Files, directories or glob patterns: ``.jsonl``, ``.jsonl.gz``,
            ``.jsonl.zst``, ``.parquet``, ``.txt`` (``.gz``, ``.zst``).
        out: The corpus directory, or a bucket's URL (``s3://``, ``gs://``, ``az://``):
            built in its staging folder (a killed build resumes from the parts kept there),
            then published (:func:`~grainpack.ingest.upload.write_to_url`).
        tokenizer: A :class:`~grainpack.ingest.tokenizers.Tokenizer` or a spec for
            :func:`~grainpack.ingest.tokenizers.load_tokenizer` (``"bytes"``,
            ``"tokenizer.json"``, ``"spm.model"``, ``"ranks.tiktoken"``).
        field: The JSON field or Parquet column holding the text.
        lines: Plain text: one document per non-blank line (default: one per file).
        eos: End-of-document id, or a token of the tokenizer (``"</s>"``), appended to every
            document and recorded as the corpus's ``eos_id``.
        dtype: ``"uint16"``/``"uint32"``; default: the smallest that holds the vocabulary.
        workers: Processes (default: every core); 1 builds in this process. Worker
            processes are spawned: a script needs the ``if __name__ == "__main__":`` guard.
        part_bytes: Input bytes per part, the unit of parallel work and one shard each
            (default: a 256th of the input, at least 4 MiB and at most 1 GiB).
        shard_tokens: A part of more tokens is written as several shards.
        overwrite: Replace a corpus at ``out`` (it stays readable while the parts are
            built; the merge replaces it).
        progress: Show a progress bar (tokens, tokens/s, documents, parts).
        shuffle: If given, the seed of a random order the documents are stored in (recorded
            as ``"shuffle_seed"``): the corpus is built beside ``out`` and copied shuffled
            (:func:`~grainpack.ingest.shuffled.write_shuffled`; an interrupted copy is
            resumed by the same call without tokenizing again).

    Raises:
        ValueError: Bad options, a vocabulary that does not fit ``dtype``, an unknown or
            unreadable input, a record without text, or no documents at all; nothing is
            left behind.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> _ = open(f"{d}/a.jsonl", "w").write('{"text": "hi"}\\n{"text": "é"}\\n')
        >>> src = build_corpus(f"{d}/a.jsonl", f"{d}/out", tokenizer="bytes", eos=256)
        >>> [doc.tolist() for doc in src], src.tokenizer["kind"]
        ([[104, 105, 256], [195, 169, 256]], 'bytes')
        >>> src = build_corpus(f"{d}/a.jsonl", f"{d}/s", tokenizer="bytes", shuffle=1)
        >>> [doc.tolist() for doc in src]
        [[195, 169], [104, 105]]
    """
    if (url := output_url(out, "build_corpus")) is not None:  # staged here, then uploaded
        options = dict(tokenizer=tokenizer, field=field, lines=lines, eos=eos, dtype=dtype)
        options.update(workers=workers, part_bytes=part_bytes, shard_tokens=shard_tokens)
        options.update(progress=progress, shuffle=shuffle, overwrite=True)
        return write_to_url(
            url,
            lambda staged: build_corpus(inputs, staged, **options),  # type: ignore[arg-type]
            overwrite=overwrite,
            what="build_corpus",
        )
    workers = (os.cpu_count() or 1) if workers is None else workers
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int or None, got {workers=}")
    shuffle = None if shuffle is None else check_seed("shuffle", plain_int(shuffle))
    if importing_main_in_a_child():
        raise RuntimeError(_UNGUARDED)  # a worker importing the script that started it
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
        return _build(plan, out, workers=workers, overwrite=overwrite, progress=progress)
    return write_shuffled(
        out,
        lambda staged: _build(plan, staged, workers=workers, overwrite=True, progress=progress),
        seed=shuffle,
        shard_tokens=shard_tokens,
        overwrite=overwrite,
        key=plan.key,
    )


def _build(
    plan: BuildPlan, out: PathLike, *, workers: int, overwrite: bool, progress: bool
) -> TokenShardSource:
    """Builds the parts of ``plan`` not built yet, and merges them into ``out``."""
    with staging(out, plan, overwrite=overwrite) as todo:
        bar = Progress(len(plan.parts), len(plan.parts) - len(todo), progress)
        try:
            if workers == 1 or len(todo) <= 1:
                for path in todo:
                    build_part(plan, part_index(path), path, report=bar.update)
                    bar.part_done()
            else:
                _run_processes(plan, todo, min(workers, len(todo)), bar)
        finally:
            bar.close()
        return finish(out, plan, overwrite=overwrite)


def part_index(path: Path) -> int:
    """The index of the part at ``path`` (``.../part-00007`` -> 7)."""
    return int(path.name.split("-")[1])


def _run_processes(plan: BuildPlan, todo: list[Path], workers: int, bar: Progress) -> None:
    """Builds the parts in ``workers`` spawned processes; the bar counts what they report.

    Raises:
        WorkerDied: a worker died while building a part (the complete parts are kept).
    """
    context = multiprocessing.get_context("spawn")
    reports = context.Queue()
    tasks = [(task_plan(plan, part_index(p)), part_index(p), str(p)) for p in todo]
    seen = {task[1]: [0, 0] for task in tasks}  # part -> reported (documents, tokens)
    builders: dict[int, int] = {}  # part -> the process building it
    pending: dict[int, concurrent.futures.Future] = {}
    pool = concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=context, initializer=_init_worker, initargs=(reports,)
    )
    try:
        with starting_children():  # the pool starts its workers in submit
            pending = {task[1]: pool.submit(_worker_part, *task) for task in tasks}
        while pending:
            with contextlib.suppress(queue.Empty):
                index, *report = reports.get(timeout=0.1)
                if len(report) == 1:
                    builders[index] = report[0]
                elif index in pending:  # a report after its part's result is late
                    seen[index][0] += report[0]
                    seen[index][1] += report[1]
                    bar.update(*report)
            for index in [k for k, f in pending.items() if f.done()]:
                try:
                    documents, tokens = pending.pop(index).result()  # the worker's error
                except concurrent.futures.process.BrokenProcessPool as err:
                    if err.__cause__ is not None:  # not a death: a result that did not travel
                        raise
                    raise WorkerDied(
                        "a build worker process died (killed, or out of memory?); the complete "
                        f"parts are kept in {todo[0].parent}: run the same command again to "
                        "build the rest (with fewer workers if memory ran out). If it died at "
                        f"start, its error is above: {_UNGUARDED}"
                    ) from None
                bar.part_done((documents - seen[index][0], tokens - seen[index][1]))
    except BaseException:
        # Stop the parts still being built (a failed build removes its folder, and an
        # interrupted one is resumed by the next, which must not meet their locks), and
        # every other worker of the pool: shutting it down waits for each, and one blocked
        # on its queue (whose lock a killed one may hold), or still starting with no part
        # reported yet, kept a Ctrl-C'd build waiting forever. A killed part changes nothing.
        mine = {p.pid for p in multiprocessing.active_children()}
        pool_workers = set(getattr(pool, "_processes", None) or ())  # (pids, not yet joined)
        for pid in ({builders[k] for k in pending if k in builders} | pool_workers) & mine:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
