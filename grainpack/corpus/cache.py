"""The host cache: what grainpack derives from a corpus, computed once per host.

Arrays derived from a corpus (per-block token totals, selector lengths) are kept in
``$GRAINPACK_CACHE/summaries`` (default ``~/.cache/grainpack/summaries``) under a key naming
everything they depend on, so every process and worker of a host reads what one computed; a
read-only corpus is never written to.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

__all__ = ["cache_root", "cached_array"]

logger = logging.getLogger(__name__)


def cache_root() -> Path:
    """Where grainpack keeps what it derives (summaries, the demo and benchmark corpora):
    ``$GRAINPACK_CACHE``, or ``~/.cache/grainpack``."""
    return Path(os.environ.get("GRAINPACK_CACHE") or Path.home() / ".cache" / "grainpack")


def cached_array(
    name: str, shape: tuple[int, ...], compute: Callable[[], np.ndarray]
) -> np.ndarray:
    """The int64 array of ``shape`` cached as ``name`` in the cache folder (see the module
    docstring), or ``compute()`` stored there: a key names everything the array depends on
    (a corpus fingerprint first), so every process and worker of a host computes it once."""
    path = cache_root() / "summaries" / f"{name}.npy"
    try:
        cached = np.load(path)
        if cached.dtype == np.int64 and cached.shape == shape:
            return cached
    except (OSError, ValueError):
        pass
    array = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as f:
            np.save(f, array)
        os.chmod(f.name, 0o644)  # other users' jobs on the machine read it too
        os.replace(f.name, path)
    except OSError as err:  # a read-only home: the array is still right, only not cached
        logger.warning("cannot cache %s in %s: %s", name, path.parent, err)
    return array
