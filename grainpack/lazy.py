"""Lazy public names: a namespace's exports, imported from their modules on first use.

Each namespace (``grainpack.corpus``, ``grainpack.ingest``, ...) names its exports once, in a
table name -> module, and hands it here for its module ``__getattr__`` and ``__dir__``
(PEP 562): ``import grainpack.ingest`` then loads no tokenizer or Ray until a name that needs
them is used. Standard library only, so every layer may use it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["exports"]


def exports(
    namespace: str, table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the module ``namespace`` exporting ``table``.

    Args:
      namespace: the module's ``__name__``.
      table: exported name -> the module that defines it.

    Example:
      >>> getattr_, dir_ = exports(__name__, {"dedent": "textwrap"})
      >>> getattr_("dedent")("  a").strip(), "dedent" in dir_()
      ('a', True)
    """
    scope = vars(sys.modules[namespace])

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {namespace!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(table[name]), name)
        scope[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*scope, *table})

    return __getattr__, __dir__
