"""Megatron-LM indexed datasets (``PREFIX.bin`` + ``PREFIX.idx``, ``MMIDIDX`` version 1),
read without conversion.

``.idx`` layout: magic, version, dtype code, counts, then unaligned int32 lengths, int64
pointers and int64 document indices from byte 34.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from pathlib import Path

import numpy as np

from grainpack.corpus.errors import CorpusError, os_error
from grainpack.corpus.shards import FileIdentity, LengthsFile, ShardRecord, read_whole
from grainpack.corpus.source import TokenShardSource

_MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
_MEGATRON_HEADER = 34
# Megatron-LM's DType codes; codes 6 (float64) and 7 (float32) are not token ids.
_MEGATRON_DTYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 8: "uint16"}


def open_megatron(prefix: Path, *, eos_id: int | None = None) -> TokenShardSource:
    """A Megatron-LM indexed dataset ``PREFIX.bin`` + ``PREFIX.idx`` (``MMIDIDX`` version 1).

    Documents are its sequences; the sequences must lie back to back in ``.bin``.
    """
    idx, bin_ = Path(f"{prefix}.idx"), Path(f"{prefix}.bin")
    try:
        idx_stat, raw = read_whole(idx, "give the prefix of a Megatron .bin/.idx pair")
        bin_stat = os.stat(bin_)
    except FileNotFoundError as err:
        name = Path(err.filename).name
        raise CorpusError(f"Megatron prefix {prefix}: {name} is missing (or not a file)") from err
    except OSError as err:
        raise os_error(err, "opening") from err
    if not stat.S_ISREG(bin_stat.st_mode):
        raise CorpusError(f"Megatron prefix {prefix}: {bin_.name} is missing (or not a file)")
    if len(raw) < _MEGATRON_HEADER:
        raise CorpusError(f"{idx}: {len(raw)} bytes, shorter than the 34-byte header (truncated)")
    if raw[:9] != _MEGATRON_MAGIC:
        raise CorpusError(f"{idx}: bad magic {raw[:9]!r}, expected {_MEGATRON_MAGIC!r}")
    (version,) = struct.unpack_from("<Q", raw, 9)
    if version != 1:
        raise CorpusError(f"{idx}: version {version}, only MMIDIDX version 1 is supported")
    code = raw[17]
    if code not in _MEGATRON_DTYPES:
        raise CorpusError(
            f"{idx}: dtype code {code} is not an integer token dtype; supported "
            f"codes: {_MEGATRON_DTYPES}"
        )
    dtype = np.dtype(_MEGATRON_DTYPES[code])
    s, d1 = struct.unpack_from("<QQ", raw, 18)
    expected = _MEGATRON_HEADER + 12 * s + 8 * d1
    if len(raw) not in (expected, expected + s):  # + s: multimodal sequence_modes
        raise CorpusError(
            f"{idx}: {len(raw)} bytes, expected {expected} for {s} sequences and "
            f"{d1} document indices (truncated or corrupt)"
        )
    lengths = np.frombuffer(raw, "<i4", s, _MEGATRON_HEADER).astype(np.int64)
    pointers = np.frombuffer(raw, "<i8", s, _MEGATRON_HEADER + 4 * s)
    doc_index = np.frombuffer(raw, "<i8", d1, _MEGATRON_HEADER + 12 * s)
    if d1 == 0 or doc_index[0] != 0 or doc_index[-1] != s or (lengths < 0).any():
        raise CorpusError(
            f"{idx}: inconsistent index (negative lengths or document_indices not "
            f"running from 0 to {s})"
        )
    records = []
    size = bin_stat.st_size
    if s:
        expect = pointers[0] + np.concatenate([[0], np.cumsum(lengths[:-1] * dtype.itemsize)])
        bad = np.flatnonzero(pointers != expect)
        if bad.size:
            i = int(bad[0])
            raise CorpusError(
                f"{idx}: sequence pointers are not contiguous: sequence {i} starts "
                f"at byte {pointers[i]}, expected {expect[i]} (previous pointer + "
                "length * itemsize); rewrite the dataset without gaps"
            )
        total, start = int(lengths.sum()), int(pointers[0])
        if start < 0 or start + total * dtype.itemsize > size:
            raise CorpusError(
                f"{bin_}: {size} bytes, the index needs {start + total * dtype.itemsize}"
                " (truncated)"
            )
        records.append(
            ShardRecord(
                str(bin_),
                total,
                LengthsFile(str(idx), s, _MEGATRON_HEADER, FileIdentity.of(idx_stat)),
                start,
                FileIdentity.of(bin_stat),
            )
        )
    digest = hashlib.sha256(b"grainpack/megatron\n" + raw + f"\nbin_size={size}\n".encode())
    return TokenShardSource(records, dtype=dtype, fingerprint=digest.hexdigest(), eos_id=eos_id)
