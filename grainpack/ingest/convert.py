"""Converters into the native corpus format: ``.npy`` arrays, JSON lines, any readable corpus.

Every converter streams document by document through :class:`~grainpack.ingest.CorpusWriter`,
so a failed conversion leaves no manifest (the output never opens as a complete corpus).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tqdm

from grainpack.corpus.formats import open_corpus
from grainpack.corpus.native import plain_int
from grainpack.corpus.source import TokenShardSource
from grainpack.corpus.urls import output_url
from grainpack.index.checks import check_seed
from grainpack.index.options import OptionError
from grainpack.ingest.shuffled import write_shuffled
from grainpack.ingest.text import json_problem, load_json, repeated_key
from grainpack.ingest.upload import write_to_url
from grainpack.ingest.writer import CorpusWriter, copy_dtype, open_to_copy

__all__ = ["convert_corpus", "convert_inputs", "convert_jsonl", "convert_npy", "splits_at_eos"]

PathLike = str | os.PathLike[str]


def _input_files(paths: PathLike | Sequence[PathLike], suffixes: tuple[str, ...]) -> list[Path]:
    """Paths in the given order; a directory stands for its files with ``suffixes``, sorted."""
    items = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    files: list[Path] = []
    for item in map(Path, items):
        if item.is_dir():
            found = sorted(p for p in item.iterdir() if p.name.endswith(suffixes))
            if not found:
                raise ValueError(f"{item}: directory holds no {'/'.join(suffixes)} files")
            files.extend(found)
        elif item.is_file():
            files.append(item)
        else:
            raise FileNotFoundError(f"{item}: no such input file or directory")
    if not files:
        raise ValueError(f"expected at least one input file, got {paths=}")
    return files


def _add(writer: CorpusWriter, tokens: Any, where: str) -> None:
    try:
        writer.add(tokens)
    except (ValueError, TypeError) as err:
        raise type(err)(f"{where}: {err}") from err


@contextlib.contextmanager
def _writing(
    out: PathLike,
    overwrite: bool,
    options: dict[str, Any],
    *,
    total: int,
    unit: str,
    progress: bool,
) -> Iterator[tuple[CorpusWriter, tqdm.tqdm]]:
    """A ``CorpusWriter`` at ``out`` and a progress bar over ``total`` ``unit``s."""
    with (
        CorpusWriter(out, overwrite=overwrite, **options) as writer,
        tqdm.tqdm(total=total, unit=unit, unit_scale=True, disable=not progress) as bar,
    ):
        yield writer, bar


def _load_npy(path: Path) -> np.ndarray:
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as err:
        raise ValueError(f"{path}: not a plain .npy token array ({err})") from err
    if not isinstance(array, np.ndarray) or array.ndim not in (1, 2):
        raise ValueError(
            f"{path}: expected a 1-D array (one document) or a 2-D array (one "
            f"document per row), found shape {getattr(array, 'shape', None)}"
        )
    if array.dtype.kind not in "iu":  # the file's content: a ValueError, as a bad shape
        raise ValueError(f"{path}: expected integer token ids, found dtype {array.dtype}")
    return array


def convert_npy(
    paths: PathLike | Sequence[PathLike],
    out: PathLike,
    *,
    dtype: str | None = None,
    vocab_size: int | None = None,
    eos_id: int | None = None,
    shard_tokens: int = 1 << 28,
    overwrite: bool = False,
    progress: bool = False,
) -> TokenShardSource:
    """Converts ``.npy`` token arrays into a native corpus at ``out``.

    A 1-D integer array is one document, or, with ``eos_id``, a stream split after every
    ``eos_id`` (a document ends with its eos; tokens after the last one form a final
    document). A 2-D array is one document per row (rows are stored whole: padding is not
    removed). Files are read in the given order; a directory stands for its ``*.npy`` files
    in sorted order.

    Args:
        paths: A file, a directory, or a sequence of them, read in the given order.
        out: Output corpus directory.
        dtype, vocab_size, shard_tokens, overwrite: As in :func:`write_corpus`.
        eos_id: Split 1-D arrays after every ``eos_id`` (also recorded in the manifest).
        progress: Show a progress bar (tqdm) over the tokens.

    Returns:
        The written corpus, opened.

    Raises:
        ValueError: A file is not a 1-D/2-D integer array, or an id does not fit (the
            message names the file and the row).

    Example:
        >>> import tempfile, numpy as np
        >>> d = tempfile.mkdtemp()
        >>> np.save(f"{d}/a.npy", np.array([[1, 2], [3, 4]]))
        >>> [x.tolist() for x in convert_npy(f"{d}/a.npy", f"{d}/out")]
        [[1, 2], [3, 4]]
        >>> np.save(f"{d}/s.npy", np.array([5, 6, 0, 7, 0, 8]))
        >>> [x.tolist() for x in convert_npy(f"{d}/s.npy", f"{d}/split", eos_id=0)]
        [[5, 6, 0], [7, 0], [8]]
    """
    arrays = [(path, _load_npy(path)) for path in _input_files(paths, (".npy",))]
    total = sum(a.size for _, a in arrays)
    options = dict(dtype=dtype, vocab_size=vocab_size, eos_id=eos_id, shard_tokens=shard_tokens)
    with _writing(out, overwrite, options, total=total, unit="tok", progress=progress) as (
        writer,
        bar,
    ):
        for path, array in arrays:
            if array.ndim == 1 and eos_id is not None:
                ends = np.flatnonzero(array == eos_id) + 1
                rows = np.split(array, ends[ends < array.size])
                where = "document"
            else:
                rows, where = array[None] if array.ndim == 1 else array, "row"
            for r, row in enumerate(rows):
                _add(writer, np.asarray(row), f"{path} {where} {r}")
                bar.update(row.size)
    return open_corpus(out)


def _jsonl_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            yield from enumerate(f, start=1)
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise ValueError(
            f"{path}: not a valid gzip file ({err}); decompress or rename it (.jsonl)"
        ) from err


def convert_jsonl(
    paths: PathLike | Sequence[PathLike],
    out: PathLike,
    *,
    field: str = "input_ids",
    dtype: str | None = None,
    vocab_size: int | None = None,
    eos_id: int | None = None,
    shard_tokens: int = 1 << 28,
    overwrite: bool = False,
    progress: bool = False,
) -> TokenShardSource:
    """Converts JSON-lines files (``.jsonl``, ``.jsonl.gz``) into a native corpus at ``out``.

    Each non-blank line is one document: a JSON list of token ids, or a JSON object whose
    ``field`` is one.
    Blank lines are skipped. A directory stands for its ``*.jsonl``/``*.jsonl.gz`` files, sorted.

    Args:
        paths: A file, a directory, or a sequence of them, read in the given order.
        out: Output corpus directory.
        field: The key of the ids when lines are JSON objects.
        dtype, vocab_size, eos_id, shard_tokens, overwrite: As in :func:`write_corpus`.
        progress: Show a progress bar (tqdm) over the input bytes.

    Returns:
        The written corpus, opened.

    Raises:
        ValueError: A line is not JSON, lacks ``field``, or holds bad ids (names ``file:line``);
            a ``.gz`` file is not gzip; the files hold no documents at all.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> _ = open(f"{d}/a.jsonl", "w").write('{"input_ids": [5, 6]}\\n{"input_ids": []}\\n')
        >>> [x.tolist() for x in convert_jsonl(f"{d}/a.jsonl", f"{d}/out")]
        [[5, 6], []]
    """
    files = _input_files(paths, (".jsonl", ".jsonl.gz"))
    total = sum(f.stat().st_size for f in files)
    options = dict(dtype=dtype, vocab_size=vocab_size, eos_id=eos_id, shard_tokens=shard_tokens)
    with _writing(out, overwrite, options, total=total, unit="B", progress=progress) as (
        writer,
        bar,
    ):
        for path in files:
            for lineno, line in _jsonl_lines(path):
                bar.update(len(line))  # approximate for .gz files (uncompressed bytes)
                if not line.strip():
                    continue
                try:
                    record = load_json(line)
                except UnicodeDecodeError as err:
                    raise ValueError(
                        f"{path}:{lineno}: not UTF-8 text at byte {err.start} of the line "
                        f"({err.reason}); convert the file to UTF-8"
                    ) from None
                except json.JSONDecodeError as err:
                    raise ValueError(
                        f"{path}:{lineno}: invalid JSON ({json_problem(err)}); each line must "
                        "be one JSON object"
                    ) from None
                except (ValueError, RecursionError) as err:  # a huge number, deep nesting
                    raise ValueError(
                        f"{path}:{lineno}: the JSON line cannot be read ({err}); fix or drop "
                        "that record"
                    ) from None
                if repeated_key(line, field):
                    raise ValueError(
                        f"{path}:{lineno}: the JSON object names {field!r} twice (JSON keeps "
                        "the last value without a word); keep one"
                    )
                ids = record.get(field) if isinstance(record, dict) else record
                if not isinstance(ids, list):
                    found = sorted(record) if isinstance(record, dict) else type(record).__name__
                    if isinstance(record, dict):
                        texts = [f"field {k!r}" for k, v in record.items() if isinstance(v, str)]
                    else:
                        texts = ["the line"] * isinstance(record, str)
                    hint = (
                        f"; text ({', '.join(texts)}) is tokenized by build_corpus(tokenizer=...)"
                        " (grainpack build --tokenizer SPEC)"
                        if texts
                        else ""
                    )
                    raise OptionError(
                        f"{path}:{lineno}: expected a list of ids, or an object with one in "
                        f"{{field=}}, found {found}; pass {{field}}=<name>{hint}",
                        field=field,
                    )
                try:
                    writer.add(ids)
                except (ValueError, TypeError) as err:
                    raise ValueError(f"{path}:{lineno}: {err}") from err
        if writer.num_documents == 0:
            raise ValueError(
                f"{', '.join(map(str, files))}: no documents (empty, or blank lines only); "
                "nothing was written"
            )
    return open_corpus(out)


def convert_corpus(
    src_path: PathLike,
    out: PathLike,
    *,
    dtype: str | None = None,
    vocab_size: int | None = None,
    eos_id: int | None = None,
    shard_tokens: int = 1 << 28,
    overwrite: bool = False,
    progress: bool = False,
) -> TokenShardSource:
    """Converts anything :func:`~grainpack.corpus.open_corpus` reads into a native corpus.

    Args:
        src_path: A flat-shard ``index.json`` directory, a Megatron prefix, or a native corpus.
        out: Output directory (must differ from ``src_path``).
        dtype: Output dtype; default ``"uint16"`` for sources of at most 2 bytes per token,
            else ``"uint32"`` (ids are validated either way; nothing wraps).
        vocab_size: Default: the source's.
        eos_id: Used to read ``src_path`` (flat-shard format: split after each eos) and recorded in
            the output manifest; default: the source's.
        shard_tokens, overwrite: As for ``CorpusWriter``.
        progress: Show a tqdm progress bar over tokens.

    A native source is verified first (:func:`~grainpack.corpus.verify_corpus`; the copy
    gets new checksums, which must not bless flipped bytes), and its tokenizer record is
    kept.

    Example:
        >>> import tempfile
        >>> from grainpack.ingest.writer import write_corpus
        >>> d = tempfile.mkdtemp()
        >>> _ = write_corpus(f"{d}/a", [[1, 2], [3]])
        >>> [x.tolist() for x in convert_corpus(f"{d}/a", f"{d}/b", dtype="uint32")]
        [[1, 2], [3]]
    """
    if Path(src_path).resolve() == Path(out).resolve():
        raise ValueError(
            f"the output must differ from the input corpus (both are {src_path}); write to a "
            "new directory"
        )
    src = open_to_copy(src_path, out, overwrite=overwrite, eos_id=eos_id, progress=progress)
    options = dict(
        dtype=copy_dtype(src) if dtype is None else dtype,
        vocab_size=src.vocab_size if vocab_size is None else vocab_size,
        eos_id=src.eos_id if eos_id is None else eos_id,
        shard_tokens=shard_tokens,
        tokenizer=src.tokenizer,
    )
    with _writing(out, overwrite, options, total=src.num_tokens, unit="tok", progress=progress) as (
        writer,
        bar,
    ):
        for i in range(len(src)):
            doc = src[i]
            _add(writer, doc, str(src_path))
            bar.update(doc.size)
    return open_corpus(out)


# Text, which build_corpus tokenizes: never taken for a Megatron prefix or a corpus
TEXT_SUFFIXES = (".txt", ".txt.gz", ".txt.zst", ".parquet", ".jsonl.zst")


def convert_inputs(
    inputs: PathLike | Sequence[PathLike],
    out: PathLike,
    *,
    field: str = "input_ids",
    dtype: str | None = None,
    vocab_size: int | None = None,
    eos_id: int | None = None,
    shard_tokens: int = 1 << 28,
    overwrite: bool = False,
    progress: bool = False,
    shuffle: int | None = None,
) -> TokenShardSource:
    """Converts token ids into a native corpus with the converter for their kind.

    ``.npy`` files go to :func:`convert_npy`, ``.jsonl(.gz)`` files to :func:`convert_jsonl`,
    and one Megatron prefix, flat-shard directory or native corpus to :func:`convert_corpus`.
    A directory that is not a corpus stands for its ``.npy`` or ``.jsonl(.gz)`` files, sorted.

    Args:
        inputs: Files or directories of one kind, in document order.
        out: Output corpus directory, or a bucket's URL (staged, then published:
            :func:`~grainpack.ingest.upload.write_to_url`).
        field: The key of the ids when JSON lines are objects.
        dtype, vocab_size, eos_id, shard_tokens, overwrite, progress: As for the converter.
        shuffle: If given, the seed of a random order the documents are stored in (converted
            beside ``out``, then copied shuffled:
            :func:`~grainpack.ingest.shuffled.write_shuffled`).

    Raises:
        ValueError: Inputs of mixed or unknown kinds (text needs a tokenizer:
            :func:`~grainpack.ingest.build.build_corpus`), or the converter's errors.

    Warns:
        UserWarning: ``eos_id`` is given for inputs it does not split (:func:`splits_at_eos`);
            it is only recorded.

    Example:
        >>> import tempfile, numpy as np
        >>> d = tempfile.mkdtemp()
        >>> np.save(f"{d}/a.npy", np.array([[1, 2], [3, 4]]))
        >>> [x.tolist() for x in convert_inputs([d], f"{d}/out")]
        [[1, 2], [3, 4]]
        >>> _ = open(f"{d}/a.jsonl", "w").write("[5, 6]\\n[7]\\n")
        >>> [x.tolist() for x in convert_inputs(f"{d}/a.jsonl", f"{d}/j", shuffle=0)]
        [[7], [5, 6]]
    """
    if (url := output_url(out, "convert_inputs")) is not None:  # staged here, then uploaded
        options = dict(field=field, dtype=dtype, vocab_size=vocab_size, eos_id=eos_id)
        options.update(shard_tokens=shard_tokens, progress=progress, shuffle=shuffle)
        return write_to_url(
            url,
            lambda staged: convert_inputs(inputs, staged, overwrite=True, **options),  # type: ignore[arg-type]
            overwrite=overwrite,
            what="convert_inputs",
        )
    shuffle = None if shuffle is None else check_seed("shuffle", plain_int(shuffle))
    items = [inputs] if isinstance(inputs, str | os.PathLike) else list(inputs)
    files = _token_files([Path(p) for p in items])
    converter: Callable[..., TokenShardSource]
    source: Any = files
    extra: dict[str, Any] = {}
    if all(p.suffix == ".npy" for p in files):
        converter = convert_npy
    elif all(p.name.endswith((".jsonl", ".jsonl.gz")) for p in files):
        converter, extra = convert_jsonl, {"field": field}
    elif len(files) == 1 and not files[0].name.endswith(TEXT_SUFFIXES):
        converter, source = convert_corpus, files[0]
    else:
        raise ValueError(
            "inputs must be .npy files, .jsonl(.gz) files, or one Megatron prefix / flat-shard "
            f"directory; got {[str(p) for p in items]} (text needs a tokenizer: "
            "build_corpus(tokenizer=...), grainpack build --tokenizer SPEC)"
        )
    options = dict(dtype=dtype, vocab_size=vocab_size, eos_id=eos_id, shard_tokens=shard_tokens)
    options.update(progress=progress, **extra)
    if shuffle is None:
        src = converter(source, out, overwrite=overwrite, **options)
    else:
        src = write_shuffled(
            out,
            lambda staged: converter(source, staged, overwrite=True, **options),
            seed=shuffle,
            shard_tokens=shard_tokens,
            overwrite=overwrite,
        )
    if eos_id is not None and (kept := [str(p) for p in files if not splits_at_eos(p)]):
        warnings.warn(
            f"an eos id splits only 1-D .npy streams and flat-shard shards: the documents of "
            f"{', '.join(kept)} are kept as they are; {eos_id} is recorded as the corpus's "
            "eos_id",
            UserWarning,
            stacklevel=2,
        )
    return src


def _token_files(inputs: list[Path]) -> list[Path]:
    """A folder that is not a corpus stands for its ``.npy`` or ``.jsonl(.gz)`` files."""
    files = []
    for p in inputs:
        corpus = any((p / name).exists() for name in ("manifest.json", "index.json"))
        if not p.is_dir() or corpus:
            files.append(p)
            continue
        found = sorted(f for f in p.iterdir() if f.name.endswith((".npy", ".jsonl", ".jsonl.gz")))
        files.extend(found or [p])
    return files


def splits_at_eos(path: PathLike) -> bool:
    """Whether an eos id splits the ids input ``path`` into documents: a 1-D ``.npy`` stream
    or a flat-shard directory (``index.json``); other inputs keep their documents.

    Example:
        >>> import tempfile, numpy as np
        >>> d = tempfile.mkdtemp()
        >>> np.save(f"{d}/s.npy", np.array([5, 0, 6])); np.save(f"{d}/m.npy", np.ones((2, 2)))
        >>> splits_at_eos(f"{d}/s.npy"), splits_at_eos(f"{d}/m.npy"), splits_at_eos(d)
        (True, False, False)
    """
    path = Path(path)
    if path.suffix != ".npy":
        return (path / "index.json").is_file()
    try:
        return np.load(path, mmap_mode="r").ndim == 1
    except (OSError, ValueError):  # read by the conversion already; not a plain array
        return True
