"""One handler per subcommand: checks what only the command line can get wrong, calls the
library once, and prints what it returned."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from grainpack.cli.parser import pairs, stage, weight

# build options that apply to text (with --tokenizer) only, by argparse dest
TEXT_ONLY = {
    "pattern": "--tiktoken-pattern",
    "lines": "--lines",
    "eos": "--eos",
    "workers": "--workers",
    "ray": "--ray",
    "ray_address": "--ray-address",
}


def build(args: argparse.Namespace) -> None:
    """Text with ``--tokenizer``, else token ids."""
    output = _output(args.output)
    common = dict(
        dtype=args.dtype,
        shard_tokens=args.shard_tokens,
        overwrite=args.overwrite,
        progress=_bars(),
        shuffle=args.shuffle,
    )
    order = "" if args.shuffle is None else f"; stored in the random order of seed {args.shuffle}"
    if args.tokenizer is None:
        from grainpack.ingest.convert import convert_inputs

        given = [flag for k, flag in TEXT_ONLY.items() if getattr(args, k) not in (None, False)]
        if given:
            verb, they = ("need", "they apply") if len(given) > 1 else ("needs", "it applies")
            raise ValueError(f"{', '.join(given)} {verb} --tokenizer ({they} to text inputs)")
        field = {} if args.field is None else {"field": args.field}
        src = convert_inputs(
            args.inputs, output, vocab_size=args.vocab_size, eos_id=args.eos_id, **field, **common
        )
        print(
            f"wrote {output}: {src.num_documents:,} documents, {src.num_tokens:,} tokens, "
            f"{src.dtype}{order}"
        )
        return
    fixes = []  # only the flags given (--eos-id 0 is given)
    if args.vocab_size is not None:
        fixes.append("the vocabulary comes from the tokenizer: drop --vocab-size")
    if args.eos_id is not None:
        fixes.append("use --eos ID|TOKEN (appended to every document) instead of --eos-id")
    if fixes:
        raise ValueError(f"with --tokenizer {'; '.join(fixes)}")
    from grainpack.ingest.build import build_corpus
    from grainpack.ingest.distributed import build_corpus_ray
    from grainpack.ingest.tokenizers import load_tokenizer

    text = dict(field=args.field or "text", lines=args.lines, eos=args.eos)
    text.update(part_bytes=args.part_bytes, **common)
    try:
        tokenizer = load_tokenizer(
            args.tokenizer, **({"pattern": args.pattern} if args.pattern else {})
        )
        with _notes():
            if args.ray:
                src = build_corpus_ray(
                    args.inputs, output, tokenizer=tokenizer, address=args.ray_address, **text
                )
            else:
                src = build_corpus(
                    args.inputs, output, tokenizer=tokenizer, workers=args.workers, **text
                )
    except ImportError as err:  # an optional extra is missing: the message says which
        raise ValueError(str(err)) from err
    print(
        f"wrote {output}: {src.num_documents:,} documents, {src.num_tokens:,} tokens, "
        f"{src.dtype}, {len(src.shards)} shard(s), tokenizer {tokenizer!r}{order}"
    )


def _output(path: str) -> str:
    """A local output made absolute ("." has no name to put files beside); a bucket's URL
    (staged locally, then uploaded) as it is."""
    from grainpack.corpus.urls import output_url

    return output_url(path, "grainpack build") or os.path.abspath(path)


@contextlib.contextmanager
def _notes() -> Iterator[None]:
    """The build's notes (``INFO`` of ``grainpack.ingest``: a resumed shuffle) printed."""
    logger, handler = logging.getLogger("grainpack.ingest"), logging.StreamHandler(sys.stdout)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def kept(args: argparse.Namespace) -> str:
    """What an interrupted command left to resume from (a text build's complete parts, or
    its tokenized corpus before the shuffle)."""
    if args.command != "build" or args.tokenizer is None:
        return ""
    from grainpack.corpus.urls import output_url
    from grainpack.ingest.build import parts_folder
    from grainpack.ingest.shuffled import key_file, staged_path
    from grainpack.ingest.upload import staging_root

    url = output_url(args.output, "grainpack build")
    built = staging_root(url) / "corpus" if url else Path(os.path.abspath(args.output))
    if args.shuffle is not None:
        built = staged_path(built)
        if key_file(built).is_file():
            return (
                f"; the tokenized corpus is kept in {built}: the same command shuffles it "
                "without tokenizing again (delete it to drop it)"
            )
    parts = parts_folder(built)
    done = len(list(parts.glob("part-*/manifest.json"))) if parts.is_dir() else 0
    if not done:
        return ""
    return (
        f"; {done} complete part(s) are kept in {parts}: the same command resumes from them "
        "(delete that folder to drop them)"
    )


