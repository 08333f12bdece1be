"""The Grain pipeline: config, the data source of batches, gathering tokens, expansion,
Grain elements, the dataset and its iterator state, mixture accounting.

Only ``grainpack.pipeline.dataset`` and ``grainpack.pipeline.elements`` import Grain."""
