"""Curriculum: ready-made sequence selectors, the length bandit, the mixture bandit over
sources and the contract of online schedules with the training loop.

Exported: selectors (``LengthBuckets`` with ``LinearRamp`` rates, ``Chain``,
``PerSource``; ``BucketReport`` is what ``LengthBuckets`` reports), bandits
(``LengthBandit`` over length buckets, ``MixtureBandit`` over sources: pass it as
``PipelineConfig(weights=...)``), the protocols (``SequenceSelector``, the hook the pipeline
calls; ``Selector``, one that binds to a source and reports; ``RateSchedule``) and
``UndecidedEpochError``, raised when the pipeline reaches an epoch or stage an online
schedule has not decided yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grainpack.lazy import exports

# name -> its module, loaded on first use (tests/test_layers.py checks the imports below).
_EXPORTS = {
    "BucketReport": "grainpack.curriculum.selectors",
    "Chain": "grainpack.curriculum.selectors",
    "LengthBandit": "grainpack.curriculum.bandit",
    "LengthBuckets": "grainpack.curriculum.selectors",
    "LinearRamp": "grainpack.curriculum.selectors",
    "MixtureBandit": "grainpack.curriculum.mixture",
    "PerSource": "grainpack.curriculum.selectors",
    "RateSchedule": "grainpack.curriculum.protocols",
    "Selector": "grainpack.curriculum.protocols",
    "SequenceSelector": "grainpack.index.orders",
    "UndecidedEpochError": "grainpack.curriculum.online",
}

if TYPE_CHECKING:
    from grainpack.curriculum.bandit import LengthBandit as LengthBandit
    from grainpack.curriculum.mixture import MixtureBandit as MixtureBandit
    from grainpack.curriculum.online import UndecidedEpochError as UndecidedEpochError
    from grainpack.curriculum.protocols import RateSchedule as RateSchedule
    from grainpack.curriculum.protocols import Selector as Selector
    from grainpack.curriculum.selectors import BucketReport as BucketReport
    from grainpack.curriculum.selectors import Chain as Chain
    from grainpack.curriculum.selectors import LengthBuckets as LengthBuckets
    from grainpack.curriculum.selectors import LinearRamp as LinearRamp
    from grainpack.curriculum.selectors import PerSource as PerSource
    from grainpack.index.orders import SequenceSelector as SequenceSelector

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = exports(__name__, _EXPORTS)