def merge(args: argparse.Namespace) -> None:
    from grainpack.corpus.urls import is_url
    from grainpack.ingest.merge import merge_corpora

    src = merge_corpora(args.parts, args.output, overwrite=args.overwrite)
    how = "uploaded" if is_url(args.output) else "hard-linked"
    print(
        f"wrote {args.output}: {src.num_documents:,} documents, {src.num_tokens:,} tokens in "
        f"{len(src.shards)} shard(s) {how} from {len(args.parts)} corpora"
    )


def inspect(args: argparse.Namespace) -> None:
    from grainpack.corpus.formats import open_corpus
    from grainpack.corpus.verify import describe_corpus

    stats = describe_corpus(open_corpus(args.path, eos_id=args.eos_id), progress=_bars())
    _warn_unsplit(args)
    if args.json:
        print(json.dumps(stats, indent=2))
        return
    for key, value in stats.items():
        if isinstance(value, dict):
            value = "  ".join(
                f"{k}={v:,.6g}" if type(v) in (int, float) else f"{k}={v}" for k, v in value.items()
            )
        elif isinstance(value, int):
            value = f"{value:,}"
        print(f"{key:>24}  {value}")
    vocab, high = stats.get("vocab_size"), stats.get("max_token_id")
    if vocab is not None and high is not None and high >= vocab:
        print(
            f"{'WARNING':>24}  max_token_id {high:,} >= vocab_size {vocab:,}: ids outside the "
            "vocabulary (a corrupt file?); run grainpack verify"
        )


def verify(args: argparse.Namespace) -> None:
    from grainpack.corpus.verify import verify_corpus

    report = verify_corpus(args.path, eos_id=args.eos_id, progress=_bars())
    _warn_unsplit(args)
    print(
        f"OK {report.path} ({report.kind}): {report.num_documents:,} documents, "
        f"{report.num_tokens:,} tokens in {report.num_shards} shard(s), {report.dtype}"
    )
    for check in report.checks:
        mark = "-" if "skipped" in check else "!" if check.startswith("note:") else "✓"
        print(f"  {mark} {check}")


def _warn_unsplit(args: argparse.Namespace) -> None:
    """``--eos-id`` splits only a flat-shard directory; of another corpus that records none
    it is only recorded."""
    from grainpack.corpus.formats import open_corpus
    from grainpack.ingest.convert import splits_at_eos

    if (
        args.eos_id is not None
        and not splits_at_eos(args.path)
        and open_corpus(args.path).eos_id is None  # else the same id: opening checked it
    ):
        warnings.warn(
            f"--eos-id splits only flat-shard directories (index.json): the documents of "
            f"{args.path} are as stored, and {args.eos_id} is only taken as its eos_id",
            UserWarning,
            stacklevel=2,
        )


def show_step(args: argparse.Namespace) -> None:
    from grainpack.pipeline.show import describe_step

    config = _config(args)
    shown = describe_step(config, args.step, process_count=args.process_count)
    if args.json:
        shown.pop("schedule")
        print(json.dumps(shown, indent=2))
        return
    rows = shown["rows"]
    note = f" ({shown['schedule']})" if shown["schedule"] else ""
    print(f"global step {args.step}: {len(rows)} rows of {config.block + 1} tokens")
    print("weights: " + " ".join(f"{k}={p:.4f}" for k, p in shown["weights"].items()) + note)
    table = [
        (
            *(r[k] for k in ("slot", "process", "source", "epoch", "real_targets")),
            ", ".join(f"doc {s['document']}@{s['offset']}" for s in r["segments"]),
        )
        for r in rows
    ]
    print(_table(table, ("slot", "process", "source", "epoch", "real", "segments (doc@offset)")))
    print(f"\nmixture before step {args.step} (target: mean weight so far):")
    header = ("source", "target", "realized", "rows", "real tokens", "real share", "epochs")
    mixture = [
        (
            name,
            f"{a['target_share']:.4f}",
            f"{a['realized_share']:.4f}",
            f"{a['rows']:,}",
            f"{a['real_tokens']:,}",
            "-" if a["real_share"] is None else f"{a['real_share']:.4f}",
            f"{a['epochs']:.4f}",
            a["repeats"],
        )
        for name, a in shown["mixture"].items()
    ]
    print(_table(mixture, (*header, "repeats")))


# show-step's flags of the PipelineConfig fields a config needs
NEEDED = {"sources": "--source", "block": "--block", "global_batch_size": "--batch-size"}


