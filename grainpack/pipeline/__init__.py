"""The Grain pipeline: config, the data source of batches, gathering tokens, expansion,
Grain elements, the dataset and its iterator state, mixture accounting.

Only ``grainpack.pipeline.dataset`` and ``grainpack.pipeline.elements`` import Grain.

Exported: ``PipelineConfig``, ``make_dataset`` (-> a Grain dataset whose iterator is a
``PipelineIterator``; its state is the step), ``make_eval_dataset``, ``make_data_loader``
(the same batches through ``grain.DataLoader``), ``ConfigMismatchError`` (a restore
into another pipeline), ``ProcessesDisagreeError`` (the processes of a job built different
pipelines, or one refused a restore) and ``describe_step`` (what a step holds: ``grainpack
show-step``).
The accounting is exported by :mod:`grainpack.mixing`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grainpack.lazy import exports

# name -> its module, loaded on first use (tests/test_layers.py checks the imports below).
_EXPORTS = {
    "ConfigMismatchError": "grainpack.pipeline.dataset",
    "PipelineConfig": "grainpack.pipeline.config",
    "PipelineIterator": "grainpack.pipeline.dataset",
    "ProcessesDisagreeError": "grainpack.pipeline.agreement",
    "describe_step": "grainpack.pipeline.show",
    "make_data_loader": "grainpack.pipeline.dataset",
    "make_dataset": "grainpack.pipeline.dataset",
    "make_eval_dataset": "grainpack.pipeline.dataset",
}

if TYPE_CHECKING:
    from grainpack.pipeline.agreement import ProcessesDisagreeError as ProcessesDisagreeError
    from grainpack.pipeline.config import PipelineConfig as PipelineConfig
    from grainpack.pipeline.dataset import ConfigMismatchError as ConfigMismatchError
    from grainpack.pipeline.dataset import PipelineIterator as PipelineIterator
    from grainpack.pipeline.dataset import make_data_loader as make_data_loader
    from grainpack.pipeline.dataset import make_dataset as make_dataset
    from grainpack.pipeline.dataset import make_eval_dataset as make_eval_dataset
    from grainpack.pipeline.show import describe_step as describe_step

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = exports(__name__, _EXPORTS)
