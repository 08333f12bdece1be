"""Argument checks shared by every layer (clear errors, never ``assert``).

One rule: a value of the wrong type raises ``TypeError``; a value of the right type that is
out of range raises ``ValueError``. Both name the argument and the value found. NumPy
scalars count as numbers (``np.int64`` as an int, ``np.float32`` as a real number).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np


def is_int(value: object) -> bool:
    """A Python ``int`` that is not a ``bool`` (as JSON manifests and options hold them)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(name: str, value: object, minimum: int | None = 0) -> int:
    """Returns ``value`` as an int, or raises ``TypeError``/``ValueError`` naming it.

    Example:
        >>> check_int("block", 8, minimum=1)
        8
    """
    sign = " (a non-negative int)" if minimum == 0 else ""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be an int{sign}, got {value!r} of type {type(value).__name__}"
        )
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}{sign}, got {name}={value}")
    return int(value)


def check_bool(name: str, value: object) -> bool:
    """Returns ``value`` as a bool, or raises ``TypeError`` naming it: a flag given as
    ``"no"`` or ``1`` would be read by its truth and, say, replace a corpus.

    Example:
        >>> check_bool("overwrite", np.bool_(False))
        False
    """
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be True or False; got {value!r}")
    return bool(value)


def check_seed(name: str, value: object) -> int:
    """Returns ``value`` as a seed in ``[0, 2**64)``, or raises naming it.

    Seeds are hashed as 64 bits, so a larger one would silently act as itself modulo 2**64.

    Example:
        >>> check_seed("seed", 2**64 - 1)
        18446744073709551615
    """
    seed = check_int(name, value)
    if seed >> 64:
        raise ValueError(
            f"{name} must be below 2**64 (seeds are hashed as 64 bits: {seed} would act as "
            f"{seed & (2**64 - 1)}), got {name}={seed}"
        )
    return seed


def check_float(
    name: str,
    value: object,
    low: float,
    high: float,
    *,
    closed_low: bool = False,
    closed_high: bool = False,
    fix: str = "",
) -> float:
    """Returns ``value`` as a float in the interval, or raises naming it.

    Example:
        >>> check_float("weight", np.float32(0.5), 0.0, 1.0)
        0.5
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number; got {value!r} of type {type(value).__name__}")
    x = float(value)
    fix = f" ({fix})" if fix else ""
    if not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number; got {value!r}{fix}")
    if not (low < x < high or (closed_low and x == low) or (closed_high and x == high)):
        if math.isinf(high):
            bound = f"be >= {low:g}" if closed_low else f"be > {low:g}"
        else:
            left, right = "[" if closed_low else "(", "]" if closed_high else ")"
            bound = f"lie in {left}{low}, {high}{right}"
        raise ValueError(f"{name} must {bound}; got {value!r}{fix}")
    return x


def check_floats(
    name: str, values: object, count: int, *, allow_nan: bool = False, per: str = "bucket"
) -> tuple[float, ...]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise TypeError(f"{name} must be a sequence of {count} numbers; got {values!r}")
    out = []
    for x in values:
        if isinstance(x, bool) or not isinstance(x, numbers.Real):
            raise TypeError(f"{name} must hold numbers; got {x!r} in {name}={values!r}")
        x = float(x)
        if math.isinf(x) or (math.isnan(x) and not allow_nan):
            raise ValueError(f"{name} must be finite; got {name}={list(values)!r}")
        out.append(x)
    if len(out) != count:
        raise ValueError(f"{name} needs one value per {per} ({count}); got {len(out)}: {out}")
    return tuple(out)


def check_rates(name: str, values: object) -> tuple[float, ...]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise TypeError(f"{name} must be a sequence of keep rates in [0, 1]; got {values!r}")
    rates = check_floats(name, values, len(values))  # type: ignore[arg-type]
    if not rates or any(not 0.0 <= r <= 1.0 for r in rates):
        raise ValueError(
            f"{name} must be keep rates in [0, 1] (one per bucket); got {name}={list(rates)}"
        )
    return rates
