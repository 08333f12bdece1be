"""What selectors can do, as runtime-checkable protocols, and one way to describe them.

The pipeline needs only ``__call__(order, seed, epoch) -> order``
(:class:`~grainpack.index.orders.SequenceSelector`). Two capabilities change how it runs:

* :class:`BindsToSource`: ``bind(name, corpus)`` gives the selector to use for one source
  (lengths from that source; :class:`~grainpack.curriculum.selectors.PerSource` picks one by
  name). The pipeline binds every source's selector before use.
* :class:`AdaptsOnline`: decisions depend on rewards the training loop reports
  (:mod:`grainpack.curriculum.online`). Only then (a selector, or mixture weights such as
  :class:`~grainpack.curriculum.mixture.MixtureBandit`) does the pipeline plan one step per
  Grain element, so no batch is planned before the updates it depends on.

Composite selectors expose their parts (:class:`HasComponents`), so a capability anywhere
inside is found by :func:`adapts_online`.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from grainpack.index.blocked import BlockSelector
from grainpack.index.orders import SequenceSelector

__all__ = [
    "AdaptsOnline",
    "BindsToSource",
    "HasComponents",
    "HasLengths",
    "RateSchedule",
    "Reports",
    "Selector",
    "SelectsBlocks",
    "adapts_online",
    "bind_selector",
    "describe_selector",
]


class HasLengths(Protocol):
    """A corpus exposing per-document token counts (``TokenShardSource`` does)."""

    @property
    def lengths(self) -> np.ndarray: ...


@runtime_checkable
class RateSchedule(Protocol):
    """Keep rate per length bucket for each epoch; each rate is in ``[0, 1]``."""

    @property
    def num_buckets(self) -> int: ...

    def rates(self, epoch: int) -> tuple[float, ...]: ...


@runtime_checkable
class BindsToSource(Protocol):
    """``bind(name, corpus)``: the selector for pipeline source ``name`` (or ``None``: no
    selection for that source)."""

    def bind(self, name: str, corpus: HasLengths) -> SequenceSelector | None: ...


@runtime_checkable
class AdaptsOnline(Protocol):
    """Decisions learned from rewards the training loop reports, with state to checkpoint
    (the contract is in :mod:`grainpack.curriculum.online`)."""

    def update(self, epoch: int, rewards: Sequence[float]) -> Any: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


@runtime_checkable
class Reports(Protocol):
    """``report(order, seed, epoch)``: what a selector kept, for logging."""

    def report(self, order: np.ndarray, seed: int, epoch: int) -> Any: ...


@runtime_checkable
class SelectsBlocks(Protocol):
    """``for_blocks(block_docs)``: the selector as ``order=BlockedOrder(...)`` applies it,
    decisions per block, so kept tokens per block are known without reading documents."""

    def for_blocks(self, block_docs: int) -> BlockSelector: ...


@runtime_checkable
class HasComponents(Protocol):
    """A composite (a chain, per-source selectors, buckets driven by a schedule)."""

    @property
    def components(self) -> tuple[object, ...]: ...


class Selector(SequenceSelector, BindsToSource, Reports, Protocol):
    """The ready-made selectors' contract.

    ``__call__(order, seed, epoch)`` returns a subset of ``order``, each id at most once. It
    must be a pure function of its arguments and the selector's state, pickle small, and have
    a stable, content-derived ``repr`` (the repr goes into the pipeline fingerprint).
    ``report(order, seed, epoch)`` returns what was kept, for logging. ``bind(name, corpus)``
    returns the selector to use for source ``name``, or ``None`` for no selection.
    """


def online_components(obj: object) -> list[AdaptsOnline]:
    """``obj`` and its components (recursively) that learn online (:class:`AdaptsOnline`).

    Example:
      >>> import grainpack as gp
      >>> static = gp.curriculum.LengthBuckets(edges=(512,), rates=(1.0, 0.5))
      >>> online = gp.curriculum.LengthBuckets(edges=(512,), rates=gp.curriculum.LengthBandit(2))
      >>> online_components(static), online_components(gp.curriculum.Chain(static, online))
      ([], [LengthBandit(num_buckets=2, learning_rate=1.0, exploration=0.1, delay=2, decay=0.0)])
    """
    if isinstance(obj, AdaptsOnline):
        return [obj]
    if isinstance(obj, HasComponents):
        return [x for c in obj.components for x in online_components(c)]
    return []


def adapts_online(obj: object) -> bool:
    """Whether ``obj`` or any of its components learns online (:class:`AdaptsOnline`)."""
    return bool(online_components(obj))


def online_revision(*objs: object) -> tuple[int, ...]:
    """The ``revision`` of every online component of ``objs`` (0 where it has none): an
    online schedule bumps it when ``load_state_dict`` replaces rounds it had decided, so
    that plans cached from the old decisions are dropped."""
    return tuple(getattr(c, "revision", 0) for obj in objs for c in online_components(obj))


def bind_selector(
    selector: SequenceSelector | BindsToSource | None, name: str, corpus: HasLengths
) -> SequenceSelector | None:
    """The selector to apply to pipeline source ``name``: ``selector.bind(name, corpus)``
    for a :class:`BindsToSource`, else ``selector`` itself."""
    if isinstance(selector, BindsToSource):
        selector = selector.bind(name, corpus)
    if selector is not None and not callable(selector):
        raise TypeError(
            f"the selector for source {name!r} is not callable (order, seed, epoch) -> order: "
            f"{selector!r}"
        )
    return selector


def describe_selector(selector: object) -> str:
    """Stable text for a selector: ``module.name`` for functions (``<lambda>`` and
    ``<locals>`` in the name of a lambda or a local function), then what else decides what
    they return: a lambda's code (a digest: lambdas have no name of their own), the values
    of a closure, of default arguments and of a bound method's object; else its ``repr``.

    Example:
      >>> def keep_first(n):
      ...     return lambda order, seed, epoch: order[:n]
      >>> describe_selector(describe_selector)
      'grainpack.curriculum.protocols.describe_selector'
      >>> describe_selector(keep_first(8))  # doctest: +ELLIPSIS
      '....keep_first.<locals>.<lambda>[code ...](closure=(8,))'
    """
    name = getattr(selector, "__qualname__", None)
    if name is None:
        return repr(selector)
    text = f"{selector.__module__}.{name}"
    code = getattr(selector, "__code__", None)
    if code is not None and "<lambda>" in name:
        text += f"[code {_code_digest(code)}]"
    closure = tuple(_cell(c) for c in getattr(selector, "__closure__", None) or ())
    values = {
        "closure": closure,
        "defaults": getattr(selector, "__defaults__", None),
        "kwdefaults": getattr(selector, "__kwdefaults__", None),
        "self": getattr(selector, "__self__", None) if inspect.ismethod(selector) else None,
    }
    shown = [f"{key}={value!r}" for key, value in values.items() if value]
    return text + (f"({', '.join(shown)})" if shown else "")


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a cell not yet filled
        return None


def _code_digest(code: Any) -> str:
    """A digest of what a code object computes (not where it stands in its file)."""
    consts = [_code_digest(c) if inspect.iscode(c) else repr(c) for c in code.co_consts]
    text = repr((code.co_code, consts, code.co_names, code.co_varnames))
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()
