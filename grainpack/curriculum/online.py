"""The contract between an online-adapting schedule and the training loop.

:class:`~grainpack.curriculum.bandit.LengthBandit` adapts the rates from rewards the training loop
reports per bucket (exponential weights with uniform exploration, i.e. EXP3 where every
bucket is observed every epoch). Rewards of epoch ``e`` decide the rates of epoch
``e + delay`` (``delay >= 1``, default 2), and epochs ``< delay`` keep everything. Decided
rates are kept per epoch and never change, so the order of epoch ``e`` is a pure function of
(seed, epoch, rewards of epochs ``<= e - delay``). It does not depend on when the pipeline
computes the epoch (plans are cached and computed ahead). If the pipeline reaches an epoch
that is not decided yet, it raises ``UndecidedEpochError`` instead of guessing.
Contract for the training loop:

* report the same rewards at the same step on every process. Compute them from globally
  reduced metrics, and decide when to report from global information, such as the epochs
  in the global batch (``provenance=True``) or a function of the step;
* report epoch ``e`` before the pipeline needs epoch ``e + delay``. With ``delay=2``,
  report ``e`` when rows of ``e + 1`` first appear;
* Grain workers hold a pickled copy of the bandit taken when the iterator opened. After
  ``update``, call ``iterator.close()``: the next batch restarts the workers with the new
  state at the same step. In-process iteration (``worker_count=0``) sees updates at once;
* save :meth:`LengthBandit.state_dict` with the checkpoint (``ocp.args.JsonSave``). On
  restore, load it *before* the data iterator, because ``set_state`` recomputes the last
  batch to verify it.
"""

from __future__ import annotations

__all__ = ["UndecidedEpochError"]


class UndecidedEpochError(RuntimeError):
    """The pipeline needs decisions (keep rates, weights) of an epoch or stage that the
    online schedule has not decided yet: report its rewards first."""
