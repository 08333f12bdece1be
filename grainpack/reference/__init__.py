"""The reference APIs of the two specifications grainpack was built from, bit for bit.

``packing`` and ``streaming``: the document-level pipeline (``pack_documents``,
``PackedCorpus``, ``StreamingCorpus``). ``windows``: the window loader (``PackedStream``,
``MixedStream``). All are exported at the top level; the Grain pipeline computes the same
rows from the same index math.
"""
