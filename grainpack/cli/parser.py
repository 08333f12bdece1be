"""The ``grainpack`` command line: subcommands, options, their help and value types."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

EPILOG = {
    "build": """examples:
  grainpack build data/*.jsonl.zst --tokenizer tokenizer.json --eos "</s>" -o corpus/
  grainpack build 'data/**/*.parquet' --tokenizer spm.model --field content -o corpus/
  grainpack build books/ --tokenizer bytes --eos 256 -o corpus/       (.txt: one per file)
  grainpack build data/ --tokenizer cl100k_base.tiktoken --ray -o /shared/corpus/
  (text uses every core; the corpus is the same for any --workers and for --ray)
  grainpack build shards/*.npy -o corpus/ --dtype uint32 --vocab-size 100277
  grainpack build data.jsonl --field input_ids -o corpus/
  grainpack build /data/megatron/text_document -o corpus/     (a Megatron .bin/.idx prefix)
  grainpack build stream.npy -o corpus/ --eos-id 0      (a 1-D stream split after each 0)
  grainpack build flat_dir/ -o corpus/ --eos-id 0       (index.json + raw uint16 shards)""",
    "merge": """example (hard-links the shard files, so PARTS and -o share a file system):
  grainpack merge part-a/ part-b/ -o corpus/""",
    "inspect": "example:\n  grainpack inspect corpus/ --json",
    "verify": "example:\n  grainpack verify corpus/ && echo intact",
    "show-step": """examples:
  grainpack show-step 1200 --source en=corpus/en --source fr=corpus/fr \\
      --weight en=0.7 --weight fr=0.3 --block 2048 --batch-size 256
  grainpack show-step 1200 --config run.json --processes 4
  (run.json: PipelineConfig fields, e.g. {"sources": {"en": "corpus/en"}, "block": 2048,
  "global_batch_size": 256, "order": {"block_docs": 4096, "window_blocks": 256}})
  grainpack show-step 52000 --source web=corpus/web --source math=corpus/math \\
      --stage 0:web=0.9,math=0.1 --stage 50000+5000:web=0.5,math=0.5 --block 2048 --batch-size 256
  (a schedule: from step 50000 the weights move linearly to the second stage's over 5000
  steps; in a --config file: "weights": [[0, {"web": 0.9, "math": 0.1}], [50000, {...}, 5000]])""",
    "bench": """examples:
  grainpack bench --tokens 20000000 --json bench.json
  grainpack bench --build --megabytes 100     (text -> corpus against the tokenizer alone)
  grainpack bench --scale --directory /data/tmp --json scale.json
  grainpack bench --device --json device.json     (an accelerator host's feed, batch 256)
  grainpack bench --packing --json packing.json   (concat, best_fit and Grain's best fit)
  grainpack bench --url s3://bucket/corpora/web --tokens 2000000000   (a corpus where it lies)""",
    "demo": "example:\n  grainpack demo --steps 500",
}


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Examples kept as written; every option with a default says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default not in (None, False, [], argparse.SUPPRESS) and "default" not in text:
            text += " (default: %(default)s)"
        return text


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grainpack",
        description="Deterministic, resumable, packed and mixed LM batches from token shards.",
    )
    parser.add_argument("--version", action="version", version=f"grainpack {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    fmt = _Formatter

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, help=text, description=text, epilog=EPILOG[name], formatter_class=fmt
        )

    p = command("build", "tokenize text, or convert token data, into the native corpus format")
    p.add_argument(
        "inputs",
        nargs="+",
        help="with --tokenizer: .jsonl(.gz/.zst), .parquet, .txt(.gz/.zst) files, directories "
        "or globs; else: .npy files (a 1-D array is a document, a 2-D array a document per "
        "row), .jsonl(.gz) files of ids, a Megatron prefix or a flat-shard directory with "
        "index.json",
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        help="corpus directory (or s3://, gs://, az:// URL) to write",
    )
    p.add_argument(
        "--dtype",
        choices=["uint16", "uint32"],
        default=None,
        help="token dtype (default: uint16, or uint32 when the vocabulary (a tokenizer's, or "
        "--vocab-size) needs it; for corpora: the input's)",
    )
    p.add_argument(
        "--vocab-size",
        type=_positive,
        default=None,
        help="tokenizer vocabulary; ids must be below it (default: not recorded)",
    )
    p.add_argument(
        "--eos-id",
        type=_non_negative,
        default=None,
        help="ids only: split 1-D .npy streams and flat-shard shards into documents after "
        "this token; recorded in the manifest",
    )
    p.add_argument(
        "--field",
        default=None,
        help="JSON field / Parquet column: the text (default text) or the ids (input_ids)",
    )
    p.add_argument(
        "--shard-tokens", type=_positive, default=1 << 28, help="tokens per shard file at most"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing corpus")
    p.add_argument(
        "--shuffle",
        type=_seed,
        metavar="SEED",
        help="store documents in the random order of SEED (recorded in the manifest)",
    )
    text = p.add_argument_group("text inputs")
    text.add_argument(
        "--tokenizer",
        metavar="SPEC",
        help="bytes, a tokenizer.json, a SentencePiece .model, a .tiktoken ranks file, or "
        "KIND:PATH (huggingface, sentencepiece, tiktoken)",
    )
    text.add_argument(
        "--tiktoken-pattern",
        dest="pattern",
        help="split regex or encoding name for tiktoken (default: the pattern of a published "
        "encoding's file, recognised by its sha256, else cl100k_base)",
    )
    text.add_argument("--lines", action="store_true", help=".txt: one document per line")
    text.add_argument(
        "--eos",
        metavar="ID|TOKEN",
        help="append this end-of-document id or token to each (default: none; then set "
        "boundary_id in the PipelineConfig to separate packed documents)",
    )
    text.add_argument(
        "--workers", type=_positive, default=None, help="processes (default: all cores)"
    )
    text.add_argument(
        "--part-bytes", type=_positive, help="input bytes per part (default: 1/256 of the input)"
    )
    text.add_argument("--ray", action="store_true", help="build the parts with Ray Data tasks")
    text.add_argument("--ray-address", help="Ray cluster to use (default: RAY_ADDRESS or local)")

    p = command("merge", "combine corpora into one without copying tokens (hard links)")
    p.add_argument("parts", nargs="+", help="native corpus directories, in document order")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        help="corpus directory (or s3://, gs://, az:// URL) to write",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing corpus")

    corpus_path = (
        "a corpus: a native corpus directory, a flat-shard directory with index.json, or a "
        "Megatron PREFIX (PREFIX.bin + PREFIX.idx)"
    )
    eos_help = "flat-shard format: a document ends after each of these tokens"
    p = command("inspect", "documents, tokens, dtype, length percentiles, max token id")
    p.add_argument("path", help=corpus_path)
    p.add_argument("--eos-id", type=_non_negative, default=None, help=eos_help)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")

    p = command("verify", "check checksums, offsets, file sizes and ids (exit 1 on failure)")
    p.add_argument("path", help=corpus_path)
    p.add_argument("--eos-id", type=_non_negative, default=None, help=eos_help)

    p = command("show-step", "what global step k contained, and the mixture up to it")
    p.add_argument("step", type=_non_negative, help="global step (batch index), from 0")
    p.add_argument("--config", help="JSON file of PipelineConfig fields (flags override it)")
    p.add_argument(
        "--source", action="append", default=[], metavar="NAME=PATH", help="a source; repeat"
    )
    p.add_argument(
        "--weight",
        action="append",
        default=[],
        metavar="NAME=P",
        help="a source's mixture weight; repeat (default: equal weights)",
    )
    p.add_argument(
        "--stage",
        action="append",
        default=[],
        metavar="STEP[+RAMP]:NAME=P,...",
        help="a stage of a weight schedule from global step STEP (ramping over RAMP steps "
        "from the previous stage's weights); repeat, the first at step 0",
    )
    p.add_argument("--block", type=_positive, help="model sequence length (rows: block + 1)")
    p.add_argument(
        "--batch-size",
        type=_positive,
        dest="global_batch_size",
        metavar="B",
        help="rows per global batch",
    )
    p.add_argument("--seed", type=_non_negative, help="the pipeline seed (default 0)")
    p.add_argument("--unit", choices=["documents", "windows"], help="row unit (default documents)")
    p.add_argument(
        "--boundary-id",
        type=_non_negative,
        help="token between documents (default: none, documents follow each other directly)",
    )
    p.add_argument("--pad-id", type=_non_negative, help="padding token (default 0)")
    p.add_argument(
        "--processes",
        type=_positive,
        default=1,
        dest="process_count",
        help="show which process holds each row",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")

    p = command("bench", "measure throughput and index costs against baselines")
    p.add_argument("--tokens", type=_positive, default=200_000_000, help="corpus size in tokens")
    p.add_argument(
        "--directory",
        help="where to write the benchmark corpus, kept for the next run "
        "(default: bench-TOKENS in $GRAINPACK_CACHE, or in ~/.cache/grainpack; 2 bytes a "
        "token)",
    )
    p.add_argument(
        "--passes",
        type=_positive,
        help="timed passes per figure (default 5; --build: 2; --packing: alternating rounds)",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    p.add_argument("--json", help="also write the results to this JSON file")
    p.add_argument(
        "--build", action="store_true", help="benchmark building a corpus from text instead"
    )
    p.add_argument("--megabytes", type=_positive, default=100, help="--build: MB of text")
    p.add_argument(
        "--scale",
        action="store_true",
        help="instead: the blocked order at scale (a sparse corpus of --documents in a "
        "temporary folder under --directory, deleted afterwards unless --keep)",
    )
    p.add_argument("--documents", type=_count, default=10**9, help="--scale: corpus documents")
    p.add_argument(
        "--boundary-documents",
        type=_count,
        default=10**8,
        help="--scale: documents of the corpus whose epoch boundary is timed",
    )
    p.add_argument(
        "--quality-documents",
        type=_count,
        default=10**7,
        help="--scale: documents of the randomness comparison (0: skip it)",
    )
    p.add_argument("--keep", action="store_true", help="--scale: keep the corpora")
    p.add_argument(
        "--device",
        action="store_true",
        help="instead: what this host feeds its accelerator at global batch 256: host only by "
        "workers, to the device with and without prefetch, gp.expand's time, PASS/FAIL "
        "checks (JAX's CPU device does too; --quick: a smoke test)",
    )
    p.add_argument(
        "--packing",
        action="store_true",
        help="instead: concat against best_fit packing and Grain's BestFitPackIterDataset at "
        "blocks 2048 and 8192: cut documents, padding, rows, throughput (its corpus in a "
        "temporary folder under --directory, deleted afterwards; --quick: a smoke test)",
    )

    p.add_argument(
        "--url",
        help="instead: the pipeline on the native corpus at URL (s3://, gs://, az://, "
        "https://, or a path) where it lies: first batch, --tokens streamed, what was fetched",
    )

    p = command("demo", "write the embedded two-language corpus and stream batches from it")
    p.add_argument("--steps", type=_positive, default=2000, help="batches to stream")
    p.add_argument(
        "--directory", help="where to write the demo corpus (default: $GRAINPACK_CACHE/demo)"
    )
    return parser


def _version() -> str:
    from importlib.metadata import version

    return version("grainpack")


def _non_negative(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _seed(text: str) -> int:
    from grainpack.index.checks import check_seed

    try:  # the writer would refuse it too, but only after the work before it
        return check_seed("shuffle", _non_negative(text))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _positive(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _count(text: str) -> int:
    """A whole number of things, also written as a float (``1e9``), >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0 or value != int(value):
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}")
    return int(value)


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def command_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The subcommand ``name``'s own parser."""
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def flags(parser: argparse.ArgumentParser, name: str) -> dict[str, str]:
    """The long flag of each option of the subcommand ``name``, by its argparse dest (the
    library's keyword argument: ``vocab_size`` -> ``--vocab-size``)."""
    return {
        a.dest: max(a.option_strings, key=len)
        for a in command_parser(parser, name)._actions
        if a.option_strings and a.dest != "help"
    }


def pairs(items: Sequence[str], what: str, cast: Any = str) -> dict[str, Any]:
    """``NAME=VALUE`` items (``--source``, ``--weight``) -> ``{name: cast(value)}``."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"{what} must look like NAME=VALUE; got {item!r}")
        if name in out:
            raise ValueError(f"{what} names {name!r} twice ({item!r}); give each name once")
        try:
            out[name] = cast(value)
        except ValueError as err:
            raise ValueError(f"{what} {item!r}: {err}") from None
    return out


def weight(text: str) -> float:
    """A ``--weight`` or ``--stage`` value: a number."""
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None


def stage(text: str) -> tuple[int, dict[str, float], int]:
    """``STEP[+RAMP]:NAME=P,NAME=P`` -> ``(start, {name: p}, ramp)``."""
    when, _, weights = text.partition(":")
    start, _, ramp = when.partition("+")
    try:
        for what, number in (("STEP", start), ("RAMP", ramp or "0")):
            if not number.strip().isdigit():
                raise ValueError(f"{what} {number!r} is not a whole number")
        return int(start), pairs(weights.split(","), "--stage weights", weight), int(ramp or 0)
    except ValueError as err:
        raise ValueError(
            f"--stage must look like STEP[+RAMP]:NAME=P,NAME=P (e.g. 5000+100:en=0.5,fr=0.5); "
            f"got {text!r} ({err})"
        ) from None
