"""Shared test setup.

Grain 0.2.18 reads absl flags inside its worker processes; with jax importable and the flags
unparsed, ``mp_prefetch``/``worker_count>0`` crash (google/grain#1355). Marking them parsed
here is what a training script does with ``absl.app.run``.
"""

from absl import flags

flags.FLAGS.mark_as_parsed()
