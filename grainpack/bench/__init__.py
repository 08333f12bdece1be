"""Benchmarks: loader throughput against the limit and peers (``throughput``, ``peers``),
building from text (``build``) and the blocked order at scale (``scale``)."""
