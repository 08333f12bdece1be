"""Text inputs: file discovery, the split into parts, and streaming every format."""

from __future__ import annotations

import gc
import gzip
import json
import os
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from grainpack.ingest.text import InputFile, TextSlice, find_inputs, plan_parts, read_documents

DOCS = ["first line", "é ☕ unicode", "", "x" * 300, "a\nmulti-line\ndocument", "last"]


def write_jsonl(path, docs, *, field="text"):
    data = "".join(json.dumps({field: d, "id": i}) + "\n" for i, d in enumerate(docs)).encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    elif path.name.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


def documents(files, **options):
    field = options.pop("field", "text")
    return [
        doc
        for part in plan_parts(files, **options)
        for piece in part
        for doc in read_documents(piece, field=field, lines=options.get("lines", False))
    ]


@pytest.mark.parametrize("name", ["a.jsonl", "a.jsonl.gz", "a.jsonl.zst"])
def test_jsonl_documents_in_order(tmp_path, name):
    files = find_inputs(write_jsonl(tmp_path / name, DOCS))
    assert documents(files) == DOCS


def test_zst_files_of_several_frames_are_read_whole(tmp_path):
    compress = zstandard.ZstdCompressor().compress
    data = [json.dumps({"text": d}).encode() + b"\n" for d in DOCS]
    (tmp_path / "a.jsonl.zst").write_bytes(b"".join(compress(line) for line in data))
    (tmp_path / "b.txt.zst").write_bytes(compress(b"one ") + compress(b"") + compress(b"two"))
    assert documents(find_inputs(tmp_path / "a.jsonl.zst")) == DOCS
    assert documents(find_inputs(tmp_path / "b.txt.zst")) == ["one two"]


@pytest.mark.parametrize("part_bytes", [1, 7, 40, 64, 100, 10**6])
def test_byte_ranges_cover_every_line_once(tmp_path, part_bytes):
    path = write_jsonl(tmp_path / "a.jsonl", DOCS * 5)
    path.write_bytes(path.read_bytes().replace(b"\n", b"\n\n", 3))  # blank lines are skipped
    files = find_inputs(path)
    assert documents(files, part_bytes=part_bytes) == DOCS * 5


def test_plain_text_one_document_per_file_or_line(tmp_path):
    (tmp_path / "a.txt").write_text("one\ntwo\r\n\n  \nthree")
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(b"four\nfive\n"))
    (tmp_path / "c.txt.zst").write_bytes(zstandard.ZstdCompressor().compress(b"six"))
    (tmp_path / "notes.md").write_text("ignored: not a known format")
    with pytest.warns(UserWarning, match=r"1 file\(s\) of other formats are not read \(notes.md\)"):
        files = find_inputs(tmp_path)
    assert [f.format for f in files] == ["text"] * 3
    assert documents(files) == ["one\ntwo\r\n\n  \nthree", "four\nfive\n", "six"]
    expected = ["one", "two", "three", "four", "five", "six"]
    assert documents(files, lines=True) == expected
    assert documents(files, lines=True, part_bytes=3) == expected


def test_parquet_row_groups(tmp_path):
    texts = [f"document {i} " * (i % 5) for i in range(1000)]
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"id": list(range(1000)), "content": texts}), path, row_group_size=64)
    (file,) = find_inputs(path, field="content")
    assert len(file.row_groups) == 16 and sum(n for n, _ in file.row_groups) == 1000
    for part_bytes in (1, 2000, 10**9):
        assert documents([file], field="content", part_bytes=part_bytes) == texts
    assert len(plan_parts([file], part_bytes=1)) == 16


