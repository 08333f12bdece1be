# Over 400 lines, one module: every input format's discovery, split into parts and streaming
# share the slice model (a part is slices of files), and the plan hashes all of it.
"""Text inputs: finding the files, splitting them into parts, and streaming their documents.

Formats, by file name: JSON lines (``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``; one object per
line, its ``field`` holds the text), Parquet (``.parquet``; the ``field`` column, read with
pyarrow) and plain text (``.txt``, ``.txt.gz``, ``.txt.zst``; one document per file, or one
per non-blank line with ``lines=True``). Files are read streaming, never whole (except a
plain-text file that is one document).

A *part* is a run of slices of the input: a byte range of an uncompressed line file, a range
of row groups of a Parquet file, or a whole file. :func:`plan_parts` is a pure function of
the files (their order, sizes and Parquet metadata) and ``part_bytes``, never of the number
of workers: a file of at least ``part_bytes`` is cut into pieces of about that size, smaller
files are grouped until a part reaches ``part_bytes``. By default ``part_bytes`` is a 256th of
the input, at least 4 MiB and at most 1 GiB (:func:`default_part_bytes`): enough parts to
keep every core busy to the end, few enough shards for a corpus of terabytes.
"""

from __future__ import annotations

import codecs
import dataclasses
import glob
import gzip
import io
import itertools
import json
import os
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from stat import S_ISREG
from typing import IO, Any

from grainpack.index.options import OptionError

__all__ = [
    "InputFile",
    "InputNotFoundError",
    "TextSlice",
    "find_inputs",
    "plan_parts",
    "read_documents",
    "repeated_key",
]

PathLike = str | os.PathLike[str]

# name ending -> (format, compression)
FORMATS = {
    ".jsonl": ("jsonl", None),
    ".jsonl.gz": ("jsonl", "gzip"),
    ".jsonl.zst": ("jsonl", "zstd"),
    ".parquet": ("parquet", None),
    ".txt": ("text", None),
    ".txt.gz": ("text", "gzip"),
    ".txt.zst": ("text", "zstd"),
}
_READ_BYTES = 1 << 20
_PARQUET_ROWS = 1024


class InputNotFoundError(FileNotFoundError, ValueError):
    """An input path or pattern names no file (a ``FileNotFoundError`` and a ``ValueError``,
    as every bad input is; the message names the path or pattern and the fix)."""


@dataclasses.dataclass(frozen=True)
class InputFile:
    """One input file: path, format, compression, size, and Parquet row-group sizes."""

    path: str
    format: str
    compression: str | None
    size: int
    mtime_ns: int
    row_groups: tuple[tuple[int, int], ...] = ()  # Parquet: (rows, bytes on disk) per group


@dataclasses.dataclass(frozen=True)
class TextSlice:
    """Documents ``[start, stop)`` of a file: bytes (line files), row groups, or whole (0, 0)."""

    file: InputFile
    start: int = 0
    stop: int = 0

    @property
    def size(self) -> int:
        """Bytes on disk that the slice covers."""
        if self.file.format == "parquet":
            return sum(b for _, b in self.file.row_groups[self.start : self.stop])
        return self.stop - self.start if self.stop else self.file.size


BOM = "\ufeff"  # a byte order mark, decoded: dropped at the start of a text file


def _format_of(path: Path) -> tuple[str, str | None] | None:
    for ending, kind in FORMATS.items():
        if path.name.endswith(ending):
            return kind
    return None


