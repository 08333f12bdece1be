"""A real S3 server on loopback for the remote-corpus tests (moto's server mode), the corpora
uploaded to it, and a fault-injecting proxy in front of it (tests/remote/proxy.py).

The server runs for the whole session; its address, test credentials and
``AWS_ALLOW_HTTP`` are put in the environment, which is where obstore (and the spawned Grain
workers) read them. ``$GRAINPACK_CACHE`` points at a session folder.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

pytest.importorskip("obstore")
pytest.importorskip("moto.server")

from proxy import FaultProxy
from remote_store import BUCKET, documents, upload

from grainpack.ingest.writer import write_corpus


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """The server's endpoint (``http://127.0.0.1:PORT``), with the environment set for it."""
    import boto3
    import portpicker
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    port = portpicker.pick_unused_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "GRAINPACK_CACHE": str(tmp_path_factory.mktemp("cache")),
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
    try:
        yield endpoint
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


@pytest.fixture(scope="session")
def corpora(s3, tmp_path_factory) -> dict[str, tuple[str, str]]:
    """Two corpora, each as (local path, s3 URL): ``en`` (uint16, 5 shards) and ``fr``
    (uint32, stored shuffled, 3 shards)."""
    root = tmp_path_factory.mktemp("corpora")
    found = {}
    for name, seed, count, vocab, dtype, shard, shuffle in (
        ("en", 1, 900, 1000, "uint16", 8_000, None),
        ("fr", 2, 500, 70_000, "uint32", 9_000, 0),
    ):
        path = root / name
        write_corpus(
            path,
            documents(seed, count, vocab),
            vocab_size=vocab,
            dtype=dtype,
            shard_tokens=shard,
            shuffle=shuffle,
        )
        url = f"s3://{BUCKET}/corpora/{name}"
        upload(path, url)
        found[name] = (str(path), url)
    return found


@pytest.fixture
def proxy(s3, monkeypatch, tmp_path) -> Iterator[FaultProxy]:
    """The fault-injecting proxy in front of the session's server, as the clients' endpoint
    (and an empty host cache, so the metadata goes through it too)."""
    running = FaultProxy(s3.removeprefix("http://"), seed=33).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", running.url)
    monkeypatch.setenv("GRAINPACK_CACHE", str(tmp_path / "cache"))
    try:
        yield running
    finally:
        running.stop()
