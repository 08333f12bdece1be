"""``PipelineConfig(packing="best_fit")``: a source's row stream packed by best fit, with
numba's compiled placement when it is installed (the same rows without it)."""

from __future__ import annotations

from grainpack.index.bestfit import BestFitRows
from grainpack.index.blocked import BlockedRows
from grainpack.index.stream import EpochRows, SourceRows
from grainpack.pipeline import fast

__all__ = ["best_fit_stream"]


def best_fit_stream(rows: EpochRows, *, max_segments: int | None) -> BestFitRows:
    """The documents of ``rows`` (a documents-unit stream of either order, in its order),
    packed by best fit (:class:`~grainpack.index.bestfit.BestFitRows`)."""
    if not isinstance(rows, SourceRows | BlockedRows):
        raise TypeError(
            f"packing='best_fit' packs the documents of an exact or blocked order; the order "
            f"gave a {type(rows).__name__}"
        )
    found = fast.kernels()
    kernel = None if found is None else found.best_fit
    return BestFitRows(rows, max_segments=max_segments, kernel=kernel)