def _expand(item: str) -> list[Path]:
    if glob.has_magic(item):
        if "**" in item:  # glob skips the folders it cannot list without a word
            parts = Path(item).parts
            prefix = Path(*parts[: next(i for i, p in enumerate(parts) if glob.has_magic(p))])
            if prefix.is_dir():
                _check_listable(prefix)
        found = sorted(Path(p) for p in glob.glob(item, recursive=True))
        if not found:
            raise InputNotFoundError(_no_match(item))
        files = [p for p in found if not p.is_dir()]  # a broken link is refused by its read
        folders = {p for p in found if p.is_dir()}
        # A folder matched stands for its files, as in the shell's expansion (one without
        # any adds none); `data/**` matches folders inside folders: each is walked once.
        tops = [f for f in sorted(folders) if not folders.intersection(f.parents)]
        inside = (f for top in tops for f in _folder_files(top, stacklevel=6, required=False))
        files = sorted({*files, *inside})
        if not files:
            raise InputNotFoundError(
                f"{item}: the pattern matches no file of a known format (it matches "
                f"{len(found)}: {', '.join(p.name for p in found[:3])}"
                f"{', ...' if len(found) > 3 else ''}); expected names ending in "
                f"{', '.join(FORMATS)}: change the pattern"
            )
        return files
    path = Path(item)
    if path.is_dir():
        return _folder_files(path, stacklevel=5)
    if not path.exists():
        if path.is_symlink():
            raise InputNotFoundError(_broken_link(path))
        raise InputNotFoundError(f"{path}: no such input file or directory; check the path")
    return [path]


def _no_match(pattern: str) -> str:
    """Why ``pattern`` matches nothing: the folder before its first wildcard, absent or
    without a match, and how to fix it."""
    parts = Path(pattern).parts
    fixed = Path(*parts[: next(i for i, p in enumerate(parts) if glob.has_magic(p))] or ".")
    if not fixed.exists():
        why = f"{fixed} does not exist"
    elif not fixed.is_dir():
        why = f"{fixed} is a file, not a folder"
    else:
        why = f"nothing in {fixed} matches it"
    relative = "" if Path(pattern).is_absolute() else f" (relative to {os.getcwd()})"
    return (
        f"{pattern}: the pattern matches no file: {why}{relative}; check the pattern (a "
        "wildcard does not match names starting with '.'; '**' matches folders at any depth)"
    )


def _folder_files(path: Path, *, stacklevel: int, required: bool = True) -> list[Path]:
    """The files of a known format under the folder ``path`` (recursively, sorted, hidden
    entries skipped as globs skip them), warning of the other ones; none is an error if
    ``required`` (a folder named as an input)."""
    files, hidden = _walk(path)
    found = [p for p in files if _format_of(p)]
    if not found and required:
        raise ValueError(f"{path}: the directory holds no {'/'.join(FORMATS)} files")
    for what, names in (
        ("file(s) of other formats", [p.name for p in files if not _format_of(p)]),
        ("hidden file(s) and folder(s) (name them to read them)", hidden),
    ):
        if names:
            warnings.warn(
                f"{path}: {len(names)} {what} are not read "
                f"({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})",
                stacklevel=stacklevel,
            )
    return found


def _unlistable(err: OSError) -> None:
    raise ValueError(f"{err.filename}: cannot list the directory ({err.strerror})") from err


def _check_listable(top: Path) -> None:
    """Raises if a folder a ``**`` glob from ``top`` would enter cannot be listed (visible
    folders, links not followed: a link loop shows as a file named twice instead)."""
    for _, dirs, _ in os.walk(top, onerror=_unlistable):
        dirs[:] = [d for d in dirs if not d.startswith(".")]  # as glob's **


def _walk(top: Path) -> tuple[list[Path], list[str]]:
    """Every non-directory entry under ``top``, sorted, following links to directories and
    skipping hidden ones (names starting with "."; ``.ipynb_checkpoints`` holds copies), and
    the hidden names skipped; an unreadable directory or one reached twice (a link loop)
    raises instead of being skipped."""
    files, seen, hidden = [], {}, []
    for here, dirs, names in os.walk(top, onerror=_unlistable, followlinks=True):
        first = seen.setdefault(os.path.realpath(here), here)
        if first != here:
            raise ValueError(
                f"{here}: the directory {first} again (a symbolic link loop, or two links to "
                "one directory): its files would be read twice; remove the link"
            )
        hidden += sorted(n for n in (*dirs, *names) if n.startswith("."))
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        files += [Path(here, name) for name in names if not name.startswith(".")]
    return sorted(files), hidden


