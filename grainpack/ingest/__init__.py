"""The write side: corpora written as transactions, converters, text readers, tokenizers,
building from text (in processes or on Ray), merging, shuffling. Imports the ``text`` and
``ray`` extras' libraries lazily, and nothing else in the package does."""
