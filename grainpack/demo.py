"""The embedded demo corpus: real text from Python itself, byte-level tokens, two scripts.

``en`` holds docstrings of standard-library modules as UTF-8 bytes (token id = byte value).
``el`` is the same text with Latin letters replaced by Greek ones, whose UTF-8 encoding
takes two bytes per letter: the same content costs about 1.7 times the tokens, which is
exactly the situation content-mode mixing exists for. No download, no tokenizer.
"""

from __future__ import annotations

import importlib
import inspect
import os
import time
import warnings
from pathlib import Path

import numpy as np

from grainpack.corpus.cache import cache_root
from grainpack.corpus.formats import open_corpus
from grainpack.index.checks import check_int
from grainpack.ingest.writer import CorpusWriter
from grainpack.pipeline import fast
from grainpack.pipeline.accounting import mixture_accounting
from grainpack.pipeline.config import PipelineConfig
from grainpack.pipeline.dataset import make_dataset

BOUNDARY_ID = 256  # one past the byte values: the end-of-document token
VOCAB_SIZE = 257
_MODULES = (
    "argparse", "asyncio", "collections", "csv", "dataclasses", "datetime", "decimal",
    "email", "enum", "fractions", "functools", "heapq", "http", "inspect", "itertools",
    "json", "logging", "os", "pathlib", "pickle", "random", "re", "sqlite3", "statistics",
    "string", "subprocess", "textwrap", "threading", "typing", "unittest", "urllib", "uuid",
)  # fmt: skip
_GREEK = str.maketrans(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "αβψδεφγηιξκλμνοπθρστυωςχυζΑΒΨΔΕΦΓΗΙΞΚΛΜΝΟΠΘΡΣΤΥΩΣΧΥΖ",
)


def documents(script: str = "en") -> list[str]:
    """Docstrings of standard-library modules and their public members, one per document.

    Args:
      script: ``"en"`` (as written) or ``"el"`` (Latin letters mapped to Greek).

    Example:
      >>> docs = documents("el")
      >>> len(docs) > 100 and all(isinstance(d, str) for d in docs)
      True
    """
    if script not in ("en", "el"):
        raise ValueError(f"script must be 'en' or 'el'; got {script!r}")
    out = []
    with warnings.catch_warnings():  # some members are deprecated aliases (typing.re)
        warnings.simplefilter("ignore", DeprecationWarning)
        for name in _MODULES:
            module = importlib.import_module(name)
            for obj in [module, *(v for _, v in sorted(vars(module).items()))]:
                doc = inspect.getdoc(obj) if not isinstance(obj, str | int | float) else None
                if doc and len(doc) >= 40 and (obj is module or _defined_in(obj, module)):
                    out.append(doc)
    return [d.translate(_GREEK) for d in out] if script == "el" else out


def _defined_in(obj: object, module: object) -> bool:
    return getattr(obj, "__module__", None) == getattr(module, "__name__", "")


def encode(text: str) -> np.ndarray:
    """Byte-level tokenizer: UTF-8 bytes as token ids (0..255)."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16)


def decode(tokens: np.ndarray) -> str:
    """Inverse of :func:`encode`; ids >= 256 (boundaries, padding) become ``"¶"``."""
    out = bytearray()
    for t in np.asarray(tokens).tolist():
        out.extend(b"\xc2\xb6" if t >= 256 else bytes([t]))
    return out.decode("utf-8", errors="ignore")  # a cut multi-byte character is dropped


def write_demo_corpus(directory: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Writes (once) the two demo corpora and returns ``{"en": path, "el": path}``."""
    root = Path(directory) if directory is not None else cache_root() / "demo"
    paths = {}
    for script in ("en", "el"):
        path = root / script
        if not (path / "manifest.json").exists():
            with CorpusWriter(path, dtype="uint16", vocab_size=VOCAB_SIZE, overwrite=True) as w:
                for doc in documents(script):
                    w.add(encode(doc))
        paths[script] = str(path)
    return paths


