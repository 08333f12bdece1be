"""The ``fast`` extra: numba's compiled kernels (:mod:`grainpack.pipeline.compiled`) when
numba is installed, else the numpy paths; the batches are the same bit for bit."""

from __future__ import annotations

import functools
import importlib
import warnings
from types import ModuleType

import numpy as np

__all__ = ["kernels"]


@functools.cache
def kernels() -> ModuleType | None:
    """:mod:`grainpack.pipeline.compiled` if numba is installed (``pip install
    grainpack[fast]``), else None; a numba that is installed but does not import (one too
    old for this numpy, llvmlite's library missing, any error) warns once and is not used.

    Example:
      >>> kernels() is None or callable(kernels().gather)
      True
    """
    try:
        return importlib.import_module("grainpack.pipeline.compiled")
    except ModuleNotFoundError as err:
        if err.name in ("numba", "llvmlite"):  # not installed: numpy, silently
            return None
        if err.name == "grainpack.pipeline.compiled":
            raise
        problem: Exception = err
    except Exception as err:  # a broken install: an old numba, llvmlite's library missing
        problem = err
    warnings.warn(
        f"numba is installed but does not import ({type(problem).__name__}: {problem}); "
        "batches are made without it (the same batches, more slowly): install a numba "
        f"release that supports numpy {np.__version__} (pip install -U numba), or uninstall it",
        stacklevel=2,
    )
    return None
