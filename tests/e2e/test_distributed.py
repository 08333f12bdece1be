"""The Ray path: the parts built by Ray Data tasks on a local 2-CPU Ray give the same corpus."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from texts import TEXTS, expected_ids, write_input

from grainpack.corpus.formats import open_corpus
from grainpack.ingest.build import build_corpus
from grainpack.ingest.distributed import build_corpus_ray

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    tests = str(Path(__file__).parents[1])  # the tasks import dying_tokenizer
    with warnings.catch_warnings():  # JAX's fork warning, if imported: Ray forks to exec
        warnings.filterwarnings("ignore", r"os\.fork\(\) was called", RuntimeWarning)
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": {"PYTHONPATH": tests}},
        )
    yield
    ray.shutdown()


@pytest.mark.slow
def test_ray_build_equals_the_local_builds(tmp_path, tokenizer_files, local_ray):
    inputs = [
        write_input(tmp_path / "a.jsonl", TEXTS[:400]),
        write_input(tmp_path / "b.parquet", TEXTS[400:]),
    ]
    options = dict(tokenizer=tokenizer_files["huggingface"], eos=0, part_bytes=30_000)
    distributed = build_corpus_ray(inputs, tmp_path / "ray", **options)
    one = build_corpus(inputs, tmp_path / "one", workers=1, **options)
    two = build_corpus(inputs, tmp_path / "two", workers=2, **options)
    assert distributed.fingerprint == one.fingerprint == two.fingerprint
    assert len(distributed.shards) > 4
    assert [d.tolist() for d in distributed] == expected_ids(options["tokenizer"], TEXTS, 0)


@pytest.mark.slow
def test_ray_task_errors_are_raised_and_write_nothing(tmp_path, local_ray):
    good = write_input(tmp_path / "a.jsonl", TEXTS[:50])
    (tmp_path / "b.jsonl").write_text('{"text": "fine"}\n{"body": "no text"}\n')
    with pytest.raises(ValueError, match=r"b.jsonl: line 2 at byte 17 has no text"):
        build_corpus_ray([good, tmp_path / "b.jsonl"], tmp_path / "out", tokenizer="bytes")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_part_whose_task_always_dies_fails_after_the_retries_keeping_parts(tmp_path, local_ray):
    from dying_tokenizer import DyingAlways

    from grainpack.ingest.build import WorkerDied
    from grainpack.ingest.distributed import TASK_RETRIES

    good = write_input(tmp_path / "a.jsonl", TEXTS[:50])
    bad = write_input(tmp_path / "b.jsonl", ["DIE"])
    (tmp_path / "attempts").mkdir()
    tokenizer = DyingAlways(str(tmp_path / "attempts"))
    with pytest.raises(WorkerDied, match=r"a Ray task died building a part \(WorkerCrashedError"):
        build_corpus_ray(
            [good, bad], tmp_path / "out", tokenizer=tokenizer, part_bytes=good.stat().st_size
        )
    assert len(list((tmp_path / "attempts").iterdir())) == TASK_RETRIES + 1 == 4
    assert not (tmp_path / "out").exists()
    (kept,) = [p for p in (tmp_path / ".out.parts").iterdir() if p.name.startswith("part-")]
    assert [d.tolist() for d in open_corpus(kept)] == expected_ids("bytes", TEXTS[:50], None)


def test_a_part_locked_by_another_writer_comes_back_as_its_own_error(tmp_path):
    # A Ray task returns errors as data; a CorpusExistsError (a part still written by
    # another process) must stay one, so that the build keeps its complete parts.
    from grainpack.corpus.errors import CorpusExistsError
    from grainpack.ingest import distributed
    from grainpack.ingest.build import plan_build
    from grainpack.ingest.transaction import write_lock

    plan = plan_build(write_input(tmp_path / "a.jsonl", TEXTS[:5]), tokenizer="bytes")
    part = tmp_path / "part-00000"
    lock = write_lock(part)
    try:
        row = distributed._build_row({"index": 0, "path": str(part)}, plan)
    finally:
        lock.release()
    assert row["type"] == "CorpusExistsError"
    assert distributed._ERRORS[row["type"]] is CorpusExistsError


def test_an_address_where_no_cluster_listens_fails_in_seconds_writing_nothing(
    tmp_path, monkeypatch
):
    # Ray retried such an address without end (a build hung for 10+ minutes)
    import socket

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # local_ray may be running

    with socket.socket() as probe:  # a free port: nothing listens there
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    inputs = write_input(tmp_path / "a.jsonl", TEXTS[:5])
    for given in (address, f"ray://{address}"):
        with pytest.raises(ValueError, match=f"no Ray cluster answers at {given} .*ray start"):
            build_corpus_ray(inputs, tmp_path / "out", tokenizer="bytes", address=given)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl"]
