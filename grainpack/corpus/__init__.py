"""Corpora on disk: the Grain data source over memmapped shards, the native format and its
writer, readers for Megatron and the flat-shard ``index.json`` layout, converters, verify."""
