"""Benchmarks: loader throughput against the limit and peers (``throughput``, ``peers``),
building from text (``build``), the blocked order at scale (``scale``), an accelerator
host's feed (``device``) and concat against best-fit packing (``packing``)."""
