"""The README's code runs as written, and its training loop is examples/train_loop.py."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_usage_and_curriculum_snippets_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    namespace: dict = {}
    exec(python_blocks()[0], namespace)
    assert namespace["batch"]["inputs"].shape == (256, 2048)
    assert list(tmp_path.iterdir()) != [] and not (tmp_path / "corpus").exists()
    assert namespace["state"]["step"] == 1
    exec(python_blocks()[1], namespace)  # the curriculum block, on the usage block's corpus
    gp = namespace["gp"]
    batch = next(iter(gp.make_dataset(namespace["config"], process_index=0, process_count=1)))
    assert batch["inputs"].shape == (256, 2048)


def test_readme_training_loop_is_the_tested_example():
    example = (ROOT / "examples" / "train_loop.py").read_text()
    assert f"```python\n{example}```" in README