def test_parquet_errors(tmp_path):
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"body": ["a", None], "n": [1, 2]}), path)
    with pytest.raises(ValueError, match=r"no column 'text' \(columns: \['body', 'n'\]\)"):
        find_inputs(path)
    with pytest.raises(ValueError, match="column 'n' holds int64, expected strings"):
        find_inputs(path, field="n")
    (file,) = find_inputs(path, field="body")
    duplicated = pa.table([pa.array(["a"]), pa.array(["b"])], names=["text", "text"])
    pq.write_table(duplicated, tmp_path / "d.parquet")  # a KeyError from pyarrow
    with pytest.raises(ValueError, match="2 columns are named 'text'; which one holds the text"):
        find_inputs(tmp_path / "d.parquet")
    with pytest.raises(ValueError, match="row 1 has no text"):
        list(read_documents(TextSlice(file, 0, 1), field="body"))
    (tmp_path / "b.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match=r"b\.parquet: not a readable Parquet file"):
        find_inputs(tmp_path / "b.parquet")
    # a string column whose row 2 is not UTF-8 (written from raw buffers)
    offsets = pa.py_buffer(np.array([0, 2, 3, 6], np.int32).tobytes())
    column = pa.Array.from_buffers(pa.string(), 3, [None, offsets, pa.py_buffer(b"okx\xff\xfex")])
    pq.write_table(pa.table({"text": column}), tmp_path / "c.parquet")
    (file,) = find_inputs(tmp_path / "c.parquet")
    with pytest.raises(ValueError, match=r"c\.parquet: row 2 of column 'text' is not UTF-8 text"):
        list(read_documents(TextSlice(file, 0, 1)))


def test_a_dictionary_encoded_text_column_is_text(tmp_path):
    column = pa.array(["a", "b", "a", "c"]).dictionary_encode()
    pq.write_table(pa.table({"text": column}), tmp_path / "a.parquet")
    assert documents(find_inputs(tmp_path / "a.parquet")) == ["a", "b", "a", "c"]


def test_lines_end_at_a_newline_and_a_bare_carriage_return_is_text(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"one\r\ntwo\n\na\r\r\nb\rc\n \xc2\xa0\t\nlast\r")
    expected = ["one", "two", "a\r", "b\rc", "last\r"]  # the rstrip took every \r
    assert documents(find_inputs(tmp_path / "a.txt"), lines=True) == expected


def test_corrupt_parquet_pages_are_errors_not_other_text(tmp_path):
    path = tmp_path / "a.parquet"
    texts = [f"row {i}" for i in range(100)]
    pq.write_table(pa.table({"text": texts}), path, write_page_checksum=True, compression="none")
    (file,) = find_inputs(path)
    assert list(read_documents(TextSlice(file, 0, 1))) == texts
    data = bytearray(path.read_bytes())
    at = data.index(b"row 42")
    data[at + 5] ^= 1  # "row 42" -> "row 43"
    path.write_bytes(bytes(data))
    (file,) = find_inputs(path)
    with pytest.raises(ValueError, match=r"a\.parquet: corrupt or unreadable Parquet data .*CRC"):
        list(read_documents(TextSlice(file, 0, 1)))


def test_plan_is_a_pure_function_of_sizes():
    def file(name, size):
        return InputFile(name, "jsonl", None, size, 0)

    small = [file(f"s{i}.jsonl", 30) for i in range(5)]
    big = file("big.jsonl", 250)
    packed = gz = InputFile("c.jsonl.gz", "jsonl", "gzip", 500, 0)
    parts = plan_parts([*small[:2], big, *small[2:], packed], part_bytes=100)
    assert [[(s.file.path, s.start, s.stop) for s in part] for part in parts] == [
        [("s0.jsonl", 0, 30), ("s1.jsonl", 0, 30)],  # closed early: a big file starts anew
        [("big.jsonl", 0, 83)],
        [("big.jsonl", 83, 166)],
        [("big.jsonl", 166, 250)],
        [("s2.jsonl", 0, 30), ("s3.jsonl", 0, 30), ("s4.jsonl", 0, 30)],
        [("c.jsonl.gz", 0, 0)],  # compressed: whole
    ]
    assert parts[-1][0].size == gz.size
    with pytest.raises(ValueError, match="part_bytes must be a positive int or None"):
        plan_parts(small, part_bytes=0)


def test_find_inputs_globs_directories_and_errors(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in ("d/b.jsonl", "d/sub/a.jsonl", "d/a.jsonl", "d/skip.csv"):
        write_jsonl(tmp_path / name, ["x"])
    with pytest.warns(UserWarning, match=r"1 file\(s\) of other formats are not read \(skip.csv\)"):
        names = [f.path.removeprefix(str(tmp_path)) for f in find_inputs(tmp_path / "d")]
    assert names == ["/d/a.jsonl", "/d/b.jsonl", "/d/sub/a.jsonl"]
    assert len(find_inputs(f"{tmp_path}/d/**/*.jsonl")) == 3
    with pytest.raises(FileNotFoundError, match="the pattern matches no file"):
        find_inputs(f"{tmp_path}/*.parquet")
    with pytest.raises(FileNotFoundError, match="no such input file"):
        find_inputs(tmp_path / "missing.jsonl")
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "gone.jsonl")  # named, or in a folder
    with pytest.raises(FileNotFoundError, match=r"link.jsonl: a symbolic link to \S+gone.jsonl"):
        find_inputs(tmp_path / "link.jsonl")
    (tmp_path / "d" / "sub" / "z.jsonl").symlink_to("gone.jsonl")
    broken = r"z.jsonl: a symbolic link to gone.jsonl, which does not exist"
    with pytest.raises(ValueError, match=broken), pytest.warns(UserWarning, match="skip.csv"):
        find_inputs(tmp_path / "d")
    with pytest.raises(ValueError, match="unknown input format"):
        find_inputs(tmp_path / "d" / "skip.csv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="the directory holds no"):
        find_inputs(tmp_path / "empty")


def test_a_glob_matching_folders_reads_their_files_and_folders_skip_hidden_ones(tmp_path):
    data = tmp_path / "data"
    for name in ("top.jsonl", "2023/a.jsonl", "2024/b.jsonl", ".ipynb_checkpoints/top.jsonl"):
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(data / name, [name])
    (data / "2024" / ".hidden.jsonl").write_text('{"text": "hidden"}\n')
    want = ["2023/a.jsonl", "2024/b.jsonl", "top.jsonl"]  # the shell's expansion of data/*
    with pytest.warns(UserWarning, match=r"2 hidden file\(s\) and folder\(s\) .* \(\.ipynb_che"):
        assert documents(find_inputs(data)) == want  # .ipynb_checkpoints held a copy
    for pattern in ("data/*", "data/**", "data/2*", "*"):  # data/* read only top.jsonl
        with pytest.warns(UserWarning, match=r"hidden file\(s\) and folder\(s\)") as caught:
            got = documents(find_inputs(f"{tmp_path}/{pattern}"))
        assert got == (want[:2] if pattern == "data/2*" else want), pattern
        assert len(caught) == 1, pattern  # each folder walked once (data/** matches nested ones)
    assert documents(find_inputs(data / "2024" / ".hidden.jsonl")) == ["hidden"]  # named
    (data / "empty").mkdir()  # a matched folder without text adds nothing, as in the shell
    (data / "imgs").mkdir()
    (data / "imgs" / "x.png").write_bytes(b"png")
    with pytest.warns(UserWarning) as caught:
        assert documents(find_inputs(f"{data}/*")) == want
    assert len([w for w in caught if "x.png" in str(w.message)]) == 1
    with pytest.raises(FileNotFoundError, match="matches no file of a known format"):
        find_inputs(f"{data}/e*")
    with pytest.raises(ValueError, match="the directory holds no"):
        find_inputs(data / "empty")  # named as an input: an error


def test_links_loops_repeats_and_unlistable_directories_are_never_skipped(tmp_path, monkeypatch):
    (tmp_path / "d").mkdir()
    (tmp_path / "real").mkdir()
    write_jsonl(tmp_path / "d" / "a.jsonl", ["x"])
    write_jsonl(tmp_path / "real" / "b.jsonl", ["y"])
    (tmp_path / "d" / "linked").symlink_to(tmp_path / "real")  # a linked folder is read
    names = [f.path.removeprefix(str(tmp_path)) for f in find_inputs(tmp_path / "d")]
    assert names == ["/d/a.jsonl", "/d/linked/b.jsonl"]
    with pytest.raises(ValueError, match=r"d/a.jsonl: the same file as .*d/a.jsonl \(named twice"):
        find_inputs([tmp_path / "d", tmp_path / "d" / "a.jsonl"])
    (tmp_path / "d" / "loop").symlink_to(tmp_path / "d")  # each file was read ~40 times
    with pytest.raises(ValueError, match=r"d/loop: the directory .*d again \(a symbolic link"):
        find_inputs(tmp_path / "d")
    with pytest.raises(ValueError, match=r"d/loop/a.jsonl: the same file as .*d/a.jsonl"):
        find_inputs(f"{tmp_path}/d/**/*.jsonl")  # glob follows the loop
    (tmp_path / "g" / ".venv").mkdir(parents=True)  # what a ** glob does not enter: unread
    (tmp_path / "g" / ".venv" / "lib64").symlink_to(tmp_path / "g" / ".venv")
    write_jsonl(tmp_path / "g" / "a.jsonl", ["z"])
    assert len(find_inputs(f"{tmp_path}/g/**/*.jsonl")) == 1
    (tmp_path / "d" / "loop").unlink()
    (tmp_path / "d" / "c.jsonl").symlink_to(tmp_path / "missing.jsonl")  # a dangling link
    for spec in (tmp_path / "d", f"{tmp_path}/d/*.jsonl"):
        with pytest.raises(ValueError, match=r"c.jsonl: a symbolic link to \S+/missing.jsonl, wh"):
            find_inputs(spec)
    (tmp_path / "d" / "c.jsonl").unlink()
    scandir = os.scandir

    (tmp_path / "d" / "sub").mkdir()

    def locked(path="."):  # as an unreadable folder lists for a user who is not root
        if os.fspath(path).endswith("sub"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", locked)
    for spec in (tmp_path / "d", f"{tmp_path}/d/**/*.jsonl"):
        with pytest.raises(ValueError, match=r"d/sub: cannot list the directory \(Permission"):
            find_inputs(spec)


def test_jsonl_errors_name_the_file_and_byte(tmp_path):
    path = tmp_path / "a.jsonl"
    cases = [
        ('{"text": "ok"}\n{"txt": "x"}\n', r"byte 15 has no text in field='text' \(found keys"),
        ('{"text": "ok"}\n{"text": 3}\n', r"line 2 at byte 15 has a number in 'text', not a"),
        ('{"text": "ok"}\n[1, 2]\n', r"\(found list\)"),
        ('{"text": "ok"}\n{"text": \n', r"at byte 15 \(Expecting value at char 10 of the line\)"),
        ('{"text": "ok"}\n{"text": "a\x01"}\n', r"byte 15 \(Invalid control character at char 11 "),
        ('{"text": "ok", "p": NaN}\n', r"byte 0 cannot be read \(NaN is not JSON; write null"),
        ('{"text": "ok"}\n{"text": "a\\ud800"}\n', r"byte 15 holds a lone surrogate \('\\ud800'"),
        # UTF-8 that encodes a surrogate (json.loads of bytes lets it through)
        (b'{"text": "ok"}\n{"text": "a\xed\xa0\x80b"}\n', "not UTF-8 text at byte 26"),
        ('{"text": ' + "[" * 100_000 + "]" * 100_000 + "}\n", "byte 0 cannot be read .maximum"),
        ('{"text": 1' + "0" * 5000 + "}\n", "byte 0 cannot be read .Exceeds the limit"),
        ('{"text": "ok"}\n{"text": "doc", "text": ""}\n', "byte 15 names 'text' twice in one"),
    ]
    for content, message in cases:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        (file,) = find_inputs(path)
        with pytest.raises(ValueError, match=message):
            list(read_documents(TextSlice(file, 0, file.size)))


def test_a_repeated_non_ascii_key_is_found_in_either_spelling(tmp_path):
    escaped = json.dumps("текст")  # "\\u0442\\u0435...", as JSON writers spell it
    for line in ('{"текст": "a", "текст": "b"}\n', f'{{"текст": "a", {escaped}: "b"}}\n'):
        (tmp_path / "a.jsonl").write_text(line)
        (file,) = find_inputs(tmp_path / "a.jsonl")
        with pytest.raises(ValueError, match="names 'текст' twice"):
            list(read_documents(TextSlice(file, 0, file.size), field="текст"))


def test_a_text_key_in_another_object_is_no_repeat(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", ["one", "two"])
    line = '{"text": "three", "meta": {"text": "a", "n": [{"text": 1}]}}\n'
    with (tmp_path / "a.jsonl").open("a") as f:
        f.write(line)
    assert documents(find_inputs(tmp_path / "a.jsonl")) == ["one", "two", "three"]


def test_jsonl_byte_order_marks_are_skipped(tmp_path):
    bom, line = b"\xef\xbb\xbf", b'{"text": "x"}\n'
    (tmp_path / "a.jsonl").write_bytes(bom + line + bom + line + bom + b"\n")  # joined by cat
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(bom + line) + gzip.compress(bom + line))
    for name in ("a.jsonl", "b.jsonl.gz"):
        (file,) = find_inputs(tmp_path / name)
        assert list(read_documents(TextSlice(file, 0, file.size))) == ["x", "x"]
    (tmp_path / "c.jsonl").write_bytes(bom + b'{"text": "a\xffb"}\n')
    (file,) = find_inputs(tmp_path / "c.jsonl")
    with pytest.raises(ValueError, match="not UTF-8 text at byte 14"):
        list(read_documents(TextSlice(file, 0, file.size)))


def test_a_compressed_input_is_closed_once_read(tmp_path):
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(b'{"text": "x"}\n'))
    (file,) = find_inputs(tmp_path / "a.jsonl.gz")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        assert list(read_documents(TextSlice(file, 0, file.size))) == ["x"]
        gc.collect()
    assert caught == []  # was "unclosed file": left to the garbage collector


def test_corrupt_and_non_utf8_files(tmp_path):
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(b'{"text": "a"}\n')[:-6])
    (tmp_path / "b.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd garbage")
    (tmp_path / "c.txt").write_bytes(b"caf\xe9")
    text = "".join(f"line {i}\n" for i in range(50_000)).encode()
    (tmp_path / "d.txt.zst").write_bytes(zstandard.ZstdCompressor().compress(text)[:-100])
    (tmp_path / "e.jsonl.zst").write_bytes(write_jsonl(tmp_path / "e.zst", DOCS).read_bytes()[:-9])
    for name, message in [
        ("a.jsonl.gz", "a.jsonl.gz: corrupt or truncated file"),
        ("b.jsonl.zst", "b.jsonl.zst: corrupt or unreadable file"),
        ("d.txt.zst", "d.txt.zst: corrupt or truncated file .the file ends inside a zstd frame"),
        ("e.jsonl.zst", "e.jsonl.zst: corrupt or truncated file"),
        ("c.txt", r"c.txt: not UTF-8 text at byte 3"),
    ]:
        (file,) = find_inputs(tmp_path / name)
        with pytest.raises(ValueError, match=message):
            list(read_documents(TextSlice(file)))


def test_a_fifo_is_refused_without_opening_it(tmp_path):
    os.mkfifo(tmp_path / "pipe.jsonl")  # opening it for reading would block: no writer
    with pytest.raises(ValueError, match=r"pipe\.jsonl: not a regular file"):
        find_inputs(tmp_path / "pipe.jsonl")


@pytest.mark.parametrize("change", ["append", "touch", "delete"])
def test_a_file_changed_during_the_build_is_refused(tmp_path, change):
    (file,) = find_inputs(write_jsonl(tmp_path / "a.jsonl", DOCS))
    texts = read_documents(TextSlice(file, 0, file.size), field="text")
    assert next(texts) == DOCS[0]
    if change == "append":
        with open(file.path, "a") as f:
            f.write('{"text": "late"}\n')
    elif change == "touch":
        os.utime(file.path, ns=(0, file.mtime_ns + 10**9))
    else:
        os.remove(file.path)  # open and read to the end all the same
    with pytest.raises(ValueError, match=r"a\.jsonl: changed during the build"):
        list(texts)


def test_files_of_other_formats_in_a_directory_are_named(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", DOCS)
    (tmp_path / "README.md").write_text("about the data")
    with pytest.warns(UserWarning, match=r"1 file\(s\) of other formats are not read \(README"):
        assert [f.path for f in find_inputs(tmp_path)] == [str(tmp_path / "a.jsonl")]


@pytest.mark.parametrize("lines", [False, True])
def test_a_byte_order_mark_starting_a_text_file_is_not_text(tmp_path, lines):
    (tmp_path / "a.txt").write_bytes("\ufeffone\ntwo \ufeff\n".encode())
    expected = ["one", "two \ufeff"] if lines else ["one\ntwo \ufeff\n"]  # inside: text
    assert documents(find_inputs(tmp_path / "a.txt"), lines=lines) == expected
