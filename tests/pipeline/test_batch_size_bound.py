"""A global batch size no run can hold is refused by the config, not by numpy in ``next()``
(issue 37, point 4)."""

from __future__ import annotations

import re

import pytest

import grainpack as gp
from grainpack.pipeline.config import MAX_GLOBAL_BATCH_SIZE


@pytest.mark.parametrize("size", [2**62, 2**40, MAX_GLOBAL_BATCH_SIZE + 1])
def test_a_global_batch_past_2_24_rows_is_refused_by_the_config(tmp_path, size):
    # 2**62 failed in next() with "array is too big", 2**40 with a MemoryError.
    message = re.escape(
        f"global_batch_size must be at most 2**24 = 16,777,216 rows (every process plans "
        f"each row of a global batch, 8 bytes and more a row), got global_batch_size={size:,}"
    )
    with pytest.raises(ValueError, match=message):
        gp.PipelineConfig(sources={"a": tmp_path}, block=4, global_batch_size=size)
    with pytest.raises(ValueError, match=message):
        gp.PipelineConfig.from_dict(
            {"sources": {"a": str(tmp_path)}, "block": 4, "global_batch_size": size}
        )


def test_the_largest_global_batch_is_accepted(tmp_path):
    config = gp.PipelineConfig(
        sources={"a": tmp_path}, block=4, global_batch_size=MAX_GLOBAL_BATCH_SIZE
    )
    assert config.global_batch_size == 2**24