def _config(args: argparse.Namespace) -> Any:
    """The PipelineConfig of ``--config FILE`` (JSON fields) with the flags' fields over it."""
    from grainpack.pipeline.config import PipelineConfig

    fields: Any = {}
    if args.config:
        try:
            fields = json.loads(Path(args.config).read_bytes())
        except OSError as err:
            raise ValueError(f"--config {args.config}: cannot read it ({err.strerror})") from None
        except RecursionError:
            raise ValueError(f"{args.config}: JSON nested too deeply to be a config") from None
        except ValueError as err:
            raise ValueError(f"{args.config}: not a JSON config ({err})") from None
        if not isinstance(fields, dict):
            raise ValueError(
                f"--config {args.config}: expected a JSON object of PipelineConfig fields, got "
                f"a {type(fields).__name__}"
            )
    if args.source:
        fields["sources"] = pairs(args.source, "--source")
    if args.weight and args.stage:
        raise ValueError("give either --weight (fixed weights) or --stage (a schedule)")
    if args.weight:
        fields["weights"] = pairs(args.weight, "--weight", weight)
        for name, p in fields["weights"].items():  # as the config says, in flags
            if not p > 0:
                raise ValueError(f"--weight {name!r} must be > 0; got {p} (drop a source instead)")
    if args.stage:
        fields["weights"] = [stage(text) for text in args.stage]
    for key in ("block", "global_batch_size", "seed", "unit", "boundary_id", "pad_id"):
        if getattr(args, key) is not None:
            fields[key] = getattr(args, key)
    missing = [flag for field, flag in NEEDED.items() if field not in fields]
    if missing and not args.config:  # a config file's fields are checked as the file's
        raise ValueError(
            f"show-step needs {', '.join(missing)} (or a --config FILE that sets them)"
        )
    try:
        config = PipelineConfig.from_dict(fields)
    except (TypeError, ValueError) as err:
        if not args.config:
            raise
        raise ValueError(f"--config {args.config}: {err}") from None  # a JSON value's type too
    return config


def _table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    cells = [[str(c) for c in header], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _bars() -> bool:
    """Progress bars on a terminal only: in a log they are carriage-return noise."""
    return sys.stderr.isatty()


BENCHMARKS = ("build", "scale", "device", "packing", "url")  # each a flag of its own
# bench options and the modes they apply to (None: the throughput benchmark)
BENCH_OPTIONS = {
    "tokens": (None, "device", "url"),
    "quick": (None, "device", "packing"),
    "passes": (None, "build", "device", "packing"),
    "megabytes": ("build",),
    "documents": ("scale",),
    "boundary_documents": ("scale",),
    "quality_documents": ("scale",),
    "keep": ("scale",),
}


def bench(args: argparse.Namespace) -> None:
    from grainpack.cli.parser import parser

    given = [m for m in BENCHMARKS if getattr(args, m)]
    if len(given) > 1:
        others = ", ".join(f"--{m}" for m in given[:-1])
        raise ValueError(
            f"--{given[-1]} is a benchmark of its own: give it without the others ({others})"
        )
    mode = given[0] if given else None
    defaults = vars(parser().parse_args(["bench"]))
    for dest, modes in BENCH_OPTIONS.items():
        if mode not in modes and getattr(args, dest) != defaults[dest]:
            throughput = f"the throughput benchmark (none of --{'/--'.join(BENCHMARKS)})"
            where = " and ".join(f"bench --{m}" if m else throughput for m in modes)
            raise ValueError(f"--{dest.replace('_', '-')} applies to {where} only")
    if args.scale and (args.documents < 1 or args.boundary_documents < 1):
        raise ValueError("--documents and --boundary-documents must be >= 1")
    if args.scale and args.directory is not None and not Path(args.directory).is_dir():
        raise ValueError(f"--directory {args.directory}: no such directory; create it first")
    json_file = None if args.json is None else Path(args.json)
    if json_file is not None and (
        json_file.is_dir() or not os.access(json_file.parent, os.W_OK | os.X_OK)
    ):
        raise ValueError(  # found now, not after the whole run
            f"--json {args.json}: cannot write that file (a folder, or in a folder missing or "
            "not writable); give a file path in an existing folder"
        )
    common = dict(directory=args.directory, json_path=args.json)
    if args.build:
        from grainpack.bench import build

        build.run_build_benchmark(megabytes=args.megabytes, passes=args.passes or 2, **common)
    elif args.scale:
        from grainpack.bench import scale

        scale.run_scale_benchmarks(
            documents=args.documents,
            boundary_documents=args.boundary_documents,
            quality_documents=args.quality_documents,
            keep=args.keep,
            **common,
        )
    elif args.url:
        from grainpack.bench import remote

        remote.run_remote_benchmark(args.url, tokens=args.tokens, **common)
    elif args.packing:
        from grainpack.bench import packing

        packing.run_packing_benchmark(quick=args.quick, rounds=args.passes or 5, **common)
    elif args.device:
        from grainpack.bench import device

        device.run_device_benchmark(
            tokens=args.tokens, passes=args.passes or 5, quick=args.quick, **common
        )
    else:
        from grainpack.bench import throughput

        throughput.run_benchmarks(
            tokens=args.tokens, passes=args.passes or 5, quick=args.quick, **common
        )


def demo(args: argparse.Namespace) -> None:
    from grainpack.demo import run_demo

    run_demo(directory=args.directory, steps=args.steps)