def run_demo(
    *,
    directory: str | os.PathLike[str] | None = None,
    steps: int = 2000,
    block: int = 512,
    batch_size: int = 8,
    seed: int = 0,
) -> dict[str, float]:
    """Streams ``steps`` batches of the content-matched en/el mix and reports what it saw.

    The rate is the steady state: batches 2 to ``steps``. The start-up (opening the corpora,
    loading numba's compiled kernels with the ``fast`` extra, the first batch) is timed
    apart: numba's 0.6 s once per process would otherwise hide that its kernels are faster.

    Returns:
      ``{"tokens_per_second": ..., "startup_seconds": ..., "kernels": "numba" | "numpy"}``;
      the rate is NaN when ``steps`` is 1 (no batch after the first).
    """
    steps = check_int("steps", steps, minimum=1)
    paths = write_demo_corpus(directory)
    sizes = {k: open_corpus(p).num_tokens for k, p in paths.items()}
    premium = sizes["el"] / sizes["en"]
    config = PipelineConfig(
        sources=paths,
        block=block,
        global_batch_size=batch_size,
        seed=seed,
        premiums={"en": 1.0, "el": premium},  # the same text takes more tokens in Greek
        boundary_id=BOUNDARY_ID,
        provenance=True,  # which source every row came from (tokens are unchanged)
    )
    start = time.perf_counter()
    with iter(make_dataset(config, process_index=0, process_count=1)) as iterator:
        first = next(iterator)  # start-up: the epoch's plan, numba's kernels, batch 0
        started = time.perf_counter()
        for _ in range(steps - 1):
            next(iterator)
        seconds = time.perf_counter() - started
    startup = started - start
    rate = (steps - 1) * batch_size * block / seconds if steps > 1 else float("nan")
    kernels = "numba" if fast.kernels() is not None else "numpy"
    corpora = ", ".join(f"{k}={v:,} tokens" for k, v in sizes.items())
    print(f"corpora at {Path(paths['en']).parent}: {corpora}")
    batches = f"{steps:,} batch{'es' if steps != 1 else ''} of {batch_size} rows x {block} tokens"
    if steps > 1:
        print(f"streamed {batches}: {rate:,.0f} tokens/s in steady state (batches 2-{steps:,})")
    else:
        print(f"streamed {batches}: no steady-state figure (pass --steps 2 or more)")
    how = "numba's kernels loaded" if kernels == "numba" else "numpy: no fast extra (numba)"
    print(f"start-up {startup:.2f} s, timed apart (the epoch's plan, the first batch; {how})")
    print(
        f"the same texts in Greek letters take {premium:.2f}x the tokens of the English ones,\n"
        "so content mode gives Greek that many times the English share of tokens:"
    )
    accounts = mixture_accounting(config, steps).values()
    wide = max(7, *(len(f"{a.rows:,}") for a in accounts))  # many --steps: wider columns
    print(
        f"{'source':>8} {'target':>8} {'realized':>9} {'rows':>{wide}} {'epochs':>{wide}} "
        f"{'real':>7}"
    )
    for a in accounts:
        print(
            f"{a.name:>8} {a.target_share:8.3f} {a.realized_share:9.3f} {a.rows:{wide},} "
            f"{a.epochs:{wide}.2f} {a.real_share:7.4f}"
        )
    print(
        "  target: share of rows the mix aims at; realized: share taken so far;\n"
        "  epochs: passes over the source; real: share of its tokens that are not padding"
    )
    english = int(np.flatnonzero(first["source"] == 0)[0]) if (first["source"] == 0).any() else 0
    row, segments = first["inputs"][english], first["segment_ids"][english]
    name = list(paths)[int(first["source"][english])]
    print(f"row {english} of step 0 ({name}) holds {segments.max()} document segments; it starts:")
    print("   ", repr(decode(row[:100])))
    print("next: examples/train_loop.py trains a tiny JAX model on these batches and resumes it")
    return {"tokens_per_second": rate, "startup_seconds": startup, "kernels": kernels}
