"""Merging native corpora into one without copying token data (shard files hard-linked)."""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from stat import S_ISREG
from typing import Any

import numpy as np

from grainpack.corpus.errors import CorpusError, os_error
from grainpack.corpus.formats import open_corpus
from grainpack.corpus.native import FORMAT_VERSION, MANIFEST_NAME, read_manifest
from grainpack.corpus.shards import FileIdentity, check_offsets
from grainpack.corpus.source import TokenShardSource
from grainpack.corpus.summary import SUMMARY_BLOCK_DOCS, shard_totals
from grainpack.corpus.urls import output_url
from grainpack.ingest.transaction import Transaction
from grainpack.ingest.upload import write_to_url

__all__ = ["merge_corpora"]

PathLike = str | os.PathLike[str]


def merge_corpora(
    parts: Sequence[PathLike], out: PathLike, *, overwrite: bool = False
) -> TokenShardSource:
    """Concatenates native corpora into one at ``out`` without copying token data.

    Document order is the order of ``parts``, then of their documents. Every shard file is
    *hard-linked* into ``out`` under its new name (``tokens-00000.bin``, ...), so ``out`` must
    be on the parts' filesystem; the parts stay valid corpora (they share the files: do not
    modify them in place). Only the regular files each part was opened with are linked: a
    shard that is a symbolic link within its part's folder links the file behind it, one
    out of the folder is refused (as :func:`~grainpack.corpus.open_corpus` refuses it), and
    a file replaced after the part was opened is refused too. The merged corpus is
    assembled next to ``out`` and published by one atomic rename, as
    :class:`~grainpack.ingest.writer.CorpusWriter` does: until then ``out`` is unchanged.
    The manifest copies the parts' shard checksums and records the largest token id; it has
    no ``content_sha256`` (that needs every token read again), so its fingerprint covers the
    shard checksums. The block totals of every shard are computed from its offsets (8 bytes
    a document; no token is read) and stored as in a written corpus (format version 2), so
    the blocked order never scans a merged corpus. The parts must agree on ``dtype``,
    ``vocab_size``, ``eos_id`` and ``tokenizer``.

    Args:
        parts: Native corpus directories, in the order their documents are concatenated.
        out: Output corpus directory, on the parts' filesystem; or a bucket's URL
            (``s3://``, ``gs://``, ``az://``): merged in a staging folder on the parts' file
            system, then uploaded (:func:`~grainpack.ingest.upload.write_to_url`).
        overwrite: Replace a complete corpus at ``out``.

    Returns:
        The merged corpus, opened.

    Raises:
        CorpusError: A part is not a complete native corpus, its offsets are corrupt, or the
            parts disagree; a shard is a link out of its part's folder, changed after the
            part was opened, or cannot be hard-linked (permissions, a full disk).
        CorpusExistsError: ``out`` holds a corpus and ``overwrite`` is false.
        ValueError: ``out`` is on another file system than the parts (no hard links).

    Example:
        >>> import tempfile
        >>> from grainpack.ingest.writer import write_corpus
        >>> d = tempfile.mkdtemp()
        >>> _ = write_corpus(f"{d}/a", [[1, 2]]), write_corpus(f"{d}/b", [[3], [4]])
        >>> [doc.tolist() for doc in merge_corpora([f"{d}/a", f"{d}/b"], f"{d}/ab")]
        [[1, 2], [3], [4]]
    """
    if isinstance(parts, str | os.PathLike) or not parts:
        raise ValueError(f"parts must be a non-empty list of corpus directories, got {parts!r}")
    if (url := output_url(out, "merge_corpora")) is not None:  # staged here, then uploaded
        return write_to_url(
            url,
            lambda staged: merge_corpora(parts, staged, overwrite=True),
            overwrite=overwrite,
            what="merge_corpora",
            near=parts[0],  # hard links: staged on the parts' file system
        )
    out = Path(out)
    paths = [Path(p) for p in parts]
    manifests, sources = [], []
    for path in paths:
        if not (path / MANIFEST_NAME).is_file():
            raise CorpusError(
                f"{path}: not a complete grainpack corpus (no {MANIFEST_NAME}); merge takes "
                "native corpora: build or convert the part first"
            )
        sources.append(open_corpus(path))  # schema and file sizes
        manifests.append(read_manifest(path))
        if path.resolve() == out.resolve() or path.resolve() in out.resolve().parents:
            raise ValueError(
                f"the output {out} is the part {path} or lies inside it; write the merged "
                "corpus elsewhere"
            )
    first = manifests[0]
    for path, m in zip(paths[1:], manifests[1:]):
        for key in ("dtype", "vocab_size", "eos_id", "tokenizer"):
            if m.get(key) != first.get(key):
                raise CorpusError(
                    f"{path}: {key}={m.get(key)!r} but {paths[0]} has {first.get(key)!r}; "
                    "merge only parts built with the same tokenizer and options"
                )
    transaction = Transaction(out, overwrite=overwrite)
    try:
        shards, first_document = [], 0
        for path, m, source in zip(paths, manifests, sources):
            for s, record in zip(m["shards"], source.shards):
                n = len(shards)
                names = {
                    "tokens_file": f"tokens-{n:05d}.bin",
                    "offsets_file": f"offsets-{n:05d}.bin",
                }
                opened = {
                    "tokens_file": record.identity,
                    "offsets_file": record.documents.identity,
                }
                for key, name in names.items():
                    _link(path / s[key], transaction.staging / name, out, opened[key])
                # Block totals are per corpus-wide blocks of documents: the parts' do not
                # line up in the merged corpus, so they are recomputed from the offsets.
                # The offsets file the part was opened with (a map; its identity checked).
                offsets = record.documents.mapped()
                check_offsets(offsets, record.num_tokens, record.documents.path)
                totals = shard_totals(np.diff(offsets), first_document, SUMMARY_BLOCK_DOCS)
                summary = totals.astype("<i8").tobytes()
                names["summary_file"] = f"summary-{n:05d}.bin"
                transaction.write_file(names["summary_file"], summary)
                kept = {k: v for k, v in s.items() if not k.startswith("summary_")}
                shards.append(
                    {**kept, **names, "summary_sha256": hashlib.sha256(summary).hexdigest()}
                )
                first_document += s["num_documents"]
        keys = ("format", "dtype", "vocab_size", "eos_id")
        manifest: dict[str, Any] = {key: first[key] for key in keys}
        manifest["version"] = FORMAT_VERSION
        manifest["summary_block_docs"] = SUMMARY_BLOCK_DOCS
        manifest["num_documents"] = sum(m["num_documents"] for m in manifests)
        manifest["num_tokens"] = sum(m["num_tokens"] for m in manifests)
        highest = [m.get("max_token_id") for m in manifests if m["num_tokens"]]
        if all(h is not None for h in highest):  # known for every part with tokens
            manifest["max_token_id"] = max(highest, default=None)
        manifest["shards"] = shards
        if "tokenizer" in first:
            manifest["tokenizer"] = first["tokenizer"]
        transaction.write_manifest(manifest)
        open_corpus(transaction.staging)  # schema and file sizes, before it replaces anything
    except BaseException:
        transaction.abort()
        raise
    try:
        transaction.publish()
    except KeyboardInterrupt:  # one as publish begins: it aborts (a no-op once published)
        transaction.abort()
        raise
    return open_corpus(out)


def _link(file: Path, link: Path, out: Path, identity: FileIdentity | None) -> None:
    """Hard-links the regular file the part was opened with (``identity``; ``file`` is its
    name in the part, a symbolic link within the part's folder resolved: ``os.link`` would
    link the link itself, whose relative target may not resolve from ``out``) as ``link``.
    Whatever else ``file`` names by now is unlinked again and refused: merge never links a
    file it did not open inside a part."""
    real = os.path.realpath(file)
    try:
        os.link(real, link)
    except OSError as err:
        if err.errno == errno.EXDEV:
            raise ValueError(
                f"cannot hard-link {file} into {out} ({err.strerror}); merge never copies "
                "tokens: put the output on the parts' file system"
            ) from err
        raise os_error(err, f"merging into {out} (nothing was published): hard-linking") from err
    linked = os.lstat(link)
    if identity is None or not S_ISREG(linked.st_mode):
        os.unlink(link)
        raise CorpusError(
            f"{file}: not a regular file of the part opened for the merge; merge links only "
            "the shard files of native corpora it opened: rebuild the part"
        )
    try:
        identity.check(str(file), linked)  # the same file, unchanged since the open
    except CorpusError:
        os.unlink(link)
        raise
