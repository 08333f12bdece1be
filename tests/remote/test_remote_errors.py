"""Access-denied and not-found errors of remote corpora (issue 33: "Permission and not-found
errors name the URL and the credential source that was tried"), from real servers on
loopback: the S3 server behind tests/remote/proxy.py (``deny``: 403 ``AccessDenied`` to
every request) and the file server of tests/remote/http_files.py (``deny``: 401 or 403).
Neither kind of error is retried, and the CLI prints it on one line with exit code 1.

    python -m pytest -q -p no:cacheprovider -n 0 tests/remote/test_remote_errors.py
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from http_files import FileServer
from remote_store import BUCKET, upload

import grainpack as gp
from grainpack.cli.main import main
from grainpack.corpus.errors import CorpusError, CorpusNotFoundError
from grainpack.corpus.remote import RemoteOptions, open_remote

# where an S3 client reads its credentials, in obstore's order
AWS_SOURCES = (
    "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), "
    "AWS_WEB_IDENTITY_TOKEN_FILE, or the instance's metadata service"
)


@pytest.fixture
def files(corpora, tmp_path) -> Iterator[FileServer]:
    """A file server over a copy of the local corpus ``en`` (``/en``), tests may change."""
    shutil.copytree(corpora["en"][0], tmp_path / "served" / "en")
    server = FileServer(tmp_path / "served").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["s3", "http"])
def en_copy(request, corpora) -> tuple[str, Callable[[str], None]]:
    """A copy of the corpus ``en`` of its own on S3 or over HTTP: its URL, and a function that
    deletes one of its objects."""
    if request.param == "http":
        server = request.getfixturevalue("files")
        return f"{server.url}/en", lambda name: (server.root / "en" / name).unlink()
    import obstore
    from obstore.store import from_url

    url = f"s3://{BUCKET}/scratch/{uuid.uuid4().hex}"
    upload(Path(corpora["en"][0]), url)
    return url, lambda name: obstore.delete(from_url(url), name)


def one_line_error(capsys, command: str) -> str:
    """The message the CLI printed (nothing on stdout, one line on stderr)."""
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.endswith("\n"), (out, err)
    prefix = f"grainpack {command}: error: "
    assert err.startswith(prefix), err
    return err[len(prefix) : -1]


# -- access denied -----------------------------------------------------------------------


def test_access_denied_on_s3_names_the_url_and_the_credential_sources(corpora, proxy):
    url = corpora["en"][1]
    proxy.deny = True
    with pytest.raises(CorpusError) as info:
        gp.open_corpus(url)
    assert not isinstance(info.value, FileNotFoundError)
    message = str(info.value)
    assert message.startswith(f"{url}/manifest.json: access denied (downloading it): "), message
    assert "403 Forbidden" in message and "<Code>AccessDenied</Code>" in message
    assert "credentials are read from " in message and AWS_SOURCES in message
    assert "AWS_ENDPOINT_URL" in message  # what an S3-compatible server needs too
    assert "\n" not in message
    assert proxy.counts["denied"] == 1  # not retried


def test_access_denied_after_opening_names_the_object_and_the_range(corpora, proxy):
    local, url = corpora["en"]
    source = open_remote(url, options=RemoteOptions(memory_bytes=0, lookahead_bytes=0))
    np.testing.assert_array_equal(
        source.read_tokens(0, 100), gp.open_corpus(local).read_tokens(0, 100)
    )
    proxy.deny = True
    denied = re.escape(f"{url}/tokens-00000.bin: access denied (reading bytes [0, 200)): ")
    with pytest.raises(CorpusError, match=denied + ".*" + re.escape(AWS_SOURCES)):
        source.read_tokens(0, 100)
    assert proxy.counts["denied"] == 1


def test_the_cli_prints_access_denied_on_s3_on_one_line(corpora, proxy, capsys):
    url = corpora["en"][1]
    proxy.deny = True
    for command in ("inspect", "verify"):
        assert main([command, url]) == 1
        message = one_line_error(capsys, command)
        assert message.startswith(f"{url}/manifest.json: access denied"), message
        assert AWS_SOURCES in message
    assert proxy.counts["denied"] == 2


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (401, "401 Unauthorized"),  # obstore's UnauthenticatedError
        (403, "403 Forbidden"),  # obstore's PermissionDeniedError
    ],
)
def test_access_denied_over_http_names_the_url(files, capsys, status, text):
    url = f"{files.url}/en"
    files.deny = status
    with pytest.raises(CorpusError) as info:
        gp.open_corpus(url)
    message = str(info.value)
    assert message.startswith(f"{url}/manifest.json: access denied (downloading it): "), message
    assert text in message and "anonymous" in message  # no credentials were sent
    assert files.counts[f"GET {status}"] == 1  # not retried
    assert main(["inspect", url]) == 1
    printed = one_line_error(capsys, "inspect")
    took = re.compile(r" in [0-9.]+[µm]?s ")  # obstore's line says how long the request took
    assert took.sub(" in T ", printed) == took.sub(" in T ", message)


def test_access_denied_over_http_says_how_to_fix_an_anonymous_read(files):
    files.deny = 403
    with pytest.raises(CorpusError) as info:
        gp.open_corpus(f"{files.url}/en")
    message = str(info.value)
    assert "bucket's policy" not in message
    assert message.endswith(
        "http(s):// reads are anonymous (no credentials are sent): make the files readable "
        "without credentials on the server, or read the bucket through its own scheme (s3://, "
        "gs://, az://) with credentials"
    )


def test_access_denied_on_s3_names_the_credentials_that_were_tried(corpora, proxy):
    proxy.deny = True
    with pytest.raises(CorpusError, match=r"the access key AWS_ACCESS_KEY_ID=test\.\.\. from "):
        gp.open_corpus(corpora["en"][1])


# -- not found ---------------------------------------------------------------------------


def test_a_prefix_without_a_manifest_is_not_found(corpora, files, capsys):
    import obstore
    from obstore.store import from_url

    half = f"s3://{BUCKET}/scratch/{uuid.uuid4().hex}"  # an upload stopped before its manifest
    store = from_url(half)
    for path in sorted(Path(corpora["en"][0]).glob("*.bin")):
        obstore.put(store, path.name, path.read_bytes())
    urls = [f"s3://{BUCKET}/nothing-here", half, f"{files.url}/nothing-here", files.url]
    for url in urls:
        found = re.escape(f"{url}/manifest.json: not found (downloading it): ")
        with pytest.raises(CorpusNotFoundError, match=found + ".*uploaded completely"):
            gp.open_corpus(url)
        assert main(["inspect", url]) == 1
        assert re.match(found, one_line_error(capsys, "inspect"))


def test_a_token_object_deleted_after_upload_is_named_at_open(en_copy, capsys):
    url, delete = en_copy
    delete("tokens-00002.bin")
    found = re.escape(f"{url}/tokens-00002.bin: not found (reading its metadata (HEAD)): ")
    with pytest.raises(CorpusNotFoundError, match=found):
        gp.open_corpus(url)
    assert main(["inspect", url]) == 1
    assert re.match(found, one_line_error(capsys, "inspect"))


def test_a_token_object_deleted_after_opening_is_named_when_read(corpora, en_copy):
    url, delete = en_copy
    source = open_remote(url, options=RemoteOptions(memory_bytes=0, lookahead_bytes=0))
    local = gp.open_corpus(corpora["en"][0])
    first = source.shards[0].num_tokens  # shard 1's first token
    delete("tokens-00001.bin")
    np.testing.assert_array_equal(source.read_tokens(0, 50), local.read_tokens(0, 50))
    found = re.escape(f"{url}/tokens-00001.bin: not found (reading bytes [0, 100)): ")
    with pytest.raises(CorpusNotFoundError, match=found):
        source.read_tokens(first, first + 50)
