"""Argument checks shared by the public entry points (clear errors, never ``assert``)."""

from __future__ import annotations

import numbers


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
