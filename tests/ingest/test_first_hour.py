"""Builds that say what they do: quiet Ctrl-C while workers start, line numbers in text
errors, the parts a resumed build reuses or discards (issue 38)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def test_ctrl_c_while_the_workers_start_prints_no_worker_traceback(tmp_path):
    # Before: 1 try in 5 printed a KeyboardInterrupt traceback of each spawned worker
    # (interrupted in its start-up, before it ignores SIGINT) above the "interrupted" line.
    text = "".join(f'{{"text": "document {i}"}}\n' for i in range(400))
    (tmp_path / "a.jsonl").write_text(text)
    argv = ["build", str(tmp_path / "a.jsonl"), "--tokenizer", "bytes", "--workers", "2"]
    argv += ["--part-bytes", "1000", "-o", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, str(HERE / "ctrl_c_build.py"), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,  # the script's Ctrl-C reaches its own process group only
    )
    assert (tmp_path / "out.ctrl-c").exists()  # a worker did send it
    assert done.returncode == 130, done.stderr
    assert done.stderr.startswith("\ngrainpack build: interrupted"), done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr
