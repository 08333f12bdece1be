# Over 400 lines, one module: the command's parser, one small handler per subcommand; the
# benchmarks live apart.
"""The ``grainpack`` command: build, merge, inspect, verify, show-step, bench and demo.

Exit codes: 0 success, 1 the data or the request is bad (the message says what and how to
fix it), 2 the command line is malformed.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import re
import shutil
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
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
  grainpack bench --scale --directory /data/tmp --json scale.json""",
    "demo": "example:\n  grainpack demo --steps 500",
}


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Examples kept as written; every option with a default says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default not in (None, False, [], argparse.SUPPRESS) and "default" not in text:
            text += " (default: %(default)s)"
        return text


def _parser() -> argparse.ArgumentParser:
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
    p.add_argument("-o", "--output", required=True, help="corpus directory to write")
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
    p.add_argument("-o", "--output", required=True, help="corpus directory to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing corpus")

    corpus_path = (
        "a corpus: a native corpus directory, a flat-shard directory with index.json, or a "
        "Megatron PREFIX (PREFIX.bin + PREFIX.idx)"
    )
    eos_help = "flat-shard layout: a document ends after each of these tokens"
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
        "--processes", type=_positive, default=1, help="show which process holds each row"
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
        "--passes", type=_positive, help="timed passes per figure (default 5; --build: 2)"
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

    p = command("demo", "write the embedded two-language corpus and stream batches from it")
    p.add_argument("--steps", type=_positive, default=2000, help="batches to stream")
    p.add_argument(
        "--directory", help="where to write the demo corpus (default: $GRAINPACK_CACHE/demo)"
    )
    return parser


def _version() -> str:
    from importlib.metadata import version

    return version("grainpack")


def _pairs(items: Sequence[str], what: str, cast: Any = str) -> dict[str, Any]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"{what} must look like NAME=VALUE; got {item!r}")
        if name in out:
            raise ValueError(f"{what} names {name!r} twice ({item!r}); give each name once")
        try:
            out[name] = cast(value)
        except ValueError:
            raise ValueError(f"{what} {item!r}: {value!r} is not a number") from None
    return out


# show-step flags and the PipelineConfig fields they set
CONFIG_FLAGS = {
    "sources": "--source",
    "weights": "--weight",
    "block": "--block",
    "global_batch_size": "--batch-size",
    "seed": "--seed",
    "unit": "--unit",
    "boundary_id": "--boundary-id",
    "pad_id": "--pad-id",
}


def _config(args: argparse.Namespace) -> Any:
    import dataclasses

    from grainpack.pipeline.config import PipelineConfig

    fields: dict[str, Any] = {}
    if args.config:
        try:
            fields = json.loads(Path(args.config).read_bytes())
        except OSError as err:
            raise ValueError(f"--config {args.config}: cannot read it ({err.strerror})") from None
        except RecursionError:
            raise ValueError(f"{args.config}: JSON nested too deeply to be a config") from None
        except ValueError as err:
            raise ValueError(f"{args.config}: not a JSON config ({err})") from None
        known = {f.name for f in dataclasses.fields(PipelineConfig)}
        if not isinstance(fields, dict):
            raise ValueError(
                f"--config {args.config}: expected a JSON object of PipelineConfig fields "
                f"({', '.join(sorted(known))}), got a {type(fields).__name__}"
            )
        unknown = sorted(set(fields) - known)
        if unknown:
            meant = [m for u in unknown for m in difflib.get_close_matches(u, known, n=1)]
            hint = f" (did you mean {', '.join(map(repr, meant))}?)" if meant else ""
            raise ValueError(
                f"--config {args.config}: unknown PipelineConfig fields {unknown}{hint}; the "
                f"fields are {', '.join(sorted(known))}"
            )
    order = fields.get("order")
    if isinstance(order, dict):  # as BlockedOrder.description() writes it
        from grainpack.index.blocked import BlockedOrder

        spec = {k: v for k, v in order.items() if k != "kind"}
        if order.get("kind", "blocked") != "blocked" or set(spec) - {"block_docs", "window_blocks"}:
            raise ValueError(
                f'--config {args.config}: "order" must be "exact" or {{"block_docs": C, '
                f'"window_blocks": K}} (a BlockedOrder); got {order}'
            )
        fields["order"] = BlockedOrder(**spec)
    if args.source:
        fields["sources"] = _pairs(args.source, "--source")
    if args.weight and args.stage:
        raise ValueError("give either --weight (fixed weights) or --stage (a schedule)")
    if args.weight:
        fields["weights"] = _pairs(args.weight, "--weight", float)
    if args.stage:
        fields["weights"] = [_stage(text) for text in args.stage]
    for key in ("block", "global_batch_size", "seed", "unit", "boundary_id", "pad_id"):
        if getattr(args, key) is not None:
            fields[key] = getattr(args, key)
    missing = [
        CONFIG_FLAGS[k] for k in ("sources", "block", "global_batch_size") if k not in fields
    ]
    if missing:
        raise ValueError(
            f"show-step needs {', '.join(missing)} (or a --config FILE that sets them)"
        )
    fields.pop("layout", None)  # rows are shown from the full layout's arrays
    fields["provenance"] = True  # a training config's own value does not change the tokens
    return PipelineConfig(**fields)


