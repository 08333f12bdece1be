"""The first-hour answers of the README and the documentation site run as written (issue 38):
a tokenizer without a download, a Scale example whose corpus and boundary_id agree, and a
headless notebook run."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

from doc_pages import ROOT, block, text

import grainpack as gp
from grainpack.cli.main import main
from grainpack.demo import documents


def _data(folder: Path) -> None:
    folder.mkdir()
    lines = "".join(json.dumps({"text": text}) + "\n" for text in documents("en"))
    (folder / "docs.jsonl").write_text(lines)


def test_a_tokenizer_without_a_download(tmp_path, monkeypatch):
    # Before: "From text to training" assumed a tokenizer.json; how to get one offline was
    # only in the quickstart notebook and `build --help`.
    monkeypatch.chdir(tmp_path)
    _data(tmp_path / "data")
    exec(block("tokenizer.save("), {})
    build = block('pip install -e ".[text]"', "bash").splitlines()[1]
    assert main(shlex.split(build)[1:]) == 0  # the section's command, with that tokenizer
    corpus = gp.open_corpus("corpus/en")
    assert corpus.tokenizer["file"] == "tokenizer.json" and corpus.vocab_size == 8192
    assert "--tokenizer bytes --eos 256" in text()
    argv = ["build", "data/", "--tokenizer", "bytes", "--eos", "256", "-o", "corpus/bytes"]
    assert main(argv) == 0
    assert gp.open_corpus("corpus/bytes").eos_id == 256


def test_the_scale_example_builds_its_corpus_and_packs_it_without_a_warning(
    tmp_path, monkeypatch, tokenizer_files
):
    # Before: boundary_id=50_256 on a corpus "written with build --shuffle", --eos unsaid;
    # with --eos, make_dataset warns that every document ends with two boundaries.
    monkeypatch.chdir(tmp_path)
    _data(tmp_path / "web")
    shutil.copy(tokenizer_files["huggingface"], tmp_path / "tokenizer.json")
    build = block("--shuffle 0 -o corpus/web", "bash")
    assert "--shuffle" in build and "--eos" in build
    assert main(shlex.split(build)[1:]) == 0
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a doubled or missing boundary warns
        exec(block("gp.BlockedOrder(block_docs=4096"), namespace)
        dataset = gp.make_dataset(namespace["config"], process_index=0, process_count=1)
    corpus = gp.open_corpus("corpus/web")
    assert corpus.eos_id is not None and namespace["config"].boundary_id is None
    assert gp.corpus.read_manifest("corpus/web")["shuffle_seed"] == 0
    with iter(dataset) as batches:
        assert next(batches)["inputs"].shape == (1024, 2048)


def test_the_notebooks_run_headless_as_the_readme_says():
    # Before: only `jupyter lab ...`, which needs a browser.
    (line,) = [line for line in block("jupyter lab", "bash").splitlines() if "headless" in line]
    command = shlex.split(line.split("&&")[1].split("#")[0])
    assert command[:3] == ["python", "-m", "pytest"]
    collected = subprocess.run(
        [sys.executable, *command[1:], "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert collected.returncode == 0, collected.stdout + collected.stderr
    notebooks = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert len(notebooks) == 5 and all(f"notebooks/{n}" in collected.stdout for n in notebooks)
