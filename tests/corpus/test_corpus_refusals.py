"""Small refusals of issue 37 (point 4) for corpora: a scan step no memory holds, and manifest
counts that are not ints."""

from __future__ import annotations

import json
import re

import pytest

import grainpack as gp
from grainpack.corpus.verify import describe_corpus, verify_corpus


@pytest.mark.parametrize("chunk_tokens", [10**18, 2**30 + 1, 0, True, 2.0])
def test_verify_refuses_a_scan_step_past_2_30_tokens(tmp_path, chunk_tokens):
    # 10**18 raised a MemoryError from the first read.
    gp.write_corpus(tmp_path, [[1, 2, 3]])
    message = re.escape(
        "chunk_tokens must be a positive int up to 2**30 (tokens read per scan step: memory "
        f"grows with it), got {chunk_tokens=}; omit it for the default 16777216"
    )
    with pytest.raises(ValueError, match=message):
        verify_corpus(tmp_path, chunk_tokens=chunk_tokens)
    with pytest.raises(ValueError, match=message):
        describe_corpus(tmp_path, chunk_tokens=chunk_tokens)
    assert verify_corpus(tmp_path, chunk_tokens=2**30).max_token_id == 3


@pytest.mark.parametrize("key", ["num_tokens", "num_documents"])
def test_a_manifest_count_written_as_a_float_is_refused(tmp_path, key):
    # 1180.0 == 1180: the float passed the check against the shards' sum.
    gp.write_corpus(tmp_path, [[1, 2, 3], [4]])
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    total = manifest[key]
    manifest[key] = float(total)
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    message = f"{key}={float(total)!r} (expected an int: the shards sum to {total})"
    for call in (gp.open_corpus, gp.verify_corpus, gp.corpus.read_manifest):
        with pytest.raises(gp.CorpusError, match=re.escape(message)):
            call(tmp_path)
