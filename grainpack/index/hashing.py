"""SplitMix64, the stateless hash behind every seeded choice (scalar and vectorized).

Pure: numpy and the standard library only.
"""

from __future__ import annotations

import operator
from typing import overload

import numpy as np

__all__ = ["MASK64", "splitmix64", "splitmix64_array", "splitmix64_inplace"]

MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB


@overload
def splitmix64(x: int) -> int: ...
@overload
def splitmix64(x: np.ndarray) -> np.ndarray: ...
def splitmix64(x: int | np.ndarray) -> int | np.ndarray:
    """One SplitMix64 step: the window loader's ``_splitmix64``, on Python ints modulo 2**64.

    An array argument is hashed elementwise by :func:`splitmix64_array` (same values).

    Any int is accepted (negative or >= 2**64); it is reduced modulo 2**64 by the masking, so
    ``splitmix64(x) == splitmix64(x % 2**64)``.

    Args:
        x: the state to hash.

    Returns:
        An int in ``[0, 2**64)``.

    Example:
        >>> hex(splitmix64(0))
        '0xe220a8397b1dcdaf'
    """
    if isinstance(x, np.ndarray):
        return splitmix64_array(x)
    x = (operator.index(x) + _GOLDEN) & MASK64  # a float is a TypeError, as in the seed
    z = x
    z = ((z ^ (z >> 30)) * _MUL1) & MASK64
    z = ((z ^ (z >> 27)) * _MUL2) & MASK64
    return z ^ (z >> 31)


def splitmix64_array(x: np.ndarray | int) -> np.ndarray:
    """Vectorized :func:`splitmix64`: identical values, elementwise, as a uint64 array.

    Signed integer inputs are reinterpreted modulo 2**64 (two's complement), exactly as the
    scalar form reduces negative ints. uint64 arithmetic wraps, which is the masking.

    Args:
        x: an integer array (or scalar); it is not modified.

    Returns:
        A new uint64 array of the same shape.

    Example:
        >>> [hex(v) for v in splitmix64_array(np.array([0, 1], dtype=np.uint64)).tolist()]
        ['0xe220a8397b1dcdaf', '0x910a2dec89025cc1']
    """
    arr = np.asarray(x)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(
            f"splitmix64_array expects an integer array, got {arr.dtype=}; "
            "convert with .astype(np.uint64)"
        )
    z = arr.astype(np.uint64, copy=True)
    return splitmix64_inplace(z, np.empty_like(z))


def splitmix64_inplace(z: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    """Hash the uint64 array ``z`` in place (``tmp`` is scratch of the same shape)."""
    np.add(z, np.uint64(_GOLDEN), out=z)
    np.right_shift(z, np.uint64(30), out=tmp)
    np.bitwise_xor(z, tmp, out=z)
    np.multiply(z, np.uint64(_MUL1), out=z)
    np.right_shift(z, np.uint64(27), out=tmp)
    np.bitwise_xor(z, tmp, out=z)
    np.multiply(z, np.uint64(_MUL2), out=z)
    np.right_shift(z, np.uint64(31), out=tmp)
    np.bitwise_xor(z, tmp, out=z)
    return z
