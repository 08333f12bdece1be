"""The contract between an online-adapting schedule and the training loop.

Two schedules learn from rewards the training loop reports, with exponential weights and
uniform exploration (EXP3 where every arm is observed every round):
:class:`~grainpack.curriculum.bandit.LengthBandit` decides keep rates per length bucket for
each *epoch* of a source, :class:`~grainpack.curriculum.mixture.MixtureBandit` decides the
mixture weights of the sources for each *stage* of ``stage_steps`` global steps. Rewards of
round ``k`` (an epoch, a stage) decide round ``k + delay`` (``delay >= 1``, default 2), and
rounds ``< delay`` use the defaults. Decided rounds are kept and never change, so what the
pipeline computes for round ``k`` is a pure function of (seed, rewards of rounds
``<= k - delay``), whenever it computes it (plans are cached and computed ahead); if it
reaches a round that is not decided yet, it raises ``UndecidedEpochError`` instead of
guessing. With either schedule the pipeline plans one step per Grain element, so no batch
is planned before the updates it depends on.

Contract for the training loop:

* report the same rewards at the same step on every process. Compute them from globally
  reduced metrics, and decide when to report from global information: the epochs in the
  global batch (``provenance=True``), or the step (a stage ends after step
  ``(k + 1) * stage_steps - 1``);
* report round ``k`` before the pipeline needs round ``k + delay``. With ``delay=2`` a
  length bandit reports epoch ``e`` when rows of ``e + 1`` first appear, and a mixture
  bandit has a whole stage of slack (batches read ahead by ``prefetch_to_device`` or a
  thread are planned early: keep the read-ahead below ``(delay - 1) * stage_steps`` steps);
* Grain workers hold a pickled copy of the schedule taken when the iterator opened. After
  ``update``, call ``iterator.close()``: the next batch restarts the workers with the new
  state at the same step. In-process iteration (``worker_count=0``) sees updates at once;
* save ``state_dict()`` with the checkpoint (``ocp.args.JsonSave``). On restore, load it
  *before* the data iterator, because ``set_state`` recomputes the last batch to verify it.

Feeding a :class:`~grainpack.curriculum.mixture.MixtureBandit` from a JAX training step on
several hosts: with ``provenance=True`` every row carries its ``source``. Let the jitted step
return per-row losses (an array sharded like the batch), gather them and the sources on
every process, and reduce them in numpy in a fixed order, so every process computes the
same bits::

    from jax.experimental import multihost_utils

    params, row_loss = train_step(params, gp.make_global_batch(batch, mesh))
    losses = np.asarray(multihost_utils.process_allgather(row_loss, tiled=True), np.float64)
    sources = np.asarray(multihost_utils.process_allgather(source, tiled=True))
    sums += np.bincount(sources, weights=losses, minlength=n)
    counts += np.bincount(sources, minlength=n)
    if (step + 1) % bandit.stage_steps == 0:   # the stage is over
        bandit.update(bandit.stage_of(step), sums / counts)   # NaN: a source without rows
        sums[:] = counts[:] = 0

(``source`` is ``gp.make_global_batch({"source": batch["source"]}, mesh)["source"]``.) A
scalar reduced inside the jitted step (``jax.ops.segment_sum`` over the global batch, a
replicated result) works as well where the all-reduce gives every process the same value;
gathering and reducing on the host makes that hold by construction. ``tests/mixing_train.py``
is a complete example on two processes.
"""

from __future__ import annotations

__all__ = ["UndecidedEpochError"]


class UndecidedEpochError(RuntimeError):
    """The pipeline needs decisions (keep rates, weights) of an epoch or stage that the
    online schedule has not decided yet: report its rewards first."""
