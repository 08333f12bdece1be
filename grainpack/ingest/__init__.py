"""The write side: corpora written as transactions, converters, text readers, tokenizers,
building from text (in processes or on Ray), merging, shuffling. Imports the ``text`` and
``ray`` extras' libraries lazily, and nothing else in the package does.

Exported: ``write_corpus`` and ``CorpusWriter`` (token documents -> a native corpus),
``shuffle_corpus``, ``merge_corpora`` (hard links, no copies), ``convert_corpus``,
``convert_jsonl`` and ``convert_npy`` (other formats -> native), ``convert_inputs`` (files
of token ids of any kind -> one corpus: ``grainpack build`` without a tokenizer),
``build_corpus`` (text -> tokens -> corpus, in worker processes) and ``build_corpus_ray``
(the same on a Ray cluster), ``Tokenizer`` and ``load_tokenizer`` (Hugging Face,
SentencePiece, tiktoken or bytes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grainpack.lazy import exports

# name -> its module, loaded on first use (tests/test_layers.py checks the imports below).
_EXPORTS = {
    "CorpusWriter": "grainpack.ingest.writer",
    "Tokenizer": "grainpack.ingest.tokenizers",
    "build_corpus": "grainpack.ingest.build",
    "build_corpus_ray": "grainpack.ingest.distributed",
    "convert_corpus": "grainpack.ingest.convert",
    "convert_inputs": "grainpack.ingest.convert",
    "convert_jsonl": "grainpack.ingest.convert",
    "convert_npy": "grainpack.ingest.convert",
    "load_tokenizer": "grainpack.ingest.tokenizers",
    "merge_corpora": "grainpack.ingest.merge",
    "shuffle_corpus": "grainpack.ingest.writer",
    "write_corpus": "grainpack.ingest.writer",
}

if TYPE_CHECKING:
    from grainpack.ingest.build import build_corpus as build_corpus
    from grainpack.ingest.convert import convert_corpus as convert_corpus
    from grainpack.ingest.convert import convert_inputs as convert_inputs
    from grainpack.ingest.convert import convert_jsonl as convert_jsonl
    from grainpack.ingest.convert import convert_npy as convert_npy
    from grainpack.ingest.distributed import build_corpus_ray as build_corpus_ray
    from grainpack.ingest.merge import merge_corpora as merge_corpora
    from grainpack.ingest.tokenizers import Tokenizer as Tokenizer
    from grainpack.ingest.tokenizers import load_tokenizer as load_tokenizer
    from grainpack.ingest.writer import CorpusWriter as CorpusWriter
    from grainpack.ingest.writer import shuffle_corpus as shuffle_corpus
    from grainpack.ingest.writer import write_corpus as write_corpus

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = exports(__name__, _EXPORTS)
