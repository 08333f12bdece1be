"""Text inputs shared by the build tests: the demo's documents written in any input format,
and what each tokenizer library's own ``encode`` makes of them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from grainpack.demo import documents
from grainpack.ingest.tokenizers import load_tokenizer

TEXTS = documents("en")  # ~640 docstrings of the standard library, ~256 KB


def write_input(path: Path, texts: list[str]) -> Path:
    """``texts`` in the format that ``path``'s name says (plain text: one per line)."""
    name = path.name
    if name.endswith(".parquet"):
        pq.write_table(pa.table({"text": texts}), path, row_group_size=100)
        return path
    if ".jsonl" in name:
        data = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
    else:
        data = "".join(t + "\n" for t in texts).encode()
    if name.endswith(".gz"):
        data = gzip.compress(data)
    elif name.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


def expected_ids(tokenizer, texts, eos=None):
    """The tokenizer library's own ``encode`` of each text (grainpack's batch path not used)."""
    tok = load_tokenizer(tokenizer)
    encode = {
        "bytes": lambda t: list(t.encode()),
        "huggingface": lambda t: tok.model.encode(t).ids,
        "sentencepiece": lambda t: tok.model.encode(t),
        "tiktoken": lambda t: tok.model.encode(t),  # no special-token text in these documents
    }[tok.kind]
    return [list(encode(t)) + ([] if eos is None else [eos]) for t in texts]
