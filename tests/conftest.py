"""Shared test setup.

Grain 0.2.18 reads absl flags inside its worker processes; with jax importable and the flags
unparsed, ``mp_prefetch``/``worker_count>0`` crash (google/grain#1355). Marking them parsed
here is what a training script does with ``absl.app.run``.
"""

import pathlib

import numpy as np
import pytest
from absl import flags

from grainpack.ingest.writer import write_corpus

flags.FLAGS.mark_as_parsed()


@pytest.fixture
def corpus(tmp_path) -> pathlib.Path:
    """A corpus of 40 random documents of 1-29 tokens in shards of about 200 tokens."""
    rng = np.random.default_rng(0)
    docs = [rng.integers(1, 100, size=rng.integers(1, 30)) for _ in range(40)]
    write_corpus(tmp_path / "c", docs, shard_tokens=200)
    return tmp_path / "c"


# -- tiny tokenizers trained from text that ships with Python (nothing is downloaded) -------


def _byte_decoder() -> dict[str, int]:
    """The GPT-2 byte <-> printable character map that byte-level BPE vocabularies use."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars = printable + [256 + n for n in range(256 - len(printable))]
    order = printable + [b for b in range(256) if b not in printable]
    return {chr(c): b for b, c in zip(order, chars)}


@pytest.fixture(scope="session")
def tokenizer_files(tmp_path_factory):
    """``{"huggingface": tokenizer.json, "sentencepiece": .model, "tiktoken": .tiktoken}``.

    A byte-level BPE (vocabulary 400) and a SentencePiece unigram model (300) trained on the
    demo's standard-library docstrings; the tiktoken ranks are the BPE's tokens as bytes.
    """
    import base64

    import sentencepiece as spm
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from grainpack.demo import documents

    root = tmp_path_factory.mktemp("tokenizers")
    texts = documents("en")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer)
    bpe.save(str(root / "tokenizer.json"))

    lines = [line for text in texts for line in text.splitlines() if line.strip()]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(root / "spm"),
        vocab_size=300,
        character_coverage=1.0,
        minloglevel=2,
    )

    decode = _byte_decoder()
    vocab = sorted((i, t) for t, i in bpe.get_vocab().items() if t != "<|endoftext|>")
    ranks = [bytes(decode[c] for c in token) for _, token in vocab]
    (root / "bpe.tiktoken").write_text(
        "".join(f"{base64.b64encode(t).decode()} {rank}\n" for rank, t in enumerate(ranks))
    )
    return {
        "huggingface": root / "tokenizer.json",
        "sentencepiece": root / "spm.model",
        "tiktoken": root / "bpe.tiktoken",
    }
