"""Build benchmark: ``grainpack build`` against the tokenizer alone and a Megatron-style loop.

:func:`run_build_benchmark` writes (once, cached) about ``megabytes`` MB of JSON lines whose
documents are Python's own standard library (every ``.py`` file of it, then its modules'
docstrings, cycled until the size is reached) and a byte-level BPE tokenizer
(``tokenizers``, vocabulary 32,000) trained on the first 20 MB of it. Then, in one run, on
the same text and every core, it measures tokens/s of:

* the limit: the tokenizer's own batch loop (``Tokenizer.encode_batch_fast`` on batches of
  about 1 MiB of text already in memory, the library's threads on every core): tokenizing is
  the work, nothing is read or written;
* ``grainpack build`` (``build_corpus``: read and parse the JSON lines, tokenize in worker
  processes, write parts, merge), end to end;
* Megatron-LM's ``tools/preprocess_data.py`` loop, reimplemented: a ``multiprocessing.Pool``
  whose workers ``json.loads`` a line and encode its text (``imap`` with chunksize 32),
  the main process writing each document with an indexed-dataset builder (``.bin`` +
  ``.idx``, ``MMIDIDX`` version 1). Its output is checked to hold the same documents.
"""

from __future__ import annotations

import datetime
import json
import multiprocessing
import os
import platform
import shutil
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from grainpack.corpus.cache import cache_root
from grainpack.corpus.formats import open_corpus
from grainpack.demo import documents
from grainpack.ingest.build import build_corpus

VOCAB = 32_000
EOS = "<|endoftext|>"
BATCH_CHARS = 1 << 20
TRAIN_BYTES = 20 << 20


def _stdlib_texts() -> list[str]:
    """Every ``.py`` file of the standard library (sorted), then the demo's docstrings."""
    root = Path(os.__file__).parent
    sources = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sources]
    return [t for t in texts if t.strip()] + documents("en")


def bench_text(directory: Path, megabytes: int, vocab_size: int = VOCAB) -> tuple[Path, Path]:
    """The cached ``text.jsonl`` of about ``megabytes`` MB and the trained ``tokenizer.json``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    directory.mkdir(parents=True, exist_ok=True)
    text, vocab = directory / "text.jsonl", directory / "tokenizer.json"
    if not text.exists():
        texts = _stdlib_texts()
        tmp = directory / "text.jsonl.tmp"
        written, k = 0, 0
        with open(tmp, "w", encoding="utf-8") as f:
            while written < megabytes * 10**6:
                line = json.dumps({"text": texts[k % len(texts)], "copy": k // len(texts)})
                f.write(line + "\n")
                written += len(line) + 1
                k += 1
        os.replace(tmp, text)
    if not vocab.exists():
        bpe = Tokenizer(models.BPE())
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        bpe.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=[EOS],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        bpe.train_from_iterator(_head(text, TRAIN_BYTES), trainer)
        bpe.save(str(vocab))
    return text, vocab


def _head(path: Path, limit: int) -> Iterator[str]:
    seen = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            seen += len(line)
            if seen > limit:
                return
            yield json.loads(line)["text"]


# -- (a) the limit -----------------------------------------------------------------------------


def _read_texts(text: Path) -> list[str]:
    with open(text, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def _batches(texts: list[str]) -> list[list[str]]:
    batches, batch, chars = [], [], 0
    for t in texts:
        batch.append(t)
        chars += len(t)
        if chars >= BATCH_CHARS:
            batches.append(batch)
            batch, chars = [], 0
    return [*batches, batch] if batch else batches


def _encode_all(tokenizer: Any, texts: list[str]) -> int:
    """Tokens of ``texts`` (+ 1 eos each) by the library's batch loop, 1 MiB at a time."""
    return sum(
        len(e.ids) + 1 for batch in _batches(texts) for e in tokenizer.encode_batch_fast(batch)
    )


def _limit_worker(text: Path, vocab: Path, share: tuple[int, int], barrier: Any, out: Any) -> None:
    from tokenizers import Tokenizer

    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread: the processes fill the cores
    tokenizer = Tokenizer.from_file(str(vocab))
    texts = _read_texts(text)[share[0] : share[1]]
    barrier.wait()  # every process has its texts in memory: start together
    out.put(_encode_all(tokenizer, texts))


