"""The code of the README and the documentation site runs as written (each block found by
what it contains, on whichever page holds it), and the training loop is
examples/train_loop.py."""

from __future__ import annotations

import json
import re
import shutil
import tempfile

from doc_pages import README, ROOT, block, blocks, pages

import grainpack as gp


def test_usage_and_curriculum_snippets_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    namespace: dict = {}
    exec(block("gp.write_corpus"), namespace)
    assert namespace["batch"]["inputs"].shape == (256, 2048)
    assert list(tmp_path.iterdir()) != [] and not (tmp_path / "corpus").exists()
    assert namespace["state"]["step"] == 1
    exec(block("gp.curriculum.LengthBuckets"), namespace)  # the curriculum block, usage corpus
    gp = namespace["gp"]
    batch = next(iter(gp.make_dataset(namespace["config"], process_index=0, process_count=1)))
    assert batch["inputs"].shape == (256, 2048)


def test_readme_uses_no_name_that_moved_out_of_the_front_door():
    # Executed blocks would fail on the DeprecationWarning (pyproject's filterwarnings); this
    # covers the prose and the blocks that are not executed, on every page.
    moved = "|".join(sorted(gp._MOVED))
    old = {
        f"{page.relative_to(ROOT)}: {name}"
        for page in pages()
        for name in re.findall(rf"\b(?:gp|grainpack)\.(?:{moved})\b(?!/)", page.read_text())
    }
    assert sorted(old) == [], f"moved (see grainpack._MOVED for their homes): {sorted(old)}"


def test_readme_training_loop_is_the_tested_example():
    example = (ROOT / "examples" / "train_loop.py").read_text()
    assert f"```python\n{example}```" in README.read_text()
    # a page that shows it (Checkpointing) shows it whole
    first = example.splitlines()[0]
    shown = [code for _, code in blocks() if code.startswith(first)]
    assert shown and all(code == example for code in shown)


def test_text_to_training_runs(tmp_path, monkeypatch, tokenizer_files):
    """The section's build command, then its training loop with a stand-in train step."""
    import shlex

    from grainpack.cli.main import main
    from grainpack.demo import documents

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    lines = "".join(json.dumps({"text": text}) + "\n" for text in documents("en"))
    (tmp_path / "data" / "docs.jsonl").write_text(lines)
    shutil.copy(tokenizer_files["huggingface"], tmp_path / "tokenizer.json")
    build = [
        line for line in block('pip install -e ".[text]"', "bash").splitlines() if "build" in line
    ]
    assert main(shlex.split(build[0])[1:]) == 0
    steps = []
    namespace = {"num_steps": 2, "params": 0, "train_step": lambda p, b: steps.append(b) or (p, 0)}
    exec(block("for step in range(num_steps)"), namespace)
    assert [b["inputs"].shape for b in steps] == [(256, 2048)] * 2
    assert gp.open_corpus("corpus/en").tokenizer["file"] == "tokenizer.json"


def test_schedule_and_online_mixing_snippets_run(tmp_path, monkeypatch):
    import jax
    import numpy as np

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    namespace: dict = {}
    exec(block("gp.write_corpus"), namespace)  # the usage corpus: root/en, root/fr
    exec(block("gp.Stage(40_000"), namespace)
    config = namespace["config"]
    assert config.probabilities_at(50_000) == (0.25, 0.75)
    exec(block("gp.curriculum.MixtureBandit("), namespace)
    bandit, config = namespace["bandit"], namespace["config"]
    batch = next(iter(gp.make_dataset(config, process_index=0, process_count=1)))
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    namespace.update(
        batch={k: batch[k] for k in ("inputs", "targets", "loss_mask", "source")},
        mesh=mesh,
        params=None,
        train_step=lambda params, b: (params, b["inputs"].mean(axis=1)),  # a stand-in loss
        sums=np.zeros(2),
        counts=np.zeros(2),
        step=bandit.stage_steps - 1,  # the last step of stage 0
        np=np,
    )
    exec(block("multihost_utils.process_allgather"), namespace)
    assert bandit.updates == 1 and namespace["counts"].tolist() == [0.0, 0.0]


def test_object_storage_snippet_builds_its_config():
    # Opening the corpus needs a bucket (tests/remote runs one on loopback); the config
    # the page shows is built and checked here, without a request.
    namespace = {"gp": gp}
    exec(block('"s3://my-bucket/corpora/web"'), namespace)
    assert namespace["config"].sources == {"web": "s3://my-bucket/corpora/web"}