def _parquet_groups(path: Path, field: str) -> tuple[tuple[int, int], ...]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as err:
        raise ImportError(
            f"{path}: reading Parquet needs pyarrow; pip install 'grainpack[text]'"
        ) from err
    try:
        meta = pq.ParquetFile(path).metadata
    except Exception as err:  # pyarrow raises ArrowInvalid, OSError, ...
        raise ValueError(f"{path}: not a readable Parquet file ({err})") from err
    schema = meta.schema.to_arrow_schema()
    if field not in schema.names:
        raise OptionError(
            f"{path}: no column {field!r} (columns: {schema.names}); pass the text column as "
            "{field}",
            field=field,
        )
    if schema.names.count(field) > 1:
        raise ValueError(
            f"{path}: {schema.names.count(field)} columns are named {field!r}; which one holds "
            "the text is ambiguous: rename the others"
        )
    kind = schema.field(field).type
    text = kind.value_type if pa.types.is_dictionary(kind) else kind  # dictionary-encoded
    if str(text) not in ("string", "large_string", "string_view"):
        raise ValueError(f"{path}: column {field!r} holds {kind}, expected strings (text)")
    groups = (meta.row_group(g) for g in range(meta.num_row_groups))
    return tuple(
        (g.num_rows, sum(g.column(c).total_compressed_size for c in range(g.num_columns)))
        for g in groups
    )


def _broken_link(path: Path) -> str:
    return (
        f"{path}: a symbolic link to {os.readlink(path)}, which does not exist; fix or remove "
        "the link"
    )


def find_inputs(inputs: PathLike | Sequence[PathLike], *, field: str = "text") -> list[InputFile]:
    """The input files, in order: paths as given; a directory or a glob stands for its sorted
    files of a known format (directories recursively).

    Every file must have a known format and be readable; Parquet files must have a string
    column ``field``. Nothing is read beyond a first byte and Parquet metadata.

    Raises:
        InputNotFoundError: A path or pattern matches nothing (a ``FileNotFoundError`` and
            a ``ValueError``).
        ValueError: No input file, an unknown format, an unreadable file, a bad Parquet file.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> _ = open(f"{d}/a.jsonl", "w").write('{"text": "hi"}\\n')
        >>> [(f.format, f.compression, f.size) for f in find_inputs(d)]
        [('jsonl', None, 15)]
    """
    items = [inputs] if isinstance(inputs, str | os.PathLike) else list(inputs)
    files, named = [], {}
    for path in (p for item in items for p in _expand(os.fspath(item))):
        kind = _format_of(path)
        if kind is None:
            raise ValueError(
                f"{path}: unknown input format; expected a name ending in one of "
                f"{', '.join(FORMATS)}"
            )
        try:
            stat = path.stat()
            if not S_ISREG(stat.st_mode):  # opening a FIFO would block
                raise ValueError(
                    f"{path}: not a regular file (a FIFO, device or socket); "
                    "write its contents to a file and build from that"
                )
            with open(path, "rb") as f:
                f.read(1)
        except OSError as err:
            if isinstance(err, FileNotFoundError) and path.is_symlink():
                raise ValueError(_broken_link(path)) from err
            raise ValueError(f"{path}: cannot read the file ({err.strerror})") from err
        if (first := named.setdefault((stat.st_dev, stat.st_ino), path)) is not path:
            raise ValueError(
                f"{path}: the same file as {first} (named twice, through a link or overlapping "
                "inputs): its documents would be stored twice; name each file once"
            )
        groups = _parquet_groups(path, field) if kind[0] == "parquet" else ()
        files.append(InputFile(str(path), *kind, stat.st_size, stat.st_mtime_ns, groups))
    if not files:
        raise ValueError(f"expected at least one input file, got {inputs!r}")
    return files


