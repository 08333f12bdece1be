"""Test helper for multi-process JAX workers: keep gloo's CPU collectives on loopback."""

from __future__ import annotations

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
