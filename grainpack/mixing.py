"""Mixing: weights and their schedules, and what a run consumed of each source.

* Weights: ``Stage`` (a stage of a weight schedule, optionally ramped),
  ``token_premiums`` (bytes per content and bytes per token -> tokens per content) and
  ``content_probabilities`` (premiums -> the token shares that match content).
* Accounting, a pure function of (config, step): ``mixture_accounting`` (per source a
  ``SourceAccount``: rows, tokens, epochs, repeats, target and realized share),
  ``window_shares`` and ``target_shares`` over a window of steps, ``selector_report``
  (what a curriculum selector kept per bucket), and ``MixtureMonitor``, which warns
  (``MixtureWarning``) or raises (``RepeatCapExceeded``) during training.

The online weights (``MixtureBandit``) are in :mod:`grainpack.curriculum`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grainpack.lazy import exports

# name -> its module, loaded on first use (tests/test_layers.py checks the imports below).
_EXPORTS = {
    "MixtureMonitor": "grainpack.pipeline.accounting",
    "MixtureWarning": "grainpack.pipeline.accounting",
    "RepeatCapExceeded": "grainpack.pipeline.accounting",
    "SourceAccount": "grainpack.pipeline.accounting",
    "Stage": "grainpack.index.schedule",
    "content_probabilities": "grainpack.index.weights",
    "mixture_accounting": "grainpack.pipeline.accounting",
    "selector_report": "grainpack.pipeline.accounting",
    "target_shares": "grainpack.pipeline.accounting",
    "token_premiums": "grainpack.index.weights",
    "window_shares": "grainpack.pipeline.accounting",
}

if TYPE_CHECKING:
    from grainpack.index.schedule import Stage as Stage
    from grainpack.index.weights import content_probabilities as content_probabilities
    from grainpack.index.weights import token_premiums as token_premiums
    from grainpack.pipeline.accounting import MixtureMonitor as MixtureMonitor
    from grainpack.pipeline.accounting import MixtureWarning as MixtureWarning
    from grainpack.pipeline.accounting import RepeatCapExceeded as RepeatCapExceeded
    from grainpack.pipeline.accounting import SourceAccount as SourceAccount
    from grainpack.pipeline.accounting import mixture_accounting as mixture_accounting
    from grainpack.pipeline.accounting import selector_report as selector_report
    from grainpack.pipeline.accounting import target_shares as target_shares
    from grainpack.pipeline.accounting import window_shares as window_shares

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = exports(__name__, _EXPORTS)
