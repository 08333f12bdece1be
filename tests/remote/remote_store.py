"""Helpers of the remote-corpus tests: the test bucket, uploading a local corpus, documents,
comparing a corpus read from a URL with its local copy."""

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


def assert_same_corpus(local, remote) -> None:
    """``remote`` (read from a URL) is ``local``: the same fingerprint, sizes, offsets,
    documents and tokens."""
    assert type(remote).__name__ == "RemoteShardSource"
    assert remote.fingerprint == local.fingerprint
    assert (len(remote), remote.num_tokens, remote.dtype) == (
        len(local),
        local.num_tokens,
        local.dtype,
    )
    np.testing.assert_array_equal(remote.offsets, local.offsets)
    for i in range(len(local)):
        np.testing.assert_array_equal(remote[i], local[i])
    n = local.num_tokens
    np.testing.assert_array_equal(remote.read_tokens(0, n), local.read_tokens(0, n))
