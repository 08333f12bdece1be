"""Settings records of whole numbers, each also an environment variable (pure)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import ClassVar, Self

__all__ = ["IntOptions"]


class IntOptions:
    """Base of a frozen dataclass of int settings: each field ``name`` is also read from the
    environment variable ``ENV_PREFIX + NAME`` by :meth:`from_env`, and every value is
    checked to be an int of at least its ``MINIMUMS`` entry (1 when it has none).

    Example:
        >>> @dataclasses.dataclass(frozen=True)
        ... class Reads(IntOptions):
        ...     ENV_PREFIX: ClassVar[str] = "EXAMPLE_"
        ...     MINIMUMS: ClassVar[Mapping[str, int]] = {"gap": 0}
        ...     gap: int = 0
        ...     threads: int = 4
        >>> Reads(threads=0)
        Traceback (most recent call last):
        ...
        ValueError: Reads.threads must be an int >= 1, got 0 (environment: EXAMPLE_THREADS)
    """

    ENV_PREFIX: ClassVar[str]
    MINIMUMS: ClassVar[Mapping[str, int]] = {}

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            minimum = self.MINIMUMS.get(field.name, 1)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(
                    f"{type(self).__name__}.{field.name} must be an int >= {minimum}, got "
                    f"{value!r} (environment: {self.ENV_PREFIX}{field.name.upper()})"
                )

    @classmethod
    def from_env(cls) -> Self:
        """The defaults, with any ``ENV_PREFIX + NAME`` environment variable over them."""
        values: dict[str, int] = {}
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            name = f"{cls.ENV_PREFIX}{field.name.upper()}"
            if text := os.environ.get(name):
                try:
                    values[field.name] = int(text)
                except ValueError:
                    raise ValueError(f"{name}={text!r}: expected an int") from None
        return cls(**values)
