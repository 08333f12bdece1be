"""Test helper for multi-process JAX workers: launch them, keep gloo's CPU collectives on
loopback."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time
from typing import Any


def use_loopback_collectives() -> None:
    """Makes gloo (CPU collectives) listen on 127.0.0.1 instead of this host's name.

    jax 0.10 builds gloo with ``hostname=None`` (the machine's hostname, which may resolve to
    a LAN address); this registers the same CPU client factory with ``hostname="127.0.0.1"``
    so the whole run stays on loopback. Private jax API: skipped when it is not there.
    """
    try:
        from jax._src import distributed, xla_bridge
        from jax._src.lib import _jax

        def cpu_client() -> Any:
            collectives = _jax.make_gloo_tcp_collectives(
                distributed_client=distributed.global_state.client, hostname="127.0.0.1"
            )
            return xla_bridge.make_cpu_client(collectives=collectives)

        xla_bridge.register_backend_factory("cpu", cpu_client, priority=0, fail_quietly=False)
    except (ImportError, AttributeError, TypeError):
        pass


def initialize(port: int, num_processes: int, process_id: int) -> None:
    """``jax.distributed.initialize`` on 127.0.0.1, collectives on loopback too."""
    import jax

    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=60,
    )
    use_loopback_collectives()


def launch(
    worker: pathlib.Path, num_processes: int, args: list[str], logs: pathlib.Path, *, timeout: float
) -> None:
    """Runs ``worker`` as ``num_processes`` JAX processes on a free loopback port (each gets
    ``--process-id``, ``--num-processes`` and ``--port``); kills them all when one fails or
    after ``timeout`` seconds, and fails the test with the tail of every process's log."""
    import portpicker
    import pytest

    port = portpicker.pick_unused_port()
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
    }
    logs.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    try:
        for i in range(num_processes):
            with open(logs / f"process_{i}.log", "w") as log:
                cmd = [sys.executable, str(worker), *args, "--process-id", str(i)]
                cmd += ["--num-processes", str(num_processes), "--port", str(port)]
                procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    codes = [p.returncode for p in procs]
    if codes != [0] * num_processes:
        tails = "\n".join(
            f"--- process {i} (exit {code}) ---\n" + (logs / f"process_{i}.log").read_text()[-3000:]
            for i, code in enumerate(codes)
        )
        pytest.fail(f"launch of {num_processes} processes failed: {codes}\n{tails}")
