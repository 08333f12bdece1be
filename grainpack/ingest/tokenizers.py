"""Tokenizers behind one small interface: byte-level, Hugging Face, SentencePiece, tiktoken.

Each is loaded from a local file (nothing is downloaded) and is picklable: the pickle holds
the file path and the options, and the model is loaded on first use in each process, once
(:func:`load_tokenizer` parses a spec such as ``"bytes"`` or ``"tokenizer.json"``).
``encode_batch`` gives exactly the ids of the library's own ``encode`` of each text;
``identity`` (kind, file name, the file's sha256, options) is what a corpus records.
The libraries are optional extras (``pip install "grainpack[text]"``), imported lazily.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from grainpack.index.options import OptionError

__all__ = [
    "ByteTokenizer",
    "HuggingFaceTokenizer",
    "SentencePieceTokenizer",
    "TiktokenTokenizer",
    "Tokenizer",
    "load_tokenizer",
]

PathLike = str | os.PathLike[str]
Ids = Sequence[int] | np.ndarray

_R50K = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
_CL100K = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"""
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"""
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
# tiktoken's published encodings: (split pattern, special tokens), found by the file's sha256.
TIKTOKEN_PATTERNS = {
    "r50k_base": _R50K,
    "p50k_base": _R50K,  # p50k_base splits as r50k_base (tiktoken_ext.openai_public)
    "cl100k_base": _CL100K,
    "o200k_base": _O200K,
}
# Text a split pattern must cover: tiktoken silently drops what no match covers.
_PATTERN_PROBE = "Hello, world! 123 4567\n\tIt's x=1; é ü ß 中文 العربية 🙂  end.\r\n"
_GPT2_SPECIAL = {"<|endoftext|>": 50256}
_TIKTOKEN_FILES = {
    "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930": (
        "r50k_base",
        _GPT2_SPECIAL,
    ),
    "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069": (
        "r50k_base",
        _GPT2_SPECIAL,
    ),
    "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7": (
        "cl100k_base",
        {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
    "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d": (
        "o200k_base",
        {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
}
_MODELS: dict[tuple[str, str, str], Any] = {}  # loaded models of this process


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _need(module: str, what: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(
            f"{what} needs the '{module}' package; install it with: pip install 'grainpack[text]'"
        ) from err


class Tokenizer:
    """The interface: ``vocab_size``, ``encode``, ``encode_batch``, ``token_id``, ``identity``.

    Subclasses load their model in ``_load`` (once per process and file) and say how to
    encode. ``threads`` limits the library's own threads (``None``: the library's default);
    build workers set it to 1 because the worker processes already use every core.
    """

    kind: ClassVar[str]

    def __init__(self, path: PathLike | None, *, threads: int | None = None) -> None:
        self.path = None if path is None else Path(path)
        self.threads = threads
        self.sha256 = ""
        if self.path is not None:
            if not self.path.is_file():
                raise FileNotFoundError(f"{self.path}: no such {self.kind} tokenizer file")
            self.sha256 = _sha256(self.path)

    @property
    def model(self) -> Any:
        """The library's tokenizer object, loaded on first use in this process."""
        key = (self.kind, str(self.path), self.sha256 + repr(self._options()))
        if key not in _MODELS:
            try:
                _MODELS[key] = self._load()
            except (ImportError, OSError):
                raise  # a missing library or file: the message says what to do
            except Exception as err:  # each library raises its own types for a bad file
                raise ValueError(
                    f"{self.path}: could not load it as a {self.kind} tokenizer ({err}); "
                    "check the file and the tokenizer kind"
                ) from err
        return _MODELS[key]

    def _load(self) -> Any:
        raise NotImplementedError

    def _options(self) -> dict[str, Any]:
        return {}

    @property
    def vocab_size(self) -> int:
        """One more than the largest id the tokenizer can produce."""
        raise NotImplementedError

    def encode(self, text: str) -> Ids:
        """The library's own encoding of ``text``."""
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: list[str]) -> list[Ids]:
        """Ids of each text, equal to ``encode`` of each, with the library's batch loop."""
        raise NotImplementedError

    def token_id(self, token: str) -> int:
        """The id of a token string such as ``"<|endoftext|>"``; raises if there is none."""
        raise ValueError(
            f"the {self.kind} tokenizer has no token strings such as {token!r}; give an id "
            f"(its ids are 0..{self.vocab_size - 1}; {self.vocab_size} is the first one past them)"
        )

    def identity(self) -> dict[str, Any]:
        """What a corpus records: kind, file name, sha256, vocabulary size and options."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.path is not None:
            out.update(file=self.path.name, sha256=self.sha256)
        return {**out, "vocab_size": self.vocab_size, **self._options()}

    def with_threads(self, threads: int | None) -> Tokenizer:
        """A copy that lets the library use ``threads`` threads (``None``: its default)."""
        other = copy.copy(self)
        other.threads = threads
        return other

    def __repr__(self) -> str:
        where = "" if self.path is None else f"{str(self.path)!r}, "
        return f"{type(self).__name__}({where}vocab_size={self.vocab_size})"


class ByteTokenizer(Tokenizer):
    """UTF-8 bytes as ids (0..255): no file, no library.

    Example:
        >>> ByteTokenizer().encode_batch(["hé"])[0].tolist()
        [104, 195, 169]
    """

    kind = "bytes"

    def __init__(self, *, threads: int | None = None) -> None:
        super().__init__(None, threads=threads)

    @property
    def vocab_size(self) -> int:
        return 256

    def encode_batch(self, texts: list[str]) -> list[Ids]:
        return [np.frombuffer(t.encode("utf-8"), np.uint8) for t in texts]


class HuggingFaceTokenizer(Tokenizer):
    """A Hugging Face ``tokenizers`` file (``tokenizer.json``); ids of ``Tokenizer.encode``
    with the file's padding and truncation turned off (sentence-transformers files ship both:
    padding to the longest text of a batch, or cutting every document at ``max_length``,
    would change a corpus's documents)."""

    kind = "huggingface"

    def __init__(self, path: PathLike, *, threads: int | None = None) -> None:
        super().__init__(path, threads=threads)
        try:
            settings = json.loads(self.path.read_bytes())
        except ValueError:  # not JSON: loading the model names the bad file
            settings = None
        if not isinstance(settings, dict):
            settings = {}
        # recorded in the identity: a file whose padding or truncation is on encodes
        # otherwise with the library's own settings
        self.turned_off = [key for key in ("padding", "truncation") if settings.get(key)]

    def _options(self) -> dict[str, Any]:
        return {"turned_off": self.turned_off} if self.turned_off else {}

    def _load(self) -> Any:
        tokenizers = _need("tokenizers", "a tokenizer.json")
        model = tokenizers.Tokenizer.from_file(str(self.path))
        model.no_padding()
        model.no_truncation()
        return model

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_vocab_size(with_added_tokens=True))

    def encode_batch(self, texts: list[str]) -> list[Ids]:
        if self.threads == 1:  # read by the library on every call
            os.environ["TOKENIZERS_PARALLELISM"] = "false"
        return [e.ids for e in self.model.encode_batch_fast(texts)]

    def token_id(self, token: str) -> int:
        found = self.model.token_to_id(token)
        if found is None:
            raise ValueError(f"{self.path}: no token {token!r} in the vocabulary")
        return int(found)


