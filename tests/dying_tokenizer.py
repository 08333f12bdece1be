"""Byte tokenizers for build tests, in a module of their own so that spawned build workers
can import them. Their ids and identity are the byte tokenizer's, so a rerun with
``tokenizer="bytes"`` resumes a build they started."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

from grainpack.ingest.tokenizers import ByteTokenizer


class DyingOnce(ByteTokenizer):
    """A worker dies on the text ``DIE`` (SIGKILL, as the OOM killer does), once: the first
    worker to meet it creates ``marker`` and kills itself."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker

    def encode_batch(self, texts):
        worker = multiprocessing.parent_process() is not None
        if worker and "DIE" in texts and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().encode_batch(texts)


class SlowOn(ByteTokenizer):
    """A worker takes ``seconds`` for a batch holding the text ``SLOW``, after creating the
    file ``<folder>/<its pid>``."""

    def __init__(self, seconds: float, folder: str) -> None:
        super().__init__()
        self.seconds, self.folder = seconds, folder

    def encode_batch(self, texts):
        if multiprocessing.parent_process() is not None and "SLOW" in texts:
            open(os.path.join(self.folder, str(os.getpid())), "w").close()
            time.sleep(self.seconds)
        return super().encode_batch(texts)


class LibraryError(Exception):
    """An exception a tokenizer library might define: it does not unpickle (two arguments)."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"error {code}: {detail}")


class FailingOn(ByteTokenizer):
    """Raises :class:`LibraryError` on the text ``FAIL``."""

    def encode_batch(self, texts):
        if "FAIL" in texts:
            raise LibraryError(7, "cannot encode this text")
        return super().encode_batch(texts)


# What a Rust panic in a PyO3 tokenizer raises: a BaseException of a module no one imports.
PanicException = type("PanicException", (BaseException,), {"__module__": "pyo3_runtime"})


class PanickingOn(ByteTokenizer):
    """Raises ``PanicException`` on the text ``FAIL``."""

    def encode_batch(self, texts):
        if "FAIL" in texts:
            raise PanicException("called `Option::unwrap()` on a `None` value")
        return super().encode_batch(texts)


class DyingAlways(ByteTokenizer):
    """A process dies (SIGKILL) on every batch holding the text ``DIE``, after creating a new
    file in ``folder`` (one per attempt)."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.folder = folder

    def encode_batch(self, texts):
        if "DIE" in texts:
            open(os.path.join(self.folder, str(time.monotonic_ns())), "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().encode_batch(texts)
