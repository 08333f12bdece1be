"""Helpers of the remote-corpus tests: the test bucket, uploading a local corpus, documents."""

from __future__ import annotations

from pathlib import Path

import numpy as np

BUCKET = "grainpack-tests"


def upload(folder: Path, url: str) -> None:
    """Puts every file of ``folder`` under ``url`` (manifest.json last, as a user should)."""
    import obstore
    from obstore.store import from_url

    store = from_url(url)
    files = sorted(p for p in folder.iterdir() if p.is_file())
    files.sort(key=lambda p: p.name == "manifest.json")
    for path in files:
        obstore.put(store, path.name, path.read_bytes())


def documents(seed: int, count: int, vocab: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(3.0, 1.0, size=count).astype(int), 0, 300)
    return [rng.integers(1, vocab, size=n) for n in lengths]