def _stage(text: str) -> tuple[int, dict[str, float], int]:
    """``STEP[+RAMP]:NAME=P,NAME=P`` -> ``(start, {name: p}, ramp)``."""
    when, _, weights = text.partition(":")
    start, _, ramp = when.partition("+")
    try:
        for what, number in (("STEP", start), ("RAMP", ramp or "0")):
            if not number.strip().isdigit():
                raise ValueError(f"{what} {number!r} is not a whole number")
        return int(start), _pairs(weights.split(","), "--stage weights", float), int(ramp or 0)
    except ValueError as err:
        raise ValueError(
            f"--stage must look like STEP[+RAMP]:NAME=P,NAME=P (e.g. 5000+100:en=0.5,fr=0.5); "
            f"got {text!r} ({err})"
        ) from None


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


def _table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    cells = [[str(c) for c in header], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _token_files(inputs: list[Path]) -> list[Path]:
    """A folder that is not a corpus stands for its ``.npy`` or ``.jsonl(.gz)`` files."""
    files = []
    for p in inputs:
        corpus = any((p / name).exists() for name in ("manifest.json", "index.json"))
        if not p.is_dir() or corpus:
            files.append(p)
            continue
        found = sorted(f for f in p.iterdir() if f.name.endswith((".npy", ".jsonl", ".jsonl.gz")))
        files.extend(found or [p])
    return files


TEXT_SUFFIXES = (".txt", ".txt.gz", ".txt.zst", ".parquet", ".jsonl.zst")
TEXT_ONLY = ("tiktoken_pattern", "lines", "eos", "workers", "ray", "ray_address")


def _build(args: argparse.Namespace) -> None:
    args.output = os.path.abspath(args.output)  # "." has no name to put files beside
    output = Path(args.output)
    if args.shuffle is None:
        _build_input(args)
        return
    from grainpack.corpus.errors import CorpusExistsError
    from grainpack.ingest.transaction import check_target, write_lock
    from grainpack.ingest.writer import shuffle_corpus

    check_target(output, overwrite=args.overwrite)  # before tokenizing
    staged = output.with_name(f".{output.name}.unshuffled")
    try:  # held by the whole command: one --shuffle build of OUT uses its staged corpus
        lock = write_lock(_key_file(staged))
    except CorpusExistsError as err:
        holder = re.search(r"\(process .*\)", str(err))  # (process N holds the lock)
        raise CorpusExistsError(
            f"another `grainpack build --shuffle` of {output} is in progress "
            f"{holder.group() if holder else ''}; wait for it to finish"
        ) from None
    try:  # build into a staging corpus, then copy it shuffled
        args.output = str(staged)
        _build_input(args)
        try:
            src = shuffle_corpus(
                staged,
                output,
                seed=args.shuffle,
                shard_tokens=args.shard_tokens,
                overwrite=args.overwrite,
                verify=False,  # written (and its input verified) by this command
            )
        except KeyboardInterrupt:  # the tokenized corpus stays: the same command shuffles it
            raise
        except BaseException:
            _drop_staged(staged)
            raise
        _drop_staged(staged)
    finally:
        lock.release()
    print(f"stored in the random order of seed {args.shuffle}: {output} ({len(src):,} documents)")


def _build_input(args: argparse.Namespace) -> None:
    """Builds ``args.output`` from the inputs: text with ``--tokenizer``, else token ids."""
    if args.tokenizer is not None:
        try:
            _build_text(args)
        except ImportError as err:  # an optional extra is missing: the message says which
            raise ValueError(str(err)) from err
        return
    given = [f"--{k.replace('_', '-')}" for k in TEXT_ONLY if getattr(args, k) not in (None, False)]
    if given:
        raise ValueError(f"{', '.join(given)} need --tokenizer (they apply to text inputs)")
    if args.shuffle is not None:  # what a text build tokenized before is replaced
        _key_file(Path(args.output)).unlink(missing_ok=True)
    _build_ids(args)


def _tokenized_before(staged: Path, key: str) -> bool:
    """Whether ``staged`` holds what an interrupted ``--shuffle`` build with plan ``key``
    tokenized: the key file beside it names the plan and the corpus it wrote."""
    from grainpack.corpus.formats import open_corpus

    try:
        recorded = json.loads(_key_file(staged).read_text())
        return recorded == {"plan": key, "fingerprint": open_corpus(staged).fingerprint}
    except (OSError, ValueError):
        return False


def _drop_staged(staged: Path) -> None:
    shutil.rmtree(staged, ignore_errors=True)
    _key_file(staged).unlink(missing_ok=True)


def _key_file(staged: Path) -> Path:
    """Beside a --shuffle build's tokenized corpus: the build plan it is from, and its
    fingerprint."""
    return staged.with_name(f"{staged.name}.key")


def _built(args: argparse.Namespace) -> str:
    """How a build names what it wrote (with --shuffle: a staging copy, shuffled next)."""
    if args.shuffle is None:
        return f"wrote {args.output}"
    return f"{'tokenized' if args.tokenizer else 'converted'}, to shuffle next"


def _build_text(args: argparse.Namespace) -> None:
    from grainpack.ingest.build import build_corpus, plan_build
    from grainpack.ingest.distributed import build_corpus_ray
    from grainpack.ingest.tokenizers import load_tokenizer

    if args.eos_id is not None or args.vocab_size is not None:
        raise ValueError(
            "with --tokenizer the vocabulary comes from the tokenizer: drop --vocab-size, and "
            "use --eos ID|TOKEN (appended to every document) instead of --eos-id"
        )
    options = {"pattern": args.tiktoken_pattern} if args.tiktoken_pattern else {}
    try:
        tokenizer = load_tokenizer(args.tokenizer, **options)
    except TypeError:
        if not options:
            raise
        raise ValueError(  # another kind's constructor has no pattern
            f"--tiktoken-pattern applies to tiktoken tokenizers; {args.tokenizer} is not one"
        ) from None
    kwargs = dict(
        tokenizer=tokenizer,
        field=args.field or "text",
        lines=args.lines,
        eos=args.eos,
        dtype=args.dtype,
        part_bytes=args.part_bytes,
        shard_tokens=args.shard_tokens,
        overwrite=args.overwrite or args.shuffle is not None,
        progress=_bars(),
    )
    key, key_file = None, _key_file(Path(args.output))
    if args.shuffle is not None:  # tokenized by an interrupted run of this command?
        planned = {k: v for k, v in kwargs.items() if k not in ("overwrite", "progress")}
        key = plan_build(args.inputs, **planned).key  # type: ignore[arg-type]
        if _tokenized_before(Path(args.output), key):
            print("tokenized before (by an interrupted run of this command); shuffling")
            return
        key_file.unlink(missing_ok=True)
    if args.ray:
        src = build_corpus_ray(args.inputs, args.output, address=args.ray_address, **kwargs)
    else:
        src = build_corpus(args.inputs, args.output, workers=args.workers, **kwargs)
    if key is not None:
        try:
            key_file.write_text(json.dumps({"plan": key, "fingerprint": src.fingerprint}))
        except OSError as err:  # a full disk: the copy could not be resumed, so it goes too
            from grainpack.corpus.errors import os_error

            _drop_staged(Path(args.output))
            raise os_error(err, "writing", key_file) from err
    print(
        f"{_built(args)}: {src.num_documents:,} documents, {src.num_tokens:,} tokens, "
        f"{src.dtype}, {len(src.shards)} shard(s), tokenizer {tokenizer!r}"
    )


def _merge(args: argparse.Namespace) -> None:
    from grainpack.ingest.merge import merge_corpora

    src = merge_corpora(args.parts, args.output, overwrite=args.overwrite)
    print(
        f"wrote {args.output}: {src.num_documents:,} documents, {src.num_tokens:,} tokens in "
        f"{len(src.shards)} shard(s) hard-linked from {len(args.parts)} corpora"
    )


def _build_ids(args: argparse.Namespace) -> None:
    from grainpack.ingest import convert

    inputs = _token_files([Path(p) for p in args.inputs])
    output = Path(args.output)
    options = dict(
        vocab_size=args.vocab_size,
        eos_id=args.eos_id,
        shard_tokens=args.shard_tokens,
        overwrite=args.overwrite or args.shuffle is not None,
        progress=_bars(),
    )
    if all(p.suffix == ".npy" for p in inputs):
        src = convert.convert_npy(inputs, output, dtype=args.dtype, **options)
    elif all(p.name.endswith((".jsonl", ".jsonl.gz")) for p in inputs):
        src = convert.convert_jsonl(
            inputs,
            output,
            field=args.field or "input_ids",
            dtype=args.dtype,
            **options,
        )
    elif len(inputs) == 1 and not inputs[0].name.endswith(TEXT_SUFFIXES):
        src = convert.convert_corpus(inputs[0], output, dtype=args.dtype, **options)
    else:
        raise ValueError(
            "inputs must be .npy files, .jsonl(.gz) files, or one Megatron prefix / flat-shard "
            f"directory; got {args.inputs} (text needs --tokenizer)"
        )
    if args.eos_id is not None and (kept := [str(p) for p in inputs if not _splits(p)]):
        warnings.warn(
            f"--eos-id splits only 1-D .npy streams and flat-shard shards: the documents of "
            f"{', '.join(kept)} are kept as they are; {args.eos_id} is recorded as the corpus's "
            "eos_id",
            UserWarning,
            stacklevel=2,
        )
    print(
        f"{_built(args)}: {src.num_documents:,} documents, {src.num_tokens:,} tokens, {src.dtype}"
    )


def _splits(path: Path) -> bool:
    """Whether ``--eos-id`` splits the ids input ``path`` into documents."""
    if path.suffix != ".npy":
        return (path / "index.json").is_file()  # a flat-shard directory
    import numpy as np

    try:
        return np.load(path, mmap_mode="r").ndim == 1
    except (OSError, ValueError):  # read by the conversion already; not a plain array
        return True


def _warn_unsplit(args: argparse.Namespace) -> None:
    """``--eos-id`` splits only a flat-shard directory; of another corpus that records none
    it is only recorded."""
    from grainpack.corpus.formats import open_corpus

    if (
        args.eos_id is not None
        and not _splits(Path(args.path))
        and open_corpus(args.path).eos_id is None  # else the same id: opening checked it
    ):
        warnings.warn(
            f"--eos-id splits only flat-shard directories (index.json): the documents of "
            f"{args.path} are as stored, and {args.eos_id} is only taken as its eos_id",
            UserWarning,
            stacklevel=2,
        )


def _inspect(args: argparse.Namespace) -> None:
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


def _verify(args: argparse.Namespace) -> None:
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


def _show_step(args: argparse.Namespace) -> None:
    from grainpack.pipeline.accounting import mixture_accounting
    from grainpack.pipeline.batches import PipelineBatches

    config = _config(args)
    if config.global_batch_size % args.processes:
        raise ValueError(
            f"--batch-size {config.global_batch_size} is not divisible by --processes "
            f"{args.processes}: every process holds the same number of rows; choose a batch "
            "size that is a multiple of the process count"
        )
    tokens = config.global_batch_size * (config.block + 1)
    if tokens > SHOW_STEP_TOKENS:
        raise ValueError(
            f"--batch-size {config.global_batch_size} x (--block {config.block} + 1) is "
            f"{tokens:,} tokens, more than show-step lays out ({SHOW_STEP_TOKENS:,}; about "
            "60 bytes a token): show a smaller batch"
        )
    batches = PipelineBatches(config)
    batch = batches.batch(args.step, 0)
    names = list(config.sources)
    rows = []
    for r in range(len(batch["inputs"])):
        docs = batch["segment_document"][r]
        offs = batch["segment_offset"][r]
        segments = [(int(d), int(o)) for d, o in zip(docs, offs) if d >= 0]
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
    weights = dict(zip(names, config.probabilities_at(args.step)))
    if args.json:
        print(
            json.dumps(
                {
                    "weights": weights,
                    "rows": [
                        {
                            **dict(zip(("slot", "process", "source", "epoch", "real_targets"), r)),
                            "segments": [{"document": d, "offset": o} for d, o in r[5]],
                        }
                        for r in rows
                    ],
                    "mixture": {
                        k: {**vars(a), "epochs": a.epochs, "real_share": _number(a.real_share)}
                        for k, a in accounts.items()
                    },
                },
                indent=2,
            )
        )
        return
    print(f"global step {args.step}: {len(rows)} rows of {config.block + 1} tokens")
    print("weights: " + " ".join(f"{k}={p:.4f}" for k, p in weights.items()) + _stage_note(config))
    shown = [(*r[:5], ", ".join(f"doc {d}@{o}" for d, o in r[5])) for r in rows]
    print(_table(shown, ("slot", "process", "source", "epoch", "real", "segments (doc@offset)")))
    print(f"\nmixture before step {args.step} (target: mean weight so far):")
    print(
        _table(
            [
                (
                    a.name,
                    f"{a.target_share:.4f}",
                    f"{a.realized_share:.4f}",
                    f"{a.rows:,}",
                    f"{a.real_tokens:,}",
                    "-" if math.isnan(a.real_share) else f"{a.real_share:.4f}",
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


# The most tokens show-step lays out (full layout and provenance: about 4 GB)
SHOW_STEP_TOKENS = 1 << 26


def _stage_note(config: Any) -> str:
    """`` (schedule: stage, stage, ...)`` for a schedule, empty for fixed weights."""
    from grainpack.index.schedule import MixtureSchedule

    schedule = config.schedule
    if config.constant_probabilities is not None:
        return ""
    if not isinstance(schedule, MixtureSchedule):
        return f" (online: {schedule!r})"
    stages = [
        f"from {s.start}"
        + (f" ramp {s.ramp}" if s.ramp else "")
        + ": "
        + "/".join(f"{p:g}" for p in s.weights)
        for s in schedule.stages
    ]
    return " (schedule " + "; ".join(stages) + ")"


# Library messages name keyword arguments; the command line has flags for them.
_FLAGS = (
    (re.compile(r"\boverwrite=True\b"), "--overwrite"),
    (re.compile(r"\bfield=<name>"), "--field NAME"),
    (re.compile(r"\buse dtype='(uint16|uint32)'"), r"use --dtype \1"),
    (re.compile(r"\bdrop vocab_size\b"), "drop --vocab-size"),
    (re.compile(r"pass the name of the text field"), "pass the text field with --field NAME"),
    (re.compile(r"pass the text column as field\b"), "pass the text column with --field NAME"),
    (re.compile(r"pass pattern= \(--tiktoken-pattern\)"), "pass --tiktoken-pattern"),
)


def _in_flags(message: str, flags: Mapping[str, str] | None = None) -> str:
    """An error message with the keyword arguments it suggests spelled as flags, and the
    names with an underscore among ``flags`` (the command's argparse dest -> flag) spelled
    as their flags.

    Example:
      >>> _in_flags("corpus/ already holds a corpus; pass overwrite=True to replace it")
      'corpus/ already holds a corpus; pass --overwrite to replace it'
      >>> _in_flags("got vocab_size=70001; drop vocab_size", {"vocab_size": "--vocab-size"})
      'got --vocab-size 70001; drop --vocab-size'
      >>> _in_flags("no text in field='txt'", {"field": "--field"})
      "no text in --field 'txt'"
    """
    for pattern, flag in _FLAGS:
        message = pattern.sub(flag, message)
    if flags and "weight" in flags:  # given as --weight NAME=P
        message = re.sub(r"\bweights\[('[^']*')\]", r"--weight \1", message)
    for name, flag in (flags or {}).items():
        message = re.sub(rf"(?<![-\w.]){name}=", f"{flag} ", message)
        if "_" in name:  # plain words (seed, field, output) stay words
            message = re.sub(rf"(?<![-\w]){name}\b", flag, message)
    return message


def _command_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The subcommand ``name``'s own parser."""
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _flags_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """The long flag of each option given on the command line, by argparse dest (the same
    names in a manifest or a --config file stay names)."""
    return {
        a.dest: max(a.option_strings, key=len)
        for a in _command_parser(parser, args.command)._actions
        if a.option_strings and getattr(args, a.dest, a.default) != a.default
    }


def _kept(args: argparse.Namespace) -> str:
    """What an interrupted command left to resume from (a build's complete parts)."""
    if args.command != "build" or args.tokenizer is None:
        return ""
    from grainpack.ingest.build import parts_folder

    staged = Path(args.output)
    if args.shuffle is not None and _key_file(staged).is_file():
        return (
            f"; the tokenized corpus is kept in {staged}: the same command shuffles it without "
            "tokenizing again (delete it to drop it)"
        )
    parts = parts_folder(args.output)
    done = len(list(parts.glob("part-*/manifest.json"))) if parts.is_dir() else 0
    if not done:
        return ""
    return (
        f"; {done} complete part(s) are kept in {parts}: the same command resumes from them "
        "(delete that folder to drop them)"
    )


def _bars() -> bool:
    """Progress bars on a terminal only: in a log they are carriage-return noise."""
    return sys.stderr.isatty()


def _number(x: float) -> float | None:
    """JSON has no NaN: ``None`` stands for an undefined figure."""
    return None if math.isnan(x) else x


# bench options and the modes they apply to (None: the throughput benchmark)
BENCH_OPTIONS = {
    "tokens": (None,),
    "quick": (None,),
    "passes": (None, "build"),
    "megabytes": ("build",),
    "documents": ("scale",),
    "boundary_documents": ("scale",),
    "quality_documents": ("scale",),
    "keep": ("scale",),
}


def _bench(args: argparse.Namespace) -> None:
    if args.build and args.scale:
        raise ValueError("give --build or --scale, not both (they are separate benchmarks)")
    mode = "build" if args.build else "scale" if args.scale else None
    defaults = vars(_parser().parse_args(["bench"]))
    for dest, modes in BENCH_OPTIONS.items():
        if mode not in modes and getattr(args, dest) != defaults[dest]:
            where = " and ".join(
                f"bench --{m}" if m else "the throughput benchmark (no --build/--scale)"
                for m in modes
            )
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
    if args.build:
        from grainpack.cli.bench_build import run_build_benchmark

        run_build_benchmark(
            megabytes=args.megabytes,
            directory=args.directory,
            passes=args.passes or 2,
            json_path=args.json,
        )
        return
    if args.scale:
        from grainpack.cli.scale import run_scale_benchmarks

        run_scale_benchmarks(
            documents=args.documents,
            boundary_documents=args.boundary_documents,
            quality_documents=args.quality_documents,
            directory=args.directory,
            keep=args.keep,
            json_path=args.json,
        )
        return
    from grainpack.cli.bench import run_benchmarks

    run_benchmarks(
        tokens=args.tokens,
        directory=args.directory,
        passes=args.passes or 5,
        quick=args.quick,
        json_path=args.json,
    )


def _demo(args: argparse.Namespace) -> None:
    from grainpack.demo import run_demo

    run_demo(directory=args.directory, steps=args.steps)


COMMANDS = {
    "build": _build,
    "merge": _merge,
    "inspect": _inspect,
    "verify": _verify,
    "show-step": _show_step,
    "bench": _bench,
    "demo": _demo,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``grainpack`` console script; returns the exit code."""
    parser = _parser()
    first = next(iter(sys.argv[1:] if argv is None else argv), "")
    if first.startswith("-") and not any(
        o.startswith(first) for o in ("-h", "--help", "--version")
    ):
        parser.error(f"unrecognized arguments: {first} (options follow the command)")
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the command's own usage, and the option meant
        command = _command_parser(parser, args.command)
        flags = [f for a in command._actions for f in a.option_strings if f.startswith("--")]
        typo = next((u.split("=")[0] for u in unknown if u.startswith("--")), "")
        close = difflib.get_close_matches(typo, flags, n=1) if typo else []
        hint = f" (did you mean {close[0]}?)" if close else ""
        command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    formatwarning = warnings.formatwarning  # warnings as messages, not source lines
    warnings.formatwarning = lambda message, *_, **__: (
        f"grainpack {args.command}: warning: {_in_flags(str(message))}\n"
    )
    try:
        COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print(f"\ngrainpack {args.command}: interrupted{_kept(args)}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader (| head) stopped reading: no traceback, no message
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (ValueError, TypeError, IndexError, OSError) as error:
        message = _in_flags(str(error), _flags_of(parser, args))
        print(f"grainpack {args.command}: error: {message}", file=sys.stderr)
        return 1
    finally:
        warnings.formatwarning = formatwarning
    return 0


if __name__ == "__main__":
    sys.exit(main())
