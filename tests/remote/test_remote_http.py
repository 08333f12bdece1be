"""Corpora read over ``http://`` (issue 33: ``https://`` read-only), from a static file server
on loopback (tests/remote/http_files.py: Range, HEAD, ETag, If-Match): what is read is the
local corpus bit for bit, reads are ranged and pinned, and a file replaced on the server is
refused. Plain HTTP on loopback takes the code path of ``https://`` (obstore's HTTP store):
obstore's TLS client trusts its built-in roots (it does not read ``SSL_CERT_FILE``), so a
self-signed test server would need certificate checks turned off.

    python -m pytest -q -p no:cacheprovider -n 0 tests/remote/test_remote_http.py
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from http_files import FileServer
from remote_store import assert_same_corpus

import grainpack as gp
from grainpack.cli.main import main
from grainpack.corpus.errors import CorpusError
from grainpack.corpus.remote import RemoteOptions, open_remote

BLOCKED = gp.BlockedOrder(block_docs=16, window_blocks=8)
CONFIGS = {
    "docs-exact": dict(sources=("en",), block=31, global_batch_size=8, boundary_id=0),
    "docs-blocked-compact": dict(
        sources=("en",), block=31, global_batch_size=8, order=BLOCKED, layout="compact"
    ),
    "mixed-blocked-provenance": dict(
        sources=("en", "fr"),
        block=48,
        global_batch_size=8,
        order=BLOCKED,
        weights={"en": 0.3, "fr": 0.7},
        provenance=True,
        seed=7,
    ),
}


@pytest.fixture(scope="module")
def http(corpora):
    """A file server over the folder holding the session's local corpora (``en``, ``fr``)."""
    roots = {Path(local).parent for local, _ in corpora.values()}
    assert len(roots) == 1
    server = FileServer(roots.pop()).start()
    try:
        yield server
    finally:
        server.stop()


def test_url_serves_documents_offsets_and_fingerprint_of_the_local_corpus(corpora, http):
    for name, (local_path, _) in corpora.items():
        local, remote = gp.open_corpus(local_path), gp.open_corpus(f"{http.url}/{name}")
        assert_same_corpus(local, remote)
    assert http.counts["GET 206"] > 0  # tokens by range
    assert not any(key.endswith(("412", "416", "404")) for key in http.counts), http.counts


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_batches_over_http_are_the_local_batches(corpora, http, name):
    fields = dict(CONFIGS[name])
    names = fields.pop("sources")
    local = gp.PipelineConfig(sources={n: corpora[n][0] for n in names}, **fields)
    remote = gp.PipelineConfig(sources={n: f"{http.url}/{n}" for n in names}, **fields)
    a, b = iter(gp.make_dataset(local)), iter(gp.make_dataset(remote))
    for step in range(40):
        x, y = next(a), next(b)
        assert sorted(x) == sorted(y)
        for key in x:
            assert x[key].dtype == y[key].dtype, (step, key)
            np.testing.assert_array_equal(x[key], y[key], err_msg=f"step {step} {key}")
    assert b.get_state() == a.get_state()  # the same corpus fingerprints
    assert sorted(b.remote_stats()) == sorted(names)


def test_verify_and_describe_read_http_urls(corpora, http):
    for name, (local, _) in corpora.items():
        url = f"{http.url}/{name}"
        a, b = gp.verify_corpus(local), gp.verify_corpus(url)
        assert b.path == url and b.kind == "grainpack"
        assert {k: v for k, v in vars(b).items() if k != "path"} == {
            k: v for k, v in vars(a).items() if k != "path"
        }
        assert gp.corpus.describe_corpus(url) == gp.corpus.describe_corpus(local)


def test_the_cli_inspects_and_verifies_an_http_url(http, capsys):
    url = f"{http.url}/en"
    assert main(["inspect", url, "--json"]) == 0
    assert '"documents": 900' in capsys.readouterr().out
    assert main(["verify", url]) == 0
    assert f"OK {url}" in capsys.readouterr().out


def test_a_file_replaced_on_the_server_while_read_is_refused(corpora, tmp_path):
    local = Path(corpora["en"][0])
    shutil.copytree(local, tmp_path / "en")
    server = FileServer(tmp_path).start()
    try:
        url = f"{server.url}/en"
        source = open_remote(url, options=RemoteOptions(memory_bytes=0))
        n = source.shards[0].num_tokens
        expected = gp.open_corpus(local).read_tokens(0, n)
        np.testing.assert_array_equal(source.read_tokens(0, n), expected)
        name = "tokens-00000.bin"
        (tmp_path / "new.bin").write_bytes(bytes(2 * n))  # same size, other tokens
        os.replace(tmp_path / "new.bin", tmp_path / "en" / name)  # a new inode: a new ETag
        with pytest.raises(CorpusError, match=f"{url}/{name}: changed since the corpus was opened"):
            source.read_tokens(0, 10)
        assert server.counts["GET 412"] == 1  # refused by If-Match, and not retried
    finally:
        server.stop()
