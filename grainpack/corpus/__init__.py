"""Corpora on disk, the read side: the Grain data source over memmapped shards, the native
format and its summaries, readers for Megatron and the flat-shard ``index.json`` layout,
verify, and the host cache. Writing corpora is :mod:`grainpack.ingest`."""