def _pieces(file: InputFile, lines: bool, part_bytes: int) -> list[TextSlice]:
    """The file cut into about ``part_bytes`` pieces where its format allows it."""
    if file.format == "parquet":  # consecutive row groups until a piece holds part_bytes
        pieces, start, held = [], 0, 0
        for g, (_, size) in enumerate(file.row_groups):
            held += size
            if held >= part_bytes or g == len(file.row_groups) - 1:
                pieces.append(TextSlice(file, start, g + 1))
                start, held = g + 1, 0
        return pieces
    splittable = file.compression is None and (file.format == "jsonl" or lines)
    if not splittable or file.size <= part_bytes:
        return [TextSlice(file, 0, file.size if splittable else 0)]
    n = -(-file.size // part_bytes)
    cuts = [k * file.size // n for k in range(n + 1)]
    return [TextSlice(file, a, b) for a, b in itertools.pairwise(cuts)]


def default_part_bytes(files: Sequence[InputFile]) -> int:
    """A 256th of the input's bytes, clamped to [4 MiB, 1 GiB].

    Example:
        >>> default_part_bytes([InputFile("a.jsonl", "jsonl", None, 10**11, 0)]) / 2**20
        372.5290298461914
    """
    return min(max(sum(f.size for f in files) // 256, 4 << 20), 1 << 30)


def plan_parts(
    files: Sequence[InputFile], *, lines: bool = False, part_bytes: int | None = None
) -> list[tuple[TextSlice, ...]]:
    """Splits the input into parts of about ``part_bytes`` bytes on disk, in input order.

    ``part_bytes=None`` is :func:`default_part_bytes`.

    A file of at least ``part_bytes`` starts a new part and is cut into pieces: a line file
    into ``ceil(size / part_bytes)`` equal byte ranges (a line belongs to the range where it
    starts), a Parquet file into runs of row groups of at least ``part_bytes`` (the last may
    be smaller); compressed files stay whole. Smaller files are grouped in order until a
    part reaches ``part_bytes``.

    Example:
        >>> f = InputFile("a.jsonl", "jsonl", None, 100, 0)
        >>> [(s.start, s.stop) for (s,) in plan_parts([f], part_bytes=40)]
        [(0, 33), (33, 66), (66, 100)]
    """
    if part_bytes is None:
        part_bytes = default_part_bytes(files)
    if not isinstance(part_bytes, int) or part_bytes < 1:
        raise ValueError(f"part_bytes must be a positive int or None, got {part_bytes=}")
    parts: list[tuple[TextSlice, ...]] = []
    group: list[TextSlice] = []
    for file in files:
        if file.size >= part_bytes:
            if group:
                parts.append(tuple(group))
                group = []
            parts.extend((piece,) for piece in _pieces(file, lines, part_bytes))
            continue
        group.extend(_pieces(file, lines, part_bytes))
        if sum(s.size for s in group) >= part_bytes:
            parts.append(tuple(group))
            group = []
    if group:
        parts.append(tuple(group))
    return parts


def _open(file: InputFile) -> IO[bytes]:
    if file.compression == "gzip":  # it closes the file it opened (not one given to it)
        return gzip.open(file.path, "rb")  # type: ignore[return-value]
    raw = open(file.path, "rb")  # noqa: SIM115  (closed by the wrapper or the caller)
    if file.compression == "zstd":
        try:
            import zstandard
        except ImportError as err:
            raw.close()
            raise ImportError(
                f"{file.path}: reading .zst needs zstandard; pip install 'grainpack[text]'"
            ) from err
        return io.BufferedReader(_ZstdFrames(raw, zstandard.ZstdDecompressor()), _READ_BYTES)
    return raw


class _ZstdFrames(io.RawIOBase):
    """The frames of a ``.zst`` file, decompressed one after the other; a file that ends
    inside a frame raises ``EOFError`` (zstandard's stream reader returns what it decoded,
    so a truncated file would lose its tail silently)."""

    def __init__(self, raw: IO[bytes], decompressor: Any) -> None:
        self.raw, self.decompressor = raw, decompressor
        self.frame = decompressor.decompressobj()
        self.in_frame = False  # the current frame has input but has not ended
        self.pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.pending:
            data = self.raw.read(_READ_BYTES)
            if not data:
                if self.in_frame:
                    raise EOFError("the file ends inside a zstd frame")
                return 0
            out = []
            while data:
                if self.frame.eof:  # the next frame starts in the rest of the input
                    self.frame = self.decompressor.decompressobj()
                out.append(self.frame.decompress(data))
                self.in_frame = not self.frame.eof
                data = self.frame.unused_data if self.frame.eof else b""
            self.pending = memoryview(b"".join(out))
        n = min(len(buffer), len(self.pending))
        buffer[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


def _lines(piece: TextSlice) -> Iterator[tuple[int, bytes]]:
    """(byte offset, line) of the lines that start in the slice (all lines if whole)."""
    with _open(piece.file) as f:
        position = 0
        if piece.start > 0:  # the line running into the slice belongs to the previous one
            f.seek(piece.start - 1)
            position = piece.start - 1 + len(f.readline())
        stop = piece.stop or None
        for line in f:
            if stop is not None and position >= stop:
                break
            yield position, line
            position += len(line)


def _line_number(file: InputFile, position: int) -> int | None:
    """The line (from 1) that holds byte ``position`` of ``file`` (of a compressed file, of
    its decompressed data), None if the file cannot be read again. Reads the file up to
    there: only for an error."""
    line, left = 1, position
    try:
        with _open(file) as f:
            while left > 0 and (chunk := f.read(min(left, _READ_BYTES))):
                line, left = line + chunk.count(b"\n"), left - len(chunk)
    except Exception:  # a corrupt or changed file: the message gives the byte alone
        return None
    return line


def _at_byte(file: InputFile, position: int) -> str:
    return f"byte {position}" + (" of the decompressed data" if file.compression else "")


def _line_at(file: InputFile, position: int) -> str:
    """``line N at byte B`` (of the decompressed data, for a compressed file): where the
    line starting at ``position`` is, for a message."""
    line = _line_number(file, position)
    return f"{'the line' if line is None else f'line {line}'} at {_at_byte(file, position)}"


def _decode_error(file: InputFile, position: int, err: UnicodeDecodeError) -> ValueError:
    line = _line_number(file, position + err.start)
    return ValueError(
        f"{file.path}: not UTF-8 text at {_at_byte(file, position + err.start)} "
        f"({'' if line is None else f'line {line}: '}{err.reason}); convert the file to UTF-8"
    )


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON; write null or a string")


_STRICT = json.JSONDecoder(parse_constant=_not_json)


def load_json(text: str | bytes) -> Any:
    """``json.loads``, but ``NaN``, ``Infinity`` and ``-Infinity`` (no JSON) are refused.

    Example:
        >>> load_json(b'{"text": "a", "score": 1.5}')
        {'text': 'a', 'score': 1.5}
        >>> load_json('{"score": NaN}')
        Traceback (most recent call last):
        ...
        ValueError: NaN is not JSON; write null or a string
    """
    if isinstance(text, bytes):  # as json.loads decodes bytes
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    return _STRICT.decode(text)


def json_problem(err: json.JSONDecodeError) -> str:
    """What is wrong in a one-line JSON record and where (its character offset), for a message.

    Example:
        >>> try:
        ...     json.loads('{"text": "a\x01"}')
        ... except json.JSONDecodeError as err:
        ...     json_problem(err)
        'Invalid control character at char 11 of the line'
    """
    return f"{err.msg.removesuffix(' at')} at char {err.pos} of the line"


def repeated_key(line: bytes, key: str) -> bool:
    """Whether an object of the JSON ``line`` names ``key`` twice (``json.loads`` keeps the
    last value without a word). Only a line holding the quoted key twice (as raw UTF-8 or
    ASCII-escaped, as JSON writers spell it) is parsed again; other ``\\u`` spellings of a
    key are not looked for.

    Example:
        >>> repeated_key(b'{"text": "a", "text": ""}', "text")
        True
        >>> repeated_key(b'{"text": "a", "meta": {"text": "b"}}', "text")
        False
    """
    spellings = {json.dumps(key).encode(), json.dumps(key, ensure_ascii=False).encode()}
    if sum(line.count(spelling) for spelling in spellings) < 2:
        return False
    found = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        found.append(sum(k == key for k, _ in items) > 1)
        return dict(items)

    json.loads(line, object_pairs_hook=pairs)
    return any(found)


# The JSON types of a text field that is not a string, for a message
_JSON_TYPES = {bool: "true or false", int: "a number", float: "a number", list: "an array"}


def _jsonl_documents(piece: TextSlice, field: str) -> Iterator[str]:
    path = piece.file.path
    for position, line in _lines(piece):
        if line.startswith(codecs.BOM_UTF8):  # a byte order mark (files joined with cat)
            line, position = line[len(codecs.BOM_UTF8) :], position + len(codecs.BOM_UTF8)
        if not line.strip():
            continue
        try:  # strict: UTF-8 encoding a surrogate is refused (json.loads would pass it)
            record = load_json(line.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise _decode_error(piece.file, position, err) from None
        except json.JSONDecodeError as err:
            raise ValueError(
                f"{path}: invalid JSON in {_line_at(piece.file, position)} "
                f"({json_problem(err)}); each line must be one JSON object"
            ) from None
        except (ValueError, RecursionError) as err:  # a huge number, deep nesting
            raise ValueError(
                f"{path}: the JSON {_line_at(piece.file, position)} cannot be read ({err}); "
                "fix or drop that record"
            ) from None
        if repeated_key(line, field):
            raise ValueError(
                f"{path}: the JSON {_line_at(piece.file, position)} names {field!r} twice in "
                "one object (JSON keeps the last value without a word); keep one"
            )
        text = record.get(field) if isinstance(record, dict) else None
        if isinstance(record, dict) and field in record and not isinstance(text, str):
            held = "null" if text is None else _JSON_TYPES.get(type(text), "an object")
            raise ValueError(  # the field is there: its value, not the option, is wrong
                f"{path}: {_line_at(piece.file, position)} has {held} in {field!r}, not a "
                "string; fix or drop that record"
            )
        if not isinstance(text, str):
            found = f"keys {sorted(record)}" if isinstance(record, dict) else type(record).__name__
            raise OptionError(
                f"{path}: {_line_at(piece.file, position)} has no text in {{field=}} (found "
                f"{found}); pass the name of the text field as {{field}}",
                field=field,
            )
        if b"\\u" in line:  # a JSON escape may make a lone surrogate, which is not text
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                raise ValueError(
                    f"{path}: {_line_at(piece.file, position)} holds a lone surrogate "
                    f"({text[err.start : err.end]!r}, from a \\u escape) in {field!r}, "
                    "which is not text; fix or drop that record"
                ) from None
        yield text


def _text_documents(piece: TextSlice, lines: bool) -> Iterator[str]:
    if not lines:
        with _open(piece.file) as f:
            data = f.read()
        try:
            yield data.decode("utf-8").removeprefix(BOM)  # an encoding mark, not text
        except UnicodeDecodeError as err:
            raise _decode_error(piece.file, 0, err) from None
        return
    for position, line in _lines(piece):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as err:
            raise _decode_error(piece.file, position, err) from None
        if text.endswith("\n"):  # a line ends at \n or \r\n; a bare \r is text
            text = text[:-2] if text.endswith("\r\n") else text[:-1]
        if position == 0:
            text = text.removeprefix(BOM)
        if not text.isspace() and text:  # blank: empty or whitespace only (str.isspace)
            yield text


def _parquet_documents(piece: TextSlice, field: str) -> Iterator[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = sum(n for n, _ in piece.file.row_groups[: piece.start])
    groups = list(range(piece.start, piece.stop))
    # Pages written with checksums are checked: a flipped byte is an error, not other text.
    with pq.ParquetFile(piece.file.path, page_checksum_verification=True) as f:
        batches = f.iter_batches(_PARQUET_ROWS, row_groups=groups, columns=[field])
        while True:
            try:
                batch = next(batches, None)
            except (OSError, pa.ArrowException) as err:  # decompression, decoding, checksums
                raise ValueError(
                    f"{piece.file.path}: corrupt or unreadable Parquet data after row {rows} "
                    f"(row groups {piece.start}-{piece.stop - 1}): {err}"
                ) from err
            if batch is None:
                return
            try:
                texts = batch.column(0).to_pylist()
            except UnicodeDecodeError as err:
                raise ValueError(
                    f"{piece.file.path}: row {rows + _first_undecodable(batch.column(0))} of "
                    f"column {field!r} is not UTF-8 text ({err.reason}); fix or drop that row"
                ) from None
            if None in texts:
                raise ValueError(
                    f"{piece.file.path}: row {rows + texts.index(None)} has no text (null "
                    f"in column {field!r}); drop or fill the empty rows"
                )
            rows += len(texts)
            yield from texts


def _first_undecodable(column: Any) -> int:
    """The index of the first value of a string column that is not UTF-8."""
    for k in range(len(column)):
        try:
            column[k].as_py()
        except UnicodeDecodeError:
            return k
    return 0


def read_documents(piece: TextSlice, *, field: str = "text", lines: bool = False) -> Iterator[str]:
    """The documents of a slice, in order, streaming.

    JSON lines: blank lines are skipped; every other line must be an object whose ``field``
    is a string. Plain text: the whole file, or its non-blank lines (without the newline)
    with ``lines=True``. Parquet: the ``field`` column (nulls are refused).

    Raises:
        ValueError: Invalid JSON, a missing or non-string field, bytes that are not UTF-8,
            a corrupt file (the message names the file and the byte or row).
    """
    reader: Iterator[str]
    if piece.file.format == "jsonl":
        reader = _jsonl_documents(piece, field)
    elif piece.file.format == "parquet":
        reader = _parquet_documents(piece, field)
    else:
        reader = _text_documents(piece, lines)
    try:
        yield from reader
    except (EOFError, gzip.BadGzipFile) as err:
        raise ValueError(f"{piece.file.path}: corrupt or truncated file ({err})") from err
    except ValueError:
        raise
    except Exception as err:  # zstandard.ZstdError (module "zstd" before 0.25), ArrowInvalid
        kind = type(err)
        if kind.__name__ == "ZstdError" or kind.__module__.split(".")[0] == "pyarrow":
            raise ValueError(f"{piece.file.path}: corrupt or unreadable file ({err})") from err
        raise
    _check_unchanged(piece.file)


def _check_unchanged(file: InputFile) -> None:
    """Raises unless ``file`` still has the size and mtime it was planned with (checked
    after reading it: a file changed during the build would mix two versions)."""
    try:
        stat = os.stat(file.path)
    except OSError as err:
        now = err.strerror
    else:
        if (stat.st_size, stat.st_mtime_ns) == (file.size, file.mtime_ns):
            return
        now = f"{stat.st_size:,} bytes" if stat.st_mtime_ns == file.mtime_ns else "a new mtime"
    raise ValueError(
        f"{file.path}: changed during the build (planned at {file.size:,} bytes, now "
        f"{now}); build from files that no longer change"
    )


def describe_slice(piece: TextSlice) -> dict[str, Any]:
    """The slice as plain JSON (for build plans)."""
    return {
        "path": os.path.abspath(piece.file.path),
        "size": piece.file.size,
        "mtime_ns": piece.file.mtime_ns,
        "start": piece.start,
        "stop": piece.stop,
    }
