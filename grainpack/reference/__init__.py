"""The reference APIs of the two specifications grainpack was built from, bit for bit.

The document-level pipeline: ``global_document_order``, ``shard_documents_for_rank``,
``pack_documents`` (-> ``PackedCorpus``) and ``StreamingCorpus``. The window loader:
``PackedStream``, ``MixedStream`` and their hash ``splitmix64``; ``StreamTooSmall`` and
``StreamArgumentError`` are the errors it raises where the specification does. The names
the specifications give are also ``grainpack.<name>``; the Grain pipeline computes the same
rows from the same index math.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grainpack.lazy import exports

# name -> its module, loaded on first use (tests/test_layers.py checks the imports below).
_EXPORTS = {
    "MixedStream": "grainpack.reference.windows",
    "PackedCorpus": "grainpack.reference.packing",
    "PackedStream": "grainpack.reference.windows",
    "StreamArgumentError": "grainpack.reference.windows",
    "StreamTooSmall": "grainpack.reference.windows",
    "StreamingCorpus": "grainpack.reference.streaming",
    "global_document_order": "grainpack.index.orders",
    "pack_documents": "grainpack.reference.packing",
    "shard_documents_for_rank": "grainpack.index.orders",
    "splitmix64": "grainpack.index.hashing",
}

if TYPE_CHECKING:
    from grainpack.index.hashing import splitmix64 as splitmix64
    from grainpack.index.orders import global_document_order as global_document_order
    from grainpack.index.orders import shard_documents_for_rank as shard_documents_for_rank
    from grainpack.reference.packing import PackedCorpus as PackedCorpus
    from grainpack.reference.packing import pack_documents as pack_documents
    from grainpack.reference.streaming import StreamingCorpus as StreamingCorpus
    from grainpack.reference.windows import MixedStream as MixedStream
    from grainpack.reference.windows import PackedStream as PackedStream
    from grainpack.reference.windows import StreamArgumentError as StreamArgumentError
    from grainpack.reference.windows import StreamTooSmall as StreamTooSmall

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = exports(__name__, _EXPORTS)
