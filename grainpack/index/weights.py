"""Mixture weights: validated probabilities and the content mode's premiums.

Pure: numpy and the standard library only.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import overload

import numpy as np

from grainpack.index.checks import check_int

__all__ = ["content_probabilities", "normalize_probabilities", "token_premiums"]


def normalize_probabilities(probs: Sequence[float] | None, num_sources: int) -> tuple[float, ...]:
    """Validate mixing probabilities (None -> equal ``1 / num_sources`` each).

    Values are kept as given (not rescaled), because the window loader's choice compares
    against their running sum; they must be finite, >= 0 and sum to 1 within 1e-6 (the window
    loader's tolerance).
    A zero probability disables a source.

    Args:
        probs: one probability per source, in source order, or None.
        num_sources: number of sources, >= 1.

    Returns:
        The probabilities as a tuple of Python floats.

    Raises:
        ValueError, TypeError: wrong length, non-numbers, NaN/inf, negatives, bad sum.

    Example:
        >>> normalize_probabilities(None, 4)
        (0.25, 0.25, 0.25, 0.25)
    """
    n = check_int("num_sources", num_sources, minimum=1)
    if probs is None:
        return (1.0 / n,) * n
    if isinstance(probs, str) or not isinstance(probs, Sequence | np.ndarray):
        raise TypeError(f"probs must be a sequence of {n} floats, got {type(probs).__name__}")
    values = list(probs)
    if len(values) != n:
        raise ValueError(
            f"probs must have one value per source ({n}), got {len(values)}: {values}; "
            "list them in source order or pass probs=None for equal weights"
        )
    bad_type = [v for v in values if isinstance(v, bool) or not isinstance(v, numbers.Real)]
    if bad_type:
        raise TypeError(f"probs must be real numbers, got {bad_type} in {values}")
    floats = tuple(float(v) for v in values)
    bad = [v for v in floats if not math.isfinite(v) or v < 0.0]
    if bad:
        raise ValueError(
            f"probs must be finite and >= 0, got {bad} in {list(floats)}; "
            "use non-negative weights that sum to 1"
        )
    total = sum(floats)
    if not abs(total - 1.0) < 1e-6:
        raise ValueError(
            f"probs must sum to 1 (within 1e-6), got sum={total!r} for {list(floats)}; "
            "divide each weight by their sum"
        )
    return floats


def _positive_floats(name: str, values: Sequence[float]) -> tuple[float, ...]:
    vals = list(values)
    bad = [v for v in vals if isinstance(v, bool) or not isinstance(v, numbers.Real)]
    if bad:
        raise TypeError(f"{name} must be a non-empty sequence of numbers, got {vals}")
    if not vals:
        raise ValueError(f"{name} must be a non-empty sequence of numbers, got {vals}")
    floats = tuple(float(v) for v in vals)
    bad_vals = [v for v in floats if not (math.isfinite(v) and v > 0.0)]
    if bad_vals:
        raise ValueError(f"{name} must be finite and > 0, got {bad_vals} in {list(floats)}")
    return floats


def token_premiums(
    byte_premiums: Sequence[float], bytes_per_token: Sequence[float]
) -> tuple[float, ...]:
    """Tokens per unit of content per language: ``byte_premium_j / bytes_per_token_j``.

    ``byte_premium_j`` is how many UTF-8 bytes language ``j`` needs for content that takes one
    byte in the reference language (e.g. English = 1.0); ``bytes_per_token_j`` is the
    tokenizer's compression on language ``j``. Their ratio is the tokens language ``j`` needs per
    reference byte of content. See :func:`content_probabilities` for a worked example.

    Args:
        byte_premiums: UTF-8 bytes per reference byte of content, per language (> 0).
        bytes_per_token: The tokenizer's bytes per token on each language (> 0).

    Returns:
        Tokens per reference byte of content, per language.

    Example:
        >>> token_premiums([1.0, 1.4], [4.0, 2.8])
        (0.25, 0.5)
    """
    b = _positive_floats("byte_premiums", byte_premiums)
    c = _positive_floats("bytes_per_token", bytes_per_token)
    if len(b) != len(c):
        raise ValueError(
            f"byte_premiums and bytes_per_token need one value per language, got "
            f"{len(b)} and {len(c)}"
        )
    return tuple(bj / cj for bj, cj in zip(b, c, strict=True))


@overload
def content_probabilities(premiums: Mapping[str, float]) -> dict[str, float]: ...
@overload
def content_probabilities(premiums: Sequence[float]) -> tuple[float, ...]: ...
def content_probabilities(
    premiums: Sequence[float] | Mapping[str, float],
) -> tuple[float, ...] | dict[str, float]:
    """Content mode: token shares that give every language the same amount of *content*.

    ``premiums[j]`` = tokens language ``j`` needs per unit of content (see
    :func:`token_premiums`: ``byte_premium_j / bytes_per_token_j``). A language that needs
    ``k`` times more tokens for the same content gets ``k`` times the token share::

        p_j = premium_j / sum_i premium_i

    (Token mode, by contrast, is ``p_j = 1 / n``: equal tokens, unequal content.)

    Worked example: English, byte premium 1.0, 4.0 bytes per token -> 0.25 tokens per unit of
    content; Arabic, byte premium 1.4, 2.8 bytes per token -> 0.5. Then
    ``p = (0.25 / 0.75, 0.5 / 0.75) = (1/3, 2/3)``. Check, per 3000 tokens: English gets 1000
    tokens = 4000 bytes = 4000 units; Arabic 2000 tokens = 5600 bytes = 5600 / 1.4 = 4000
    units. Equal content, twice the Arabic tokens.

    Args:
        premiums: positive tokens-per-content value per language, in language order, or a
            mapping language -> premium.

    Returns:
        Probabilities summing to 1 (up to float rounding), ready for ``MixedStream(probs=...)``
        (a mapping language -> probability when ``premiums`` is a mapping).

    Example:
        >>> content_probabilities(token_premiums([1.0, 1.4], [4.0, 2.8]))
        (0.3333333333333333, 0.6666666666666666)
    """
    if isinstance(premiums, Mapping):
        return dict(zip(premiums, content_probabilities(list(premiums.values()))))
    prem = _positive_floats("premiums", premiums)
    try:
        total = math.fsum(prem)
    except OverflowError:  # a sum past the float range: only the ratios count
        top = max(prem)
        prem = [p / top for p in prem]
        total = math.fsum(prem)
    return tuple(p / total for p in prem)