class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece model (``.model``); ids of ``SentencePieceProcessor.encode``."""

    kind = "sentencepiece"

    def _load(self) -> Any:
        spm = _need("sentencepiece", "a SentencePiece .model")
        return spm.SentencePieceProcessor(model_file=str(self.path))

    @property
    def vocab_size(self) -> int:
        return int(self.model.vocab_size())

    def encode_batch(self, texts: list[str]) -> list[Ids]:
        return self.model.encode(texts, out_type=int, num_threads=self.threads)

    def token_id(self, token: str) -> int:
        found = int(self.model.piece_to_id(token))
        if self.model.id_to_piece(found) != token:
            raise ValueError(f"{self.path}: no piece {token!r} in the vocabulary")
        return found


class TiktokenTokenizer(Tokenizer):
    """A tiktoken BPE ranks file (``.tiktoken``: base64 token, space, rank per line).

    The split pattern and special tokens of tiktoken's published encodings (``r50k_base``,
    ``p50k_base``, ``cl100k_base``, ``o200k_base``) are found by the file's sha256; other files
    use ``pattern`` (a name of one of those or a regex; default ``"cl100k_base"``) and no
    special tokens. Documents are data: ids are those of ``Encoding.encode_ordinary`` (a
    literal ``"<|endoftext|>"`` in a text is encoded as text, not as the special token).
    """

    kind = "tiktoken"

    def __init__(
        self, path: PathLike, *, pattern: str | None = None, threads: int | None = None
    ) -> None:
        super().__init__(path, threads=threads)
        known, self.special_tokens = _TIKTOKEN_FILES.get(self.sha256, (None, {}))
        if pattern is None and known is None:
            warnings.warn(
                f"{path} is not a published tiktoken encoding (by its sha256): its text is split "
                "with cl100k_base's pattern; pass pattern= (--tiktoken-pattern) to choose",
                stacklevel=2,
            )
        self.pattern = pattern or known or "cl100k_base"
        if re.fullmatch(r"\w+", self.pattern) and self.pattern not in TIKTOKEN_PATTERNS:
            raise ValueError(
                f"unknown tiktoken encoding name {self.pattern!r}: expected one of "
                f"{sorted(TIKTOKEN_PATTERNS)} or a split regex"
            )

    def _options(self) -> dict[str, Any]:
        return {"pattern": self.pattern}

    def _load(self) -> Any:
        tiktoken = _need("tiktoken", "a .tiktoken ranks file")
        ranks = {}
        for line in self.path.read_bytes().splitlines():  # type: ignore[union-attr]
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token, validate=True)] = int(rank)
        if not ranks:
            raise ValueError("no ranks in the file")
        missing = [b for b in range(256) if bytes([b]) not in ranks]
        if missing:  # tiktoken panics on such a byte: every text must be encodable
            raise ValueError(
                f"{len(missing)} of the 256 single bytes have no rank (e.g. "
                f"{bytes(missing[:3])!r}): a BPE ranks file ranks every byte, or text holding "
                "one cannot be encoded"
            )
        encoding = tiktoken.Encoding(
            name=f"grainpack-{self.sha256[:12]}",
            pat_str=TIKTOKEN_PATTERNS.get(self.pattern, self.pattern),
            mergeable_ranks=ranks,
            special_tokens=self.special_tokens,
        )
        if encoding.decode(encoding.encode_ordinary(_PATTERN_PROBE)) != _PATTERN_PROBE:
            raise ValueError(
                f"the split pattern {self.pattern!r} does not cover all text (tiktoken would "
                f"drop what it does not match, e.g. in {_PATTERN_PROBE!r}); give an encoding "
                f"name ({', '.join(sorted(TIKTOKEN_PATTERNS))}) or a regex that matches every "
                "character"
            )
        return encoding

    @property
    def vocab_size(self) -> int:
        return int(self.model.n_vocab)

    def encode_batch(self, texts: list[str]) -> list[Ids]:
        return self.model.encode_ordinary_batch(texts, num_threads=self.threads or 8)

    def encode(self, text: str) -> Ids:
        return self.model.encode_ordinary(text)

    def token_id(self, token: str) -> int:
        if token in self.special_tokens:
            return self.special_tokens[token]
        try:
            return int(self.model.encode_single_token(token.encode("utf-8")))
        except KeyError:
            raise ValueError(f"{self.path}: no token {token!r} in the ranks") from None


_KINDS: dict[str, type[Tokenizer]] = {
    "huggingface": HuggingFaceTokenizer,
    "hf": HuggingFaceTokenizer,
    "sentencepiece": SentencePieceTokenizer,
    "sp": SentencePieceTokenizer,
    "tiktoken": TiktokenTokenizer,
}
_SUFFIXES = {".json": "huggingface", ".model": "sentencepiece", ".tiktoken": "tiktoken"}


def load_tokenizer(spec: str | os.PathLike[str] | Tokenizer, **options: Any) -> Tokenizer:
    """A tokenizer from a spec: ``"bytes"``, a file path, or ``KIND:PATH``.

    Files are recognised by name: ``*.json`` (or a directory holding ``tokenizer.json``) is
    Hugging Face, ``*.model`` SentencePiece, ``*.tiktoken`` tiktoken; ``huggingface:``/``hf:``,
    ``sentencepiece:``/``sp:`` and ``tiktoken:`` prefixes name the kind of any other file.
    ``options`` go to the tokenizer's constructor (``pattern`` for tiktoken).

    Raises:
        FileNotFoundError: The file does not exist.
        ValueError: The spec names no known kind, the file does not load as that kind, or
            ``pattern`` is given for a kind other than tiktoken.
        ImportError: The kind's library is not installed (the message says how to install).

    Example:
        >>> load_tokenizer("bytes")
        ByteTokenizer(vocab_size=256)
    """
    if isinstance(spec, Tokenizer):
        return spec
    text = os.fspath(spec)
    kind, sep, rest = text.partition(":")
    if text in ("bytes", "byte"):
        cls, path = ByteTokenizer, None
    elif sep and kind in _KINDS and rest:
        cls, path = _KINDS[kind], Path(rest)
    else:
        path = Path(text)
        if path.is_dir() and (path / "tokenizer.json").is_file():
            path = path / "tokenizer.json"
        if path.suffix not in _SUFFIXES:
            raise ValueError(
                f"tokenizer {text!r}: expected 'bytes', a tokenizer.json (Hugging Face), a "
                ".model (SentencePiece) or a .tiktoken file, or KIND:PATH with KIND one of "
                f"{sorted(_KINDS)}"
            )
        cls = _KINDS[_SUFFIXES[path.suffix]]
    if options.get("pattern") is not None and cls is not TiktokenTokenizer:
        raise OptionError(
            f"{{pattern}} applies to tiktoken tokenizers; {text} is a {cls.kind} tokenizer",
            pattern=options["pattern"],
        )
    if path is None:
        return cls(**options)
    tokenizer = cls(path, **options)
    tokenizer.model  # noqa: B018  (load now: a bad file fails before anything is written)
    return tokenizer
