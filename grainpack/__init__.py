"""grainpack: deterministic, resumable, packed and mixed LM batches from memmapped shards.

::

    corpus dirs ──open_corpus──▶ TokenShardSource (Grain RandomAccessDataSource)
    slot s ──mix──▶ (source j, occurrence o) ──epochs──▶ (epoch e, row r) ──plan──▶ spans
    spans ──read──▶ {inputs, targets, segment_ids, positions, loss_mask}
    slot s ──shard──▶ process s % P;  Grain element = plan of many steps;  state = step

Every batch is a pure function of (config, global step): the iterator state is the step,
restores are exact and elastic, and the batches do not depend on process or worker counts.
"""

from grainpack.accounting import (
    MixtureMonitor,
    MixtureWarning,
    RepeatCapExceeded,
    SourceAccount,
    mixture_accounting,
    window_shares,
)
from grainpack.bandit import LengthBandit, UndecidedEpochError
from grainpack.batches import PipelineBatches
from grainpack.checkpoint import CheckpointRestore, CheckpointSave
from grainpack.config import PipelineConfig
from grainpack.convert import convert_corpus, convert_jsonl, convert_npy
from grainpack.corpus import open_corpus, read_manifest
from grainpack.curriculum import (
    BucketReport,
    Chain,
    LengthBuckets,
    LinearRamp,
    PerSource,
    RateSchedule,
    Selector,
)
from grainpack.mixing import (
    SlotMixer,
    choose_source,
    choose_sources,
    content_probabilities,
    token_premiums,
)
from grainpack.order import (
    SequenceSelector,
    global_document_order,
    shard_documents_for_rank,
    splitmix64,
    splitmix64_array,
    window_permutation,
)
from grainpack.packing import PackedCorpus, pack_documents
from grainpack.pipeline import (
    PipelineDataset,
    PipelineIterator,
    StepSampler,
    make_data_loader,
    make_dataset,
    make_eval_dataset,
)
from grainpack.sharding import make_global_batch, slot_order
from grainpack.source import (
    CorpusError,
    CorpusExistsError,
    CorpusNotFoundError,
    TokenShardSource,
)
from grainpack.streaming import StreamingCorpus
from grainpack.verify import VerifyReport, describe_corpus, verify_corpus
from grainpack.windows import MixedStream, PackedStream
from grainpack.writer import CorpusWriter, write_corpus

__version__ = "0.1.0"

__all__ = [
    "BucketReport",
    "Chain",
    "CheckpointRestore",
    "CheckpointSave",
    "CorpusError",
    "CorpusExistsError",
    "CorpusNotFoundError",
    "CorpusWriter",
    "LengthBandit",
    "LengthBuckets",
    "LinearRamp",
    "MixedStream",
    "MixtureMonitor",
    "MixtureWarning",
    "PackedCorpus",
    "PackedStream",
    "PerSource",
    "PipelineBatches",
    "PipelineConfig",
    "PipelineDataset",
    "PipelineIterator",
    "RateSchedule",
    "RepeatCapExceeded",
    "Selector",
    "SequenceSelector",
    "SlotMixer",
    "SourceAccount",
    "StepSampler",
    "StreamingCorpus",
    "TokenShardSource",
    "UndecidedEpochError",
    "VerifyReport",
    "choose_source",
    "choose_sources",
    "content_probabilities",
    "convert_corpus",
    "convert_jsonl",
    "convert_npy",
    "describe_corpus",
    "global_document_order",
    "make_data_loader",
    "make_dataset",
    "make_eval_dataset",
    "make_global_batch",
    "mixture_accounting",
    "open_corpus",
    "pack_documents",
    "read_manifest",
    "shard_documents_for_rank",
    "slot_order",
    "splitmix64",
    "splitmix64_array",
    "token_premiums",
    "verify_corpus",
    "window_permutation",
    "window_shares",
    "write_corpus",
]