def tokenizer_limit(text: Path, vocab: Path, workers: int) -> dict[str, Any]:
    """Tokenizing alone, texts already in memory, on every core, done the faster of two ways:
    the library's own threads (``encode_batch_fast``, every core), or ``workers`` processes
    each encoding an equal share of the characters with one thread."""
    from tokenizers import Tokenizer

    texts = _read_texts(text)
    os.environ.pop("TOKENIZERS_PARALLELISM", None)  # the library's default: every core
    tokenizer = Tokenizer.from_file(str(vocab))
    start = time.perf_counter()
    tokens = _encode_all(tokenizer, texts)
    threads = time.perf_counter() - start

    ends = np.cumsum([len(t) for t in texts])
    cuts = [0, *np.searchsorted(ends, ends[-1] * np.arange(1, workers) / workers).tolist()]
    shares = list(zip(cuts, [*cuts[1:], len(texts)]))
    context = multiprocessing.get_context("spawn")
    barrier, out = context.Barrier(workers + 1), context.Queue()
    procs = [
        context.Process(target=_limit_worker, args=(text, vocab, share, barrier, out))
        for share in shares
    ]
    for proc in procs:
        proc.start()
    barrier.wait()
    start = time.perf_counter()
    counted = sum(out.get() for _ in procs)
    processes = time.perf_counter() - start
    for proc in procs:
        proc.join()
    if counted != tokens:
        raise RuntimeError(f"the two limit runs disagree: {counted} != {tokens} tokens")
    return {
        "seconds": min(threads, processes),
        "tokens": tokens,
        "documents": len(texts),
        "library_threads_seconds": threads,
        "processes_seconds": processes,
    }


# -- (b) grainpack build -----------------------------------------------------------------------


def grainpack_build(text: Path, vocab: Path, out: Path, workers: int) -> dict[str, float]:
    """``build_corpus`` end to end: read, parse, tokenize in workers, write, merge."""
    start = time.perf_counter()
    src = build_corpus(text, out, tokenizer=vocab, eos=EOS, workers=workers, overwrite=True)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "tokens": src.num_tokens, "documents": len(src)}


# -- (c) Megatron-LM's preprocess_data.py loop, reimplemented ----------------------------------


class _Encoder:
    """``preprocess_data.Encoder``: one tokenizer per worker, ``encode`` per JSON line."""

    tokenizer: Any = None
    eod = 0

    def __init__(self, vocab: str) -> None:
        self.vocab = vocab

    def initializer(self) -> None:
        from tokenizers import Tokenizer

        _Encoder.tokenizer = Tokenizer.from_file(self.vocab)
        _Encoder.eod = _Encoder.tokenizer.token_to_id(EOS)

    def encode(self, json_line: str) -> tuple[dict[str, list], dict[str, list], int]:
        data = json.loads(json_line)
        ids, lens = {}, {}
        doc_ids = _Encoder.tokenizer.encode(data["text"]).ids
        doc_ids.append(_Encoder.eod)  # --append-eod
        ids["text"], lens["text"] = [doc_ids], [len(doc_ids)]
        return ids, lens, len(json_line)


class _IndexedDatasetBuilder:
    """``megatron.core.datasets.indexed_dataset.IndexedDatasetBuilder`` for one modality."""

    def __init__(self, bin_path: str, dtype: type[np.number]) -> None:
        self.data_file = open(bin_path, "wb")  # noqa: SIM115
        self.dtype = dtype
        self.sequence_lengths: list[int] = []
        self.document_indices = [0]

    def add_document(self, tensor: list, lengths: list[int]) -> None:
        np_array = np.array(tensor, dtype=self.dtype)
        self.data_file.write(np_array.tobytes(order="C"))
        self.sequence_lengths.extend(lengths)
        self.document_indices.append(len(self.sequence_lengths))

    def finalize(self, idx_path: str) -> None:
        self.data_file.close()
        lengths = np.array(self.sequence_lengths, dtype=np.int32)
        itemsize = np.dtype(self.dtype).itemsize
        pointers = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1].astype(np.int64) * itemsize, out=pointers[1:])
        with open(idx_path, "wb") as f:
            f.write(b"MMIDIDX\x00\x00")
            f.write(struct.pack("<Q", 1))
            f.write(struct.pack("<B", 8 if self.dtype == np.uint16 else 4))
            f.write(struct.pack("<Q", len(lengths)))
            f.write(struct.pack("<Q", len(self.document_indices)))
            f.write(lengths.tobytes(order="C"))
            f.write(pointers.tobytes(order="C"))
            f.write(np.array(self.document_indices, dtype=np.int64).tobytes(order="C"))


