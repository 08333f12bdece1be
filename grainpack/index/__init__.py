"""Pure index math: hashing, orders, mixture schedules, mixing, row streams, packed rows, slots.

Every function here maps integers and document lengths to integers; tokens never flow
through this layer. It imports numpy and the standard library only (a test enforces it).

Exported: the two document orders, ``ExactOrder`` (the specifications' permutation of
all documents, the default) and ``BlockedOrder`` (the order that scales: blocks of stored
documents, shuffled within windows), ``slot_order`` (global-array rows -> slot order) and
``window_permutation`` (the window loader's order of an epoch). The specifications' orders
and hash are exported by :mod:`grainpack.reference`, the mixture stages by
:mod:`grainpack.mixing`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grainpack.lazy import exports

# name -> its module, loaded on first use (tests/test_layers.py checks the imports below).
_EXPORTS = {
    "BlockedOrder": "grainpack.index.blocked",
    "ExactOrder": "grainpack.index.exact",
    "slot_order": "grainpack.index.slots",
    "window_permutation": "grainpack.index.orders",
}

if TYPE_CHECKING:
    from grainpack.index.blocked import BlockedOrder as BlockedOrder
    from grainpack.index.exact import ExactOrder as ExactOrder
    from grainpack.index.orders import window_permutation as window_permutation
    from grainpack.index.slots import slot_order as slot_order

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = exports(__name__, _EXPORTS)
