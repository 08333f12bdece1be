"""``grainpack bench --packing``: a benchmark of its own, refused with other benchmarks'
options before any work."""

from __future__ import annotations

import pytest

from grainpack.cli.main import main


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--packing", "--scale"], "--packing is a benchmark of its own: give it without the"),
        (["--packing", "--megabytes", "5"], "--megabytes applies to bench --build only"),
        (["--packing", "--tokens", "5"], "--tokens applies to the throughput benchmark (none of "),
        (["--packing", "--keep"], "--keep applies to bench --scale only"),
        (
            ["--passes", "3", "--scale"],
            "--passes applies to the throughput benchmark (none of "
            "--build/--scale/--device/--packing/--url) and bench --build and bench --device "
            "and bench --packing only",
        ),
    ],
)
def test_bench_packing_refuses_other_benchmarks_options(capsys, args, message):
    assert main(["bench", *args]) == 1 and message in capsys.readouterr().err


def test_bench_help_names_the_packing_benchmark(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = capsys.readouterr().out
    assert "grainpack bench --packing --json packing.json" in text
    assert "--packing: alternating rounds" in " ".join(text.split())
