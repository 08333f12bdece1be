"""Remote corpora through a fault-injecting proxy (tests/remote/proxy.py): batches stay bit
for bit the local ones under 5xx responses, connection resets and truncated bodies, or a
clear error names the URL, the range and the cause once the retry budget is spent.

    python -m pytest -q -p no:cacheprovider -n 0 tests/remote/test_remote_faults.py
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import grainpack as gp
from grainpack.corpus.errors import CorpusError
from grainpack.corpus.remote import RemoteOptions, open_remote


def batches(config: gp.PipelineConfig, steps: int) -> list[dict[str, np.ndarray]]:
    it = iter(gp.make_dataset(config))
    return [next(it) for _ in range(steps)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "faults",
    [
        {"errors": 0.15},
        {"resets": 0.15},
        {"truncations": 0.15},
        {"errors": 0.05, "resets": 0.05, "truncations": 0.05},
    ],
    ids=lambda f: "+".join(f),
)
def test_batches_stay_bit_identical_under_faults(corpora, proxy, monkeypatch, faults):
    monkeypatch.setenv("GRAINPACK_REQUEST_BYTES", "4096")  # many requests: many faults
    monkeypatch.setenv("GRAINPACK_GAP_BYTES", "0")
    # a cut body the client does not see end waits for the request timeout: keep it short
    monkeypatch.setenv("GRAINPACK_TIMEOUT_S", "2")
    monkeypatch.setenv("GRAINPACK_ATTEMPTS", "6")
    fields = dict(block=48, global_batch_size=8, weights={"en": 0.4, "fr": 0.6}, provenance=True)
    local = gp.PipelineConfig(sources={n: corpora[n][0] for n in ("en", "fr")}, **fields)
    remote = gp.PipelineConfig(sources={n: corpora[n][1] for n in ("en", "fr")}, **fields)
    for name, rate in faults.items():
        setattr(proxy, name, rate)
    expected, got = batches(local, 25), batches(remote, 25)
    for step, (a, b) in enumerate(zip(expected, got)):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"step {step} {key}")
    injected = sum(proxy.counts[k] for k in ("error", "reset", "truncate"))
    assert injected >= 5, proxy.counts  # the faults happened, and were survived


def test_reads_fail_clearly_once_the_retries_are_spent(corpora, proxy):
    url = corpora["en"][1]
    options = RemoteOptions(attempts=2, client_retries=1, memory_bytes=0)
    source = open_remote(url, options=options)  # no faults yet
    proxy.errors = 1.0
    with pytest.raises(CorpusError) as raised:
        source.read_tokens(1000, 1100)
    message = str(raised.value)
    assert f"{url}/tokens-00000.bin: reading bytes [2000, 2200) failed 2 times" in message
    assert "503" in message or "SlowDown" in message or "Service Unavailable" in message
    assert source.stats["retries"] == 1
    proxy.errors, proxy.truncations = 0.0, 1.0
    with pytest.raises(CorpusError, match=r"bytes \[2000, 2200\) failed 2 times"):
        source.read_tokens(1000, 1100)
    proxy.truncations = 0.0
    np.testing.assert_array_equal(
        source.read_tokens(1000, 1100), gp.open_corpus(corpora["en"][0]).read_tokens(1000, 1100)
    )


def test_an_unreachable_store_names_the_url(corpora, monkeypatch):
    import portpicker

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{portpicker.pick_unused_port()}")
    monkeypatch.setenv("GRAINPACK_ATTEMPTS", "1")
    monkeypatch.setenv("GRAINPACK_CLIENT_RETRIES", "0")
    url = corpora["en"][1]
    with pytest.raises(CorpusError, match=f"{url}/manifest.json: downloading it failed 1 times"):
        gp.open_corpus(url)


def test_the_bandwidth_cap_paces_the_responses(corpora, proxy):
    local = gp.open_corpus(corpora["en"][0])
    source = open_remote(corpora["en"][1], options=RemoteOptions(memory_bytes=0))
    n = local.num_tokens
    sent = proxy.counts["bytes"]
    proxy.bandwidth = 100_000  # bytes per second, all responses together
    began = time.perf_counter()
    np.testing.assert_array_equal(source.read_tokens(0, n), local.read_tokens(0, n))
    elapsed = time.perf_counter() - began
    assert proxy.counts["bytes"] - sent == 2 * n == 54_156  # uint16 tokens, each byte once
    assert elapsed >= 54_156 / 100_000 - 0.01