def megatron_preprocess(text: Path, vocab: Path, prefix: Path, workers: int) -> dict[str, float]:
    """``preprocess_data.py --workers N --append-eod`` on one JSON-lines file."""
    start = time.perf_counter()
    encoder = _Encoder(str(vocab))
    tokens = documents = 0
    with open(text, encoding="utf-8") as fin:
        pool = multiprocessing.Pool(workers, initializer=encoder.initializer)
        encoded_docs = pool.imap(encoder.encode, fin, 32)
        builder = _IndexedDatasetBuilder(f"{prefix}.bin", np.uint16)
        for doc, sentence_lens, _ in encoded_docs:
            builder.add_document(doc["text"][0], sentence_lens["text"])
            tokens += sentence_lens["text"][0]
            documents += 1
        builder.finalize(f"{prefix}.idx")
        pool.close()
        pool.join()
    return {"seconds": time.perf_counter() - start, "tokens": tokens, "documents": documents}


# -- the run -----------------------------------------------------------------------------------


def run_build_benchmark(
    *,
    megabytes: int = 100,
    directory: str | os.PathLike[str] | None = None,
    workers: int | None = None,
    vocab_size: int = VOCAB,
    passes: int = 2,
    json_path: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Runs the three builds on the same text and prints tokens/s and ratios to the limit.

    With ``passes > 1`` the three run in turn that many times and each one's fastest pass
    counts (the machine may be shared: the fastest pass is the least disturbed).
    """
    root = Path(directory) if directory is not None else cache_root() / "bench-build"
    workers = workers or os.cpu_count() or 1
    text, vocab = bench_text(root / f"text-{megabytes}mb-{vocab_size}", megabytes, vocab_size)
    with open(text, "rb") as f:  # warm the page cache for every contender
        while f.read(1 << 24):
            pass
    out = root / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    contenders = {
        "limit": lambda: tokenizer_limit(text, vocab, workers),
        "grainpack_build": lambda: grainpack_build(text, vocab, out / "corpus", workers),
        "megatron_loop": lambda: megatron_preprocess(text, vocab, out / "megatron", workers),
    }
    runs: dict[str, dict[str, Any]] = {}
    for _ in range(passes):  # interleaved; each contender's fastest pass counts
        for name, run in contenders.items():
            result = run()
            if name not in runs or result["seconds"] < runs[name]["seconds"]:
                runs[name] = result
    built, megatron = open_corpus(out / "corpus"), open_corpus(out / "megatron")
    same = len(built) == len(megatron) and all(
        np.array_equal(built[i], megatron[i]) for i in range(0, len(built), 97)
    )
    if not same or built.num_tokens != megatron.num_tokens:
        raise RuntimeError("the Megatron-style loop and grainpack build disagree")
    limit = runs["limit"]["tokens"] / runs["limit"]["seconds"]
    for run in runs.values():
        run["tokens_per_s"] = run["tokens"] / run["seconds"]
        run["ratio_to_limit"] = run["tokens_per_s"] / limit
    results = {
        "date": datetime.date.today().isoformat(),
        "machine": {
            "cpu_count": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(),
        },
        "text": {"bytes": text.stat().st_size, "documents": len(built), "vocab_size": vocab_size},
        "workers": workers,
        "passes": passes,
        "runs": runs,
    }
    print(format_build_table(results))
    if json_path is not None:
        Path(json_path).write_text(json.dumps(results, indent=2) + "\n")
    return results


def format_build_table(results: dict[str, Any]) -> str:
    """The results as a Markdown table (tokens/s and ratio to the limit)."""
    names = {
        "limit": "limit: tokenizer batch encode, in memory",
        "grainpack_build": "grainpack build (read, tokenize, write, merge)",
        "megatron_loop": "Megatron-style loop (Pool.imap + indexed writer)",
    }
    text = results["text"]
    lines = [
        f"{text['bytes'] / 1e6:.0f} MB of JSON lines, {text['documents']:,} documents, "
        f"BPE vocabulary {text['vocab_size']:,}, {results['workers']} workers, best of "
        f"{results['passes']} pass(es), {results['date']}",
        "",
        "| build | M tokens/s | x limit | seconds |",
        "|---|---:|---:|---:|",
    ]
    for key, run in results["runs"].items():
        lines.append(
            f"| {names[key]} | {run['tokens_per_s'] / 1e6:.3f} | {run['ratio_to_limit']:.3f} "
            f"| {run['seconds']:.1f} |"
        )
    limit = results["runs"]["limit"]
    lines.append(
        f"\nlimit = the faster of: the library's threads {limit['library_threads_seconds']:.1f} s, "
        f"{results['workers']} one-thread processes {limit['processes_seconds']:.1f} s"
    )
    ratio = results["runs"]["grainpack_build"]["tokens_per_s"]
    ratio /= results["runs"]["megatron_loop"]["tokens_per_s"]
    lines.append(f"grainpack build / Megatron-style loop: {ratio:.2f}x")
    return "\n".join(lines)
