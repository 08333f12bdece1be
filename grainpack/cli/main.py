"""The ``grainpack`` command: build, inspect, verify, show-step, bench and demo.

Exit codes: 0 success, 1 the data or the request is bad (the message says what and how to
fix it), 2 the command line is malformed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EPILOG = {
    "build": """examples:
  grainpack build shards/*.npy -o corpus/ --dtype uint32 --vocab-size 100277
  grainpack build data.jsonl --field input_ids -o corpus/
  grainpack build /data/megatron/text_document -o corpus/     (a Megatron .bin/.idx prefix)
  grainpack build seed_layout_dir/ -o corpus/ --eos-id 0      (index.json + raw uint16)""",
    "inspect": "example:\n  grainpack inspect corpus/ --json",
    "verify": "example:\n  grainpack verify corpus/ && echo intact",
    "show-step": """examples:
  grainpack show-step 1200 --source en=corpus/en --source fr=corpus/fr \\
      --weight en=0.7 --weight fr=0.3 --block 2048 --batch-size 256
  grainpack show-step 1200 --config run.json --processes 4""",
    "bench": "examples:\n  grainpack bench --tokens 20000000 --json bench.json\n"
    "  grainpack bench --scale --directory /data/tmp --json scale.json",
    "demo": "example:\n  grainpack demo --steps 500",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grainpack",
        description="Deterministic, resumable, packed and mixed LM batches from token shards.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    fmt = argparse.RawDescriptionHelpFormatter

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, help=text, description=text, epilog=EPILOG[name], formatter_class=fmt
        )

    p = command("build", "convert token data into the native corpus format")
    p.add_argument(
        "inputs",
        nargs="+",
        help=".npy files, .jsonl(.gz) files, a Megatron prefix or a seed-layout directory",
    )
    p.add_argument("-o", "--output", required=True, help="corpus directory to write")
    p.add_argument(
        "--dtype",
        choices=["uint16", "uint32"],
        default=None,
        help="token dtype (default uint16; for corpora: the input's)",
    )
    p.add_argument("--vocab-size", type=int, default=None)
    p.add_argument(
        "--eos-id",
        type=int,
        default=None,
        help="seed layout: split documents after this token; recorded in the manifest",
    )
    p.add_argument("--field", default="input_ids", help="JSON-lines field with the token ids")
    p.add_argument("--shard-tokens", type=int, default=1 << 28)
    p.add_argument("--overwrite", action="store_true", help="replace an existing corpus")
    p.add_argument(
        "--shuffle",
        type=int,
        metavar="SEED",
        help="store documents in the random order of SEED (recorded in the manifest)",
    )

    p = command("inspect", "documents, tokens, dtype, length percentiles, max token id")
    p.add_argument("path")
    p.add_argument("--eos-id", type=int, default=None)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")

    p = command("verify", "check checksums, offsets, file sizes and ids (exit 1 on failure)")
    p.add_argument("path")
    p.add_argument("--eos-id", type=int, default=None)

    p = command("show-step", "what global step k contained, and the mixture up to it")
    p.add_argument("step", type=int)
    p.add_argument("--config", help="JSON file with PipelineConfig fields")
    p.add_argument("--source", action="append", default=[], metavar="NAME=PATH")
    p.add_argument("--weight", action="append", default=[], metavar="NAME=P")
    p.add_argument("--block", type=int)
    p.add_argument("--batch-size", type=int, dest="global_batch_size")
    p.add_argument("--seed", type=int)
    p.add_argument("--unit", choices=["documents", "windows"])
    p.add_argument("--boundary-id", type=int)
    p.add_argument("--pad-id", type=int)
    p.add_argument("--processes", type=int, default=1, help="show which process holds a row")
    p.add_argument("--json", action="store_true")

    p = command("bench", "measure throughput and index costs against baselines")
    p.add_argument("--tokens", type=int, default=200_000_000, help="corpus size")
    p.add_argument("--directory", help="where to write the corpus (default: cache folder)")
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    p.add_argument("--json", help="also write the results to this JSON file")
    p.add_argument(
        "--scale",
        action="store_true",
        help="instead: the blocked order at scale (a sparse corpus of --documents in a "
        "temporary folder under --directory, deleted afterwards unless --keep)",
    )
    p.add_argument("--documents", type=float, default=1e9, help="--scale: corpus documents")
    p.add_argument(
        "--boundary-documents",
        type=float,
        default=1e8,
        help="--scale: documents of the corpus whose epoch boundary is timed",
    )
    p.add_argument(
        "--quality-documents",
        type=float,
        default=1e7,
        help="--scale: documents of the randomness comparison (0: skip it)",
    )
    p.add_argument("--keep", action="store_true", help="--scale: keep the corpora")

    p = command("demo", "write the embedded two-language corpus and stream batches from it")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--directory", help="where to write the demo corpus (default: cache)")
    return parser


def _pairs(items: Sequence[str], what: str, cast: Any = str) -> dict[str, Any]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"{what} must look like NAME=VALUE; got {item!r}")
        out[name] = cast(value)
    return out


def _config(args: argparse.Namespace) -> Any:
    from grainpack.pipeline.config import PipelineConfig

    fields: dict[str, Any] = {}
    if args.config:
        fields = json.loads(Path(args.config).read_text())
    if args.source:
        fields["sources"] = _pairs(args.source, "--source")
    if args.weight:
        fields["weights"] = _pairs(args.weight, "--weight", float)
    for key in ("block", "global_batch_size", "seed", "unit", "boundary_id", "pad_id"):
        if getattr(args, key) is not None:
            fields[key] = getattr(args, key)
    missing = [k for k in ("sources", "block", "global_batch_size") if k not in fields]
    if missing:
        raise ValueError(f"show-step needs {missing}: give --config FILE or the flags")
    return PipelineConfig(**fields, provenance=True)


def _table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    cells = [[str(c) for c in header], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _build(args: argparse.Namespace) -> None:
    from grainpack.corpus import convert

    inputs = [Path(p) for p in args.inputs]
    output = Path(args.output)
    if args.shuffle is not None:  # convert into a staging directory, then copy shuffled
        output = output.with_name(f".{output.name}.unshuffled")
    options = dict(
        vocab_size=args.vocab_size,
        eos_id=args.eos_id,
        shard_tokens=args.shard_tokens,
        overwrite=args.overwrite or args.shuffle is not None,
        progress=True,
    )
    if all(p.suffix == ".npy" for p in inputs):
        src = convert.convert_npy(inputs, output, dtype=args.dtype or "uint16", **options)
    elif all(p.name.endswith((".jsonl", ".jsonl.gz")) for p in inputs):
        src = convert.convert_jsonl(
            inputs, output, field=args.field, dtype=args.dtype or "uint16", **options
        )
    elif len(inputs) == 1:
        src = convert.convert_corpus(inputs[0], output, dtype=args.dtype, **options)
    else:
        raise ValueError(
            "inputs must be .npy files, .jsonl(.gz) files, or one Megatron prefix / seed-layout "
            f"directory; got {args.inputs}"
        )
    if args.shuffle is not None:
        from grainpack.corpus.writer import shuffle_corpus

        try:
            src = shuffle_corpus(
                output,
                args.output,
                seed=args.shuffle,
                shard_tokens=args.shard_tokens,
                overwrite=args.overwrite,
            )
        finally:
            shutil.rmtree(output)
    print(
        f"wrote {args.output}: {src.num_documents:,} documents, {src.num_tokens:,} tokens, "
        f"{src.dtype}"
    )


def _inspect(args: argparse.Namespace) -> None:
    from grainpack.corpus.formats import open_corpus
    from grainpack.corpus.verify import describe_corpus

    stats = describe_corpus(open_corpus(args.path, eos_id=args.eos_id), progress=True)
    if args.json:
        print(json.dumps(stats, indent=2))
        return
    for key, value in stats.items():
        if isinstance(value, dict):
            value = "  ".join(f"{k}={v:,.6g}" for k, v in value.items())
        elif isinstance(value, int):
            value = f"{value:,}"
        print(f"{key:>24}  {value}")


def _verify(args: argparse.Namespace) -> None:
    from grainpack.corpus.verify import verify_corpus

    report = verify_corpus(args.path, eos_id=args.eos_id, progress=True)
    print(
        f"OK {report.path} ({report.kind}): {report.num_documents:,} documents, "
        f"{report.num_tokens:,} tokens in {report.num_shards} shard(s), {report.dtype}"
    )
    for check in report.checks:
        print(f"  ✓ {check}")


def _show_step(args: argparse.Namespace) -> None:
    from grainpack.pipeline.accounting import mixture_accounting
    from grainpack.pipeline.batches import PipelineBatches

    config = _config(args)
    batches = PipelineBatches(config)
    batch = batches.batch(args.step, 0)
    names = list(config.sources)
    rows = []
    for r in range(len(batch["inputs"])):
        docs = batch["segment_document"][r]
        offs = batch["segment_offset"][r]
        segments = ", ".join(f"doc {d}@{o}" for d, o in zip(docs, offs) if d >= 0)
        rows.append(
            (
                args.step * config.global_batch_size + r,
                r % args.processes,
                names[batch["source"][r]],
                int(batch["epoch"][r]),
                int(batch["loss_mask"][r].sum()),
                segments,
            )
        )
    accounts = mixture_accounting(batches, args.step)
    if args.json:
        print(
            json.dumps(
                {
                    "rows": [
                        dict(
                            zip(
                                ("slot", "process", "source", "epoch", "real_targets", "segments"),
                                r,
                            )
                        )
                        for r in rows
                    ],
                    "mixture": {k: {**vars(a), "epochs": a.epochs} for k, a in accounts.items()},
                },
                indent=2,
            )
        )
        return
    print(f"global step {args.step}: {len(rows)} rows of {config.block + 1} tokens")
    print(_table(rows, ("slot", "process", "source", "epoch", "real", "segments (doc@offset)")))
    print(f"\nmixture before step {args.step}:")
    print(
        _table(
            [
                (
                    a.name,
                    f"{a.target_share:.4f}",
                    f"{a.realized_share:.4f}",
                    f"{a.rows:,}",
                    f"{a.real_tokens:,}",
                    f"{a.real_share:.4f}",
                    f"{a.epochs:.4f}",
                    a.repeats,
                )
                for a in accounts.values()
            ],
            (
                "source",
                "target",
                "realized",
                "rows",
                "real tokens",
                "real share",
                "epochs",
                "repeats",
            ),
        )
    )


def _bench(args: argparse.Namespace) -> None:
    if args.scale:
        from grainpack.cli.scale import run_scale_benchmarks

        run_scale_benchmarks(
            documents=int(args.documents),
            boundary_documents=int(args.boundary_documents),
            quality_documents=int(args.quality_documents),
            directory=args.directory,
            keep=args.keep,
            json_path=args.json,
        )
        return
    from grainpack.cli.bench import run_benchmarks

    run_benchmarks(
        tokens=args.tokens,
        directory=args.directory,
        passes=args.passes,
        quick=args.quick,
        json_path=args.json,
    )


def _demo(args: argparse.Namespace) -> None:
    from grainpack.demo import run_demo

    run_demo(directory=args.directory, steps=args.steps)


COMMANDS = {
    "build": _build,
    "inspect": _inspect,
    "verify": _verify,
    "show-step": _show_step,
    "bench": _bench,
    "demo": _demo,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``grainpack`` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        COMMANDS[args.command](args)
    except (ValueError, TypeError, IndexError, OSError) as error:
        print(f"grainpack {args.command}: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
