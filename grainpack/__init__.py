"""grainpack: deterministic, resumable, packed and mixed LM batches from memmapped shards.

::

    corpus dirs ──open_corpus──▶ TokenShardSource (Grain RandomAccessDataSource)
    slot s ──mix──▶ (source j, occurrence o) ──epochs──▶ (epoch e, row r) ──plan──▶ spans
    spans ──read──▶ {inputs, targets, segment_ids, positions, loss_mask}
    slot s ──shard──▶ process s % P;  Grain element = plan of many steps;  state = step

Every batch is a pure function of (config, global step): the iterator state is the step,
restores are exact and elastic, and the batches do not depend on process or worker counts.

This front door holds what a training loop needs and the reference APIs of the two
specifications grainpack was built from. Every name is loaded on first use, so
``import grainpack`` (the ``grainpack`` command, a Grain worker unpickling a grainpack
element) imports neither Grain, JAX nor Orbax until ``make_dataset``, ``make_global_batch``
or a checkpoint argument is used. The layers live in subpackages: ``grainpack.index``
(pure index math), ``grainpack.corpus`` (on-disk formats), ``grainpack.curriculum``,
``grainpack.reference``, ``grainpack.pipeline`` (the Grain pipeline), ``grainpack.jax`` and
``grainpack.orbax``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grainpack.corpus.errors import CorpusError, CorpusExistsError, CorpusNotFoundError
    from grainpack.corpus.formats import open_corpus
    from grainpack.corpus.native import read_manifest
    from grainpack.corpus.source import TokenShardSource
    from grainpack.corpus.verify import VerifyReport, describe_corpus, verify_corpus
    from grainpack.curriculum.bandit import LengthBandit
    from grainpack.curriculum.mixture import MixtureBandit
    from grainpack.curriculum.online import UndecidedEpochError
    from grainpack.curriculum.protocols import RateSchedule, Selector
    from grainpack.curriculum.selectors import (
        BucketReport,
        Chain,
        LengthBuckets,
        LinearRamp,
        PerSource,
    )
    from grainpack.index.blocked import BlockedOrder
    from grainpack.index.hashing import splitmix64
    from grainpack.index.orders import (
        SequenceSelector,
        global_document_order,
        shard_documents_for_rank,
        window_permutation,
    )
    from grainpack.index.schedule import Stage
    from grainpack.index.slots import slot_order
    from grainpack.index.weights import content_probabilities, token_premiums
    from grainpack.ingest.build import build_corpus
    from grainpack.ingest.convert import convert_corpus, convert_jsonl, convert_npy
    from grainpack.ingest.merge import merge_corpora
    from grainpack.ingest.writer import CorpusWriter, write_corpus
    from grainpack.jax import expand, make_global_batch, prefetch_to_device
    from grainpack.orbax import CheckpointRestore, CheckpointSave
    from grainpack.pipeline.accounting import (
        MixtureMonitor,
        MixtureWarning,
        RepeatCapExceeded,
        SourceAccount,
        mixture_accounting,
        selector_report,
        target_shares,
        window_shares,
    )
    from grainpack.pipeline.config import PipelineConfig
    from grainpack.pipeline.dataset import (
        ConfigMismatchError,
        PipelineIterator,
        make_data_loader,
        make_dataset,
        make_eval_dataset,
    )
    from grainpack.reference.packing import PackedCorpus, pack_documents
    from grainpack.reference.streaming import StreamingCorpus
    from grainpack.reference.windows import (
        MixedStream,
        PackedStream,
        StreamArgumentError,
        StreamTooSmall,
    )

__version__ = "0.1.0"

# Every public name, loaded on first use: `import grainpack` costs (almost) nothing, and
# nothing imports Grain, JAX or Orbax until a name that needs them is used.
_PUBLIC = {
    "BlockedOrder": "grainpack.index.blocked",
    "build_corpus": "grainpack.ingest.build",
    "merge_corpora": "grainpack.ingest.merge",
    "convert_corpus": "grainpack.ingest.convert",
    "convert_jsonl": "grainpack.ingest.convert",
    "convert_npy": "grainpack.ingest.convert",
    "CorpusError": "grainpack.corpus.errors",
    "CorpusExistsError": "grainpack.corpus.errors",
    "CorpusNotFoundError": "grainpack.corpus.errors",
    "open_corpus": "grainpack.corpus.formats",
    "read_manifest": "grainpack.corpus.native",
    "TokenShardSource": "grainpack.corpus.source",
    "VerifyReport": "grainpack.corpus.verify",
    "describe_corpus": "grainpack.corpus.verify",
    "verify_corpus": "grainpack.corpus.verify",
    "CorpusWriter": "grainpack.ingest.writer",
    "write_corpus": "grainpack.ingest.writer",
    "LengthBandit": "grainpack.curriculum.bandit",
    "MixtureBandit": "grainpack.curriculum.mixture",
    "UndecidedEpochError": "grainpack.curriculum.online",
    "RateSchedule": "grainpack.curriculum.protocols",
    "Selector": "grainpack.curriculum.protocols",
    "BucketReport": "grainpack.curriculum.selectors",
    "Chain": "grainpack.curriculum.selectors",
    "LengthBuckets": "grainpack.curriculum.selectors",
    "LinearRamp": "grainpack.curriculum.selectors",
    "PerSource": "grainpack.curriculum.selectors",
    "splitmix64": "grainpack.index.hashing",
    "SequenceSelector": "grainpack.index.orders",
    "global_document_order": "grainpack.index.orders",
    "shard_documents_for_rank": "grainpack.index.orders",
    "window_permutation": "grainpack.index.orders",
    "Stage": "grainpack.index.schedule",
    "slot_order": "grainpack.index.slots",
    "content_probabilities": "grainpack.index.weights",
    "token_premiums": "grainpack.index.weights",
    "expand": "grainpack.jax",
    "make_global_batch": "grainpack.jax",
    "prefetch_to_device": "grainpack.jax",
    "CheckpointRestore": "grainpack.orbax",
    "CheckpointSave": "grainpack.orbax",
    "MixtureMonitor": "grainpack.pipeline.accounting",
    "MixtureWarning": "grainpack.pipeline.accounting",
    "RepeatCapExceeded": "grainpack.pipeline.accounting",
    "SourceAccount": "grainpack.pipeline.accounting",
    "mixture_accounting": "grainpack.pipeline.accounting",
    "selector_report": "grainpack.pipeline.accounting",
    "target_shares": "grainpack.pipeline.accounting",
    "window_shares": "grainpack.pipeline.accounting",
    "PipelineConfig": "grainpack.pipeline.config",
    "PipelineIterator": "grainpack.pipeline.dataset",
    "make_data_loader": "grainpack.pipeline.dataset",
    "make_dataset": "grainpack.pipeline.dataset",
    "make_eval_dataset": "grainpack.pipeline.dataset",
    "ConfigMismatchError": "grainpack.pipeline.dataset",
    "PackedCorpus": "grainpack.reference.packing",
    "pack_documents": "grainpack.reference.packing",
    "StreamingCorpus": "grainpack.reference.streaming",
    "MixedStream": "grainpack.reference.windows",
    "PackedStream": "grainpack.reference.windows",
    "StreamArgumentError": "grainpack.reference.windows",
    "StreamTooSmall": "grainpack.reference.windows",
}


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'grainpack' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


__all__ = [
    "BlockedOrder",
    "BucketReport",
    "Chain",
    "CheckpointRestore",
    "CheckpointSave",
    "ConfigMismatchError",
    "CorpusError",
    "CorpusExistsError",
    "CorpusNotFoundError",
    "CorpusWriter",
    "LengthBandit",
    "LengthBuckets",
    "LinearRamp",
    "MixedStream",
    "MixtureBandit",
    "MixtureMonitor",
    "MixtureWarning",
    "PackedCorpus",
    "PackedStream",
    "PerSource",
    "PipelineConfig",
    "PipelineIterator",
    "RateSchedule",
    "RepeatCapExceeded",
    "Selector",
    "SequenceSelector",
    "SourceAccount",
    "Stage",
    "StreamArgumentError",
    "StreamTooSmall",
    "StreamingCorpus",
    "TokenShardSource",
    "UndecidedEpochError",
    "VerifyReport",
    "build_corpus",
    "content_probabilities",
    "convert_corpus",
    "convert_jsonl",
    "convert_npy",
    "describe_corpus",
    "expand",
    "global_document_order",
    "make_data_loader",
    "make_dataset",
    "make_eval_dataset",
    "make_global_batch",
    "merge_corpora",
    "mixture_accounting",
    "open_corpus",
    "pack_documents",
    "prefetch_to_device",
    "read_manifest",
    "selector_report",
    "shard_documents_for_rank",
    "slot_order",
    "splitmix64",
    "target_shares",
    "token_premiums",
    "verify_corpus",
    "window_permutation",
    "window_shares",
    "write_corpus",
]
