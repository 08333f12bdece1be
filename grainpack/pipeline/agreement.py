"""Processes of a multi-process JAX job agree, or all of them stop.

Every process publishes a small value (its pipeline's fingerprint and description, or
whether its restore succeeded) in the key-value store of ``jax.distributed`` and reads
every other process's, with a timeout: a disagreement raises on every process, naming the
process and what differs, and a process that never arrives is an error after
``AGREEMENT_TIMEOUT_S`` instead of a hang. Callers exchange only when the process layout
is JAX's (``jax.process_count() > 1``, not given explicitly).
"""

from __future__ import annotations

import collections
import json
from typing import Any

import jax
import numpy as np

AGREEMENT_TIMEOUT_S = 300  # a process that does not arrive by then: an error, not a hang

# Exchanges made per topic by this process; every process makes them in the same order, so
# the n-th exchange of a topic has the same keys on all of them.
_EXCHANGES: collections.Counter[str] = collections.Counter()


class ProcessesDisagreeError(ValueError):
    """The processes of a JAX job built different pipelines, or one of them refused a
    restore (then every process refuses it)."""


def _client() -> Any:
    """The ``jax.distributed`` client (private JAX API), or None."""
    try:
        from jax._src import distributed
    except ImportError:  # pragma: no cover - another JAX layout
        return None
    return getattr(distributed.global_state, "client", None)


def exchange(topic: str, value: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Every process's ``value`` (JSON), by process index; ``None`` without the key-value
    store of ``jax.distributed`` (then nothing is compared). A collective: every process of
    the job calls it, in the same order for a ``topic``.

    Raises:
      ProcessesDisagreeError: a process did not publish within ``AGREEMENT_TIMEOUT_S``.
    """
    client = _client()
    if client is None:
        return None
    me, count = jax.process_index(), jax.process_count()
    n = _EXCHANGES[topic]
    _EXCHANGES[topic] += 1
    prefix = f"grainpack/{topic}/{n}"
    client.key_value_set(f"{prefix}/{me}", json.dumps(value, sort_keys=True))
    values = []
    for q in range(count):
        try:
            text = client.blocking_key_value_get(f"{prefix}/{q}", AGREEMENT_TIMEOUT_S * 1000)
        except Exception as err:  # jax raises its own runtime error type on a timeout
            raise ProcessesDisagreeError(
                f"process {q} of {count} did not reach {topic!r} (exchange {n}) within "
                f"{AGREEMENT_TIMEOUT_S} s ({type(err).__name__}: {str(err)[:200]}); every "
                "process must build the same pipelines and restore the same checkpoints in "
                "the same order: it may have failed or be stuck before it"
            ) from None
        values.append(json.loads(text))
    return values


def gather_fingerprints(fingerprint: int) -> list[int]:
    """Every process's 63-bit ``fingerprint`` by ``process_allgather`` (no key-value store:
    the fallback of :func:`exchange`, which cannot say what differs)."""
    from jax.experimental import multihost_utils

    local = np.frombuffer(int(fingerprint).to_bytes(8, "little"), dtype=np.uint8)
    gathered = np.asarray(multihost_utils.process_allgather(local))
    return [int.from_bytes(bytes(row.astype(np.uint8)), "little") for row in gathered]


def agree_on_outcome(topic: str, error: BaseException | None) -> None:
    """Tells every process whether this one's ``topic`` (a restore) failed, and raises
    :class:`ProcessesDisagreeError` here if another one's did, naming it and its error. A
    process whose own ``topic`` failed re-raises its own error after this returns."""
    said = None if error is None else f"{type(error).__name__}: {error}"
    values = exchange(topic, {"error": said})
    if values is None:
        return
    failed = [(q, v["error"]) for q, v in enumerate(values) if v["error"] is not None]
    others = [(q, e) for q, e in failed if q != jax.process_index()]
    if error is None and others:
        first, words = others[0]
        more = f" (and on processes {[q for q, _ in others[1:]]})" if others[1:] else ""
        raise ProcessesDisagreeError(
            f"{topic} was refused on process {first} of {len(values)}{more}, so it is refused "
            f"on this process ({jax.process_index()}) too, rather than waiting for it: "
            f"process {first} said: {words}"
        )
