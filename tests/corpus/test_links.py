"""Corpus files stay inside the corpus: symbolic links within the folder are followed, links
out of it are refused by every reader and by merge (issue 37, point 2)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from bad_inputs import write_megatron_int64

import grainpack as gp
from grainpack.cli.main import main as cli_main
from grainpack.ingest import merge
from grainpack.ingest.merge import merge_corpora

DOCS = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
NATIVE_FILES = ["manifest.json", "tokens-00000.bin", "offsets-00000.bin", "summary-00000.bin"]


def _docs(source) -> list[list[int]]:
    return [d.tolist() for d in source]


def _move_and_link(folder: Path, name: str, store: Path, *, relative: bool) -> Path:
    """Moves ``folder/name`` into ``store`` and leaves a symbolic link to it; its target."""
    store.mkdir(parents=True, exist_ok=True)
    target = store / name
    shutil.move(folder / name, target)
    (folder / name).symlink_to(os.path.relpath(target, folder) if relative else target)
    return target


@pytest.mark.parametrize("name", NATIVE_FILES)
@pytest.mark.parametrize("relative", [True, False], ids=["relative", "absolute"])
def test_a_link_within_the_folder_is_followed(tmp_path, name, relative):
    path = tmp_path / "c"
    expected = gp.write_corpus(path, DOCS, vocab_size=10)
    _move_and_link(path, name, path / "blobs", relative=relative)
    assert _docs(gp.open_corpus(path)) == DOCS
    assert gp.open_corpus(path).fingerprint == expected.fingerprint
    assert gp.verify_corpus(path).num_documents == 3
    config = gp.PipelineConfig(sources={"c": path}, block=4, global_batch_size=2)
    batch = next(iter(gp.make_dataset(config, process_index=0, process_count=1)))
    assert batch["inputs"].shape == (2, 4)


@pytest.mark.parametrize("name", NATIVE_FILES)
@pytest.mark.parametrize("relative", [True, False], ids=["relative", "absolute"])
def test_a_link_out_of_the_folder_is_refused_by_every_reader(tmp_path, name, relative):
    path = tmp_path / "c"
    gp.write_corpus(path, DOCS, vocab_size=10)
    target = _move_and_link(path, name, tmp_path / "elsewhere", relative=relative)
    message = re.escape(
        f"{path / name}: a symbolic link to {target}, outside the corpus folder {path}; "
        "a corpus opens only files inside its folder"
    )
    with pytest.raises(gp.CorpusError, match=message):
        gp.open_corpus(path)
    with pytest.raises(gp.CorpusError, match=message):
        gp.verify_corpus(path)
    config = gp.PipelineConfig(sources={"c": path}, block=4, global_batch_size=2)
    with pytest.raises(gp.CorpusError, match=message):
        gp.make_dataset(config, process_index=0, process_count=1)
    assert cli_main(["verify", str(path)]) == 1


def test_a_link_within_a_linked_folder_is_within(tmp_path):
    # The folder's own links resolve first: a corpus reached through a link stays readable.
    real = tmp_path / "disk" / "c"
    gp.write_corpus(real, DOCS)
    _move_and_link(real, "tokens-00000.bin", real / "blobs", relative=True)
    (tmp_path / "c").symlink_to(real)
    assert _docs(gp.open_corpus(tmp_path / "c")) == DOCS


def test_a_chain_of_links_ending_outside_is_refused(tmp_path):
    path = tmp_path / "c"
    gp.write_corpus(path, DOCS)
    target = _move_and_link(path, "tokens-00000.bin", tmp_path / "elsewhere", relative=False)
    (path / "hop").symlink_to(target)  # inside the folder by name, not by what it reaches
    (path / "tokens-00000.bin").unlink()
    (path / "tokens-00000.bin").symlink_to("hop")
    with pytest.raises(gp.CorpusError, match=f"a symbolic link to {re.escape(str(target))}"):
        gp.open_corpus(path)


@pytest.mark.parametrize("name", ["index.json", "b.bin"])
def test_flat_shard_layout_follows_links_within_and_refuses_links_out(tmp_path, name):
    path = tmp_path / "flat"
    path.mkdir()
    np.array([1, 2, 3], "<u2").tofile(path / "a.bin")
    np.array([4, 5], "<u2").tofile(path / "b.bin")
    (path / "index.json").write_text('{"a.bin": 3, "b.bin": 2}')
    inside = _move_and_link(path, name, path / "blobs", relative=True)
    assert _docs(gp.open_corpus(path)) == [[1, 2, 3], [4, 5]]
    (path / name).unlink()
    outside = tmp_path / "elsewhere" / name
    outside.parent.mkdir()
    shutil.move(inside, outside)
    (path / name).symlink_to(outside)
    with pytest.raises(gp.CorpusError, match=re.escape(f"{path / name}: a symbolic link to ")):
        gp.open_corpus(path)
    with pytest.raises(gp.CorpusError, match="outside the corpus folder"):
        gp.verify_corpus(path)


def test_megatron_prefix_files_may_be_links(tmp_path):
    # A Megatron prefix names its files itself (no listing in a folder): links are followed.
    (tmp_path / "store").mkdir()
    write_megatron_int64(tmp_path / "store" / "m", [[1, 2], [3]])
    for suffix in (".bin", ".idx"):
        (tmp_path / f"m{suffix}").symlink_to(tmp_path / "store" / f"m{suffix}")
    assert _docs(gp.open_corpus(tmp_path / "m")) == [[1, 2], [3]]


# -- merge never links a foreign file ----------------------------------------------------------


def test_merge_links_the_file_behind_a_link_within_the_part(tmp_path):
    part = tmp_path / "part"
    gp.write_corpus(part, DOCS)
    target = _move_and_link(part, "tokens-00000.bin", part / "blobs", relative=True)
    merged = merge_corpora([part], tmp_path / "deep" / "out")
    assert _docs(merged) == DOCS
    shard = tmp_path / "deep" / "out" / "tokens-00000.bin"
    assert not shard.is_symlink() and shard.stat().st_ino == target.stat().st_ino


@pytest.mark.parametrize("name", ["tokens-00000.bin", "offsets-00000.bin", "manifest.json"])
def test_merge_refuses_a_part_with_a_link_out_of_its_folder(tmp_path, name):
    part = tmp_path / "part"
    gp.write_corpus(part, DOCS)
    foreign = _move_and_link(part, name, tmp_path / "elsewhere", relative=False)
    gp.write_corpus(tmp_path / "out", [[9]])
    with pytest.raises(gp.CorpusError, match=re.escape(f"{part / name}: a symbolic link to ")):
        merge_corpora([part], tmp_path / "out", overwrite=True)
    assert foreign.stat().st_nlink == 1  # never hard-linked anywhere
    assert _docs(gp.open_corpus(tmp_path / "out")) == [[9]]
    assert sorted(os.listdir(tmp_path)) == ["elsewhere", "out", "part"]


def test_merge_refuses_a_link_swapped_after_the_part_was_opened(tmp_path, monkeypatch):
    # open_corpus checked the link; by the time merge links, it points out of the folder.
    part = tmp_path / "part"
    gp.write_corpus(part, DOCS)
    inside = _move_and_link(part, "tokens-00000.bin", part / "blobs", relative=True)
    foreign = tmp_path / "foreign.bin"
    shutil.copy(inside, foreign)  # same size: only the identity tells them apart
    opened = merge.open_corpus

    def open_then_swap(path):
        source = opened(path)
        if Path(path) == part:
            (part / "tokens-00000.bin").unlink()
            (part / "tokens-00000.bin").symlink_to(foreign)
        return source

    monkeypatch.setattr(merge, "open_corpus", open_then_swap)
    with pytest.raises(gp.CorpusError, match=r"tokens-00000\.bin: changed since the corpus was"):
        merge_corpora([part], tmp_path / "out")
    assert foreign.stat().st_nlink == 1
    assert not (tmp_path / "out").exists()
