"""The order strategies: ExactOrder and BlockedOrder behind one DocumentOrder interface."""

from __future__ import annotations

import numpy as np
import pytest

from grainpack.index.blocked import BlockedOrder, BlockedRows
from grainpack.index.exact import DocumentOrder, ExactOrder
from grainpack.index.stream import SourceRows


class Corpus:
    """Ten documents of 3 tokens: lengths and offsets, what both orders read."""

    num_tokens, lengths, offsets = 30, np.full(10, 3), np.arange(0, 31, 3)

    def __len__(self) -> int:
        return 10

    def offsets_between(self, first: int, stop: int) -> np.ndarray:
        return self.offsets[first : stop + 1]


OPTIONS = dict(unit="documents", block=5, seed=0, boundary=False, selector=None)


def test_both_orders_are_document_orders_with_their_identity():
    exact, blocked = ExactOrder(), BlockedOrder(block_docs=2, window_blocks=2)
    assert isinstance(exact, DocumentOrder) and isinstance(blocked, DocumentOrder)
    assert (exact.description(), exact.fingerprint(), exact.counts_in_state) == ("exact", {}, False)
    assert blocked.fingerprint() == {
        "order": {"kind": "blocked", "block_docs": 2, "window_blocks": 2}
    }
    assert blocked.counts_in_state is True
    assert ExactOrder() == ExactOrder() and repr(ExactOrder()) == "ExactOrder()"


def test_row_streams_of_each_order():
    exact = ExactOrder().row_stream(Corpus(), block_tokens=None, name="en", **OPTIONS)
    assert type(exact) is SourceRows and exact.name == "en"
    # 30 tokens in rows of 6: 5 rows, the documents of global_document_order(10, 0, 0)
    assert exact.rows_per_epoch == 5
    asked = []

    def totals(block_docs: int) -> np.ndarray:
        asked.append(block_docs)
        return np.full(5, 6)

    order = BlockedOrder(block_docs=2, window_blocks=2)
    blocked = order.row_stream(Corpus(), block_tokens=totals, name="en", **OPTIONS)
    assert type(blocked) is BlockedRows and blocked.order is order and blocked.name == "en"
    assert (blocked.rows_per_epoch, asked) == (5, [2])  # totals read once, per block of 2
    spans = blocked.spans(0, np.arange(5))
    assert sorted(set(spans.document.tolist())) == list(range(10))


def test_blocked_order_refuses_a_selector_that_cannot_decide_per_block():
    def keep_all(order, seed, epoch):
        return order

    options = {**OPTIONS, "selector": keep_all}
    with pytest.raises(TypeError, match=r"order=BlockedOrder needs a selector .* source 'en' has"):
        BlockedOrder(2, 2).row_stream(Corpus(), block_tokens=None, name="en", **options)
    rows = ExactOrder().row_stream(Corpus(), block_tokens=None, name="en", **options)
    assert rows.rows_per_epoch is None  # a selector decides each epoch's documents


@pytest.mark.parametrize(
    ("unit", "selector", "expected"),
    [
        ("documents", False, 34 * 10),  # EXACT_BYTES_PER_DOCUMENT per document
        ("documents", True, (34 + 24) * 10),  # and SELECTOR_BYTES_PER_DOCUMENT with a selector
        ("windows", False, 16 * 10 + 8 * 5),  # lengths and bounds, and 5 windows of 6 tokens
    ],
)
def test_index_bytes(unit, selector, expected):
    assert ExactOrder().index_bytes(Corpus(), unit=unit, block=5, selector=selector) == expected
    assert BlockedOrder().index_bytes(Corpus(), unit=unit, block=5, selector=selector) == 0
