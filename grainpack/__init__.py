"""grainpack: deterministic, resumable, packed and mixed LM batches from memmapped shards.

::

    corpus dirs ──open_corpus──▶ TokenShardSource (Grain RandomAccessDataSource)
    slot s ──mix──▶ (source j, occurrence o) ──epochs──▶ (epoch e, row r) ──plan──▶ spans
    spans ──read──▶ {inputs, targets, segment_ids, positions, loss_mask}
    slot s ──shard──▶ process s % P;  Grain element = plan of many steps;  state = step

Every batch is a pure function of (config, global step): the iterator state is the step,
restores are exact and elastic, and the batches do not depend on process or worker counts.

This front door holds what a training loop needs (``__all__``). The rest lives in
namespaces, each loaded on first use:

* ``grainpack.corpus``: the read side (``TokenShardSource``, ``describe_corpus``,
  ``read_manifest``, ``VerifyReport``).
* ``grainpack.ingest``: the write side (``CorpusWriter``, ``merge_corpora``,
  ``convert_*``, tokenizers, the Ray build).
* ``grainpack.mixing``: weights, schedules and accounting (``Stage``, ``token_premiums``,
  ``mixture_accounting``, ``MixtureMonitor``, ...).
* ``grainpack.curriculum``: selectors, bandits and their protocols.
* ``grainpack.reference``: the two specifications' APIs, bit for bit. The names the
  specifications give (``pack_documents``, ``MixedStream``, ``splitmix64``, ...) are also
  ``grainpack.<name>``.
* ``grainpack.index`` (pure index math), ``grainpack.pipeline`` (the Grain pipeline),
  ``grainpack.jax`` and ``grainpack.orbax``.

``import grainpack`` (the ``grainpack`` command, a Grain worker unpickling a grainpack
element) imports neither Grain, JAX nor Orbax until ``make_dataset``,
``make_global_batch`` or a checkpoint argument is used. A name that moved to a namespace
still resolves here for one release, with a ``DeprecationWarning`` naming its new home.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The front door: name -> the namespace that exports it. `__all__`, the lazy loading and
# `dir()` derive from this table; tests/test_layers.py checks the imports below against it.
_FRONT_DOOR = {
    "BlockedOrder": "grainpack.index",
    "ExactOrder": "grainpack.index",
    "CheckpointRestore": "grainpack.orbax",
    "CheckpointSave": "grainpack.orbax",
    "ConfigMismatchError": "grainpack.pipeline",
    "ProcessesDisagreeError": "grainpack.pipeline",
    "CorpusError": "grainpack.corpus",
    "CorpusExistsError": "grainpack.corpus",
    "CorpusNotFoundError": "grainpack.corpus",
    "PipelineConfig": "grainpack.pipeline",
    "PipelineIterator": "grainpack.pipeline",
    "Stage": "grainpack.mixing",
    "build_corpus": "grainpack.ingest",
    "expand": "grainpack.jax",
    "make_dataset": "grainpack.pipeline",
    "make_eval_dataset": "grainpack.pipeline",
    "make_global_batch": "grainpack.jax",
    "open_corpus": "grainpack.corpus",
    "prefetch_to_device": "grainpack.jax",
    "verify_corpus": "grainpack.corpus",
    "write_corpus": "grainpack.ingest",
}

# The names the two specifications give their API: `grainpack.<name>` as they write it, no
# warning, not in `__all__` (their home is `grainpack.reference`).
_REFERENCE = (
    "MixedStream",
    "PackedCorpus",
    "PackedStream",
    "StreamingCorpus",
    "global_document_order",
    "pack_documents",
    "shard_documents_for_rank",
    "splitmix64",
)

# Names that left the front door (release 0.1.0 exported them here): old name -> new home.
# They resolve for one more release, with a DeprecationWarning, as optax moves its names.
_MOVED = {
    "BucketReport": "grainpack.curriculum",
    "Chain": "grainpack.curriculum",
    "LengthBandit": "grainpack.curriculum",
    "LengthBuckets": "grainpack.curriculum",
    "LinearRamp": "grainpack.curriculum",
    "MixtureBandit": "grainpack.curriculum",
    "PerSource": "grainpack.curriculum",
    "RateSchedule": "grainpack.curriculum",
    "Selector": "grainpack.curriculum",
    "SequenceSelector": "grainpack.curriculum",
    "UndecidedEpochError": "grainpack.curriculum",
    "MixtureMonitor": "grainpack.mixing",
    "MixtureWarning": "grainpack.mixing",
    "RepeatCapExceeded": "grainpack.mixing",
    "SourceAccount": "grainpack.mixing",
    "content_probabilities": "grainpack.mixing",
    "mixture_accounting": "grainpack.mixing",
    "selector_report": "grainpack.mixing",
    "target_shares": "grainpack.mixing",
    "token_premiums": "grainpack.mixing",
    "window_shares": "grainpack.mixing",
    "CorpusWriter": "grainpack.ingest",
    "convert_corpus": "grainpack.ingest",
    "convert_jsonl": "grainpack.ingest",
    "convert_npy": "grainpack.ingest",
    "merge_corpora": "grainpack.ingest",
    "TokenShardSource": "grainpack.corpus",
    "VerifyReport": "grainpack.corpus",
    "describe_corpus": "grainpack.corpus",
    "read_manifest": "grainpack.corpus",
    "StreamArgumentError": "grainpack.reference",
    "StreamTooSmall": "grainpack.reference",
    "make_data_loader": "grainpack.pipeline",
    "slot_order": "grainpack.index",
    "window_permutation": "grainpack.index",
}

_NAMESPACES = (
    "corpus",
    "curriculum",
    "index",
    "ingest",
    "jax",
    "mixing",
    "orbax",
    "pipeline",
    "reference",
)

if TYPE_CHECKING:
    from grainpack import corpus as corpus
    from grainpack import curriculum as curriculum
    from grainpack import index as index
    from grainpack import ingest as ingest
    from grainpack import jax as jax
    from grainpack import mixing as mixing
    from grainpack import orbax as orbax
    from grainpack import pipeline as pipeline
    from grainpack import reference as reference
    from grainpack.corpus import CorpusError as CorpusError
    from grainpack.corpus import CorpusExistsError as CorpusExistsError
    from grainpack.corpus import CorpusNotFoundError as CorpusNotFoundError
    from grainpack.corpus import open_corpus as open_corpus
    from grainpack.corpus import verify_corpus as verify_corpus
    from grainpack.index import BlockedOrder as BlockedOrder
    from grainpack.index import ExactOrder as ExactOrder
    from grainpack.ingest import build_corpus as build_corpus
    from grainpack.ingest import write_corpus as write_corpus
    from grainpack.jax import expand as expand
    from grainpack.jax import make_global_batch as make_global_batch
    from grainpack.jax import prefetch_to_device as prefetch_to_device
    from grainpack.mixing import Stage as Stage
    from grainpack.orbax import CheckpointRestore as CheckpointRestore
    from grainpack.orbax import CheckpointSave as CheckpointSave
    from grainpack.pipeline import ConfigMismatchError as ConfigMismatchError
    from grainpack.pipeline import PipelineConfig as PipelineConfig
    from grainpack.pipeline import PipelineIterator as PipelineIterator
    from grainpack.pipeline import ProcessesDisagreeError as ProcessesDisagreeError
    from grainpack.pipeline import make_dataset as make_dataset
    from grainpack.pipeline import make_eval_dataset as make_eval_dataset
    from grainpack.reference import MixedStream as MixedStream
    from grainpack.reference import PackedCorpus as PackedCorpus
    from grainpack.reference import PackedStream as PackedStream
    from grainpack.reference import StreamingCorpus as StreamingCorpus
    from grainpack.reference import global_document_order as global_document_order
    from grainpack.reference import pack_documents as pack_documents
    from grainpack.reference import shard_documents_for_rank as shard_documents_for_rank
    from grainpack.reference import splitmix64 as splitmix64

__all__ = sorted(_FRONT_DOOR)


def __getattr__(name: str) -> Any:
    if name in _NAMESPACES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _MOVED:
        home = _MOVED[name]
        warnings.warn(
            f"grainpack.{name} moved to {home}.{name}; the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), name)  # not cached: warns every time
    home = _FRONT_DOOR.get(name) or ("grainpack.reference" if name in _REFERENCE else None)
    if home is None:
        raise AttributeError(f"module 'grainpack' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_FRONT_DOOR, *_REFERENCE, *_NAMESPACES})
