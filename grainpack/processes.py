"""Helpers for the child processes that the pipeline (Grain workers) and the build start."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from multiprocessing import resource_tracker

__all__ = [
    "exit_with_parent",
    "importing_main_in_a_child",
    "interrupts_deferred",
    "starting_children",
]


def importing_main_in_a_child() -> bool:
    """Whether this is a spawned child still running the parent's main script."""
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def exit_with_parent() -> None:
    """In a child process: exit once the process that started it is gone (killed, even by
    SIGKILL), instead of living on as an orphan that holds its memory and, in a build, the
    lock of the part it writes (the next build of the same output would meet it). A daemon
    thread waits on the parent's sentinel, which is ready once the parent has exited (even
    before this runs). The child also ignores SIGINT: a terminal's Ctrl-C reaches the whole
    process group, and the parent stops its children itself (an interrupted child would
    print its own traceback, and leave shared memory behind). Does nothing in a main
    process."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        parent.join()
        os._exit(1)

    threading.Thread(target=watch, name="grainpack-orphan-watch", daemon=True).start()


@contextlib.contextmanager
def starting_children() -> Iterator[None]:
    """Processes and threads started in the body begin with SIGINT blocked (they inherit
    the signal mask of the thread that starts them, and a process keeps it across exec),
    so a terminal's Ctrl-C during a child's start-up (the spawn bootstrap imports the main
    script, before :func:`exit_with_parent` ignores SIGINT) prints no traceback of theirs.
    This thread gets a Ctrl-C of that time when the body ends (CPython starts its resource
    tracker so). That tracker is started first: starting it unblocks SIGINT in the
    starting thread, whatever was blocked before (Python 3.11), which would open the body;
    and with a Ctrl-C held back meanwhile: CPython's ``ensure_running`` is not safe to
    interrupt (a ``KeyboardInterrupt`` between closing a dead tracker's pipe and forgetting
    it leaves a closed descriptor that every later use of the tracker fails on, EBADF).
    """
    with interrupts_deferred():
        resource_tracker.ensure_running()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def interrupts_deferred(*, once: bool = False) -> Iterator[None]:
    """Holds back a Ctrl-C (SIGINT) received in the body until the body ends, where it
    raises as usual (``KeyboardInterrupt``), so that it cannot fall between taking a
    resource (a lock's file descriptor) and registering its release. Python handles signals
    in the main thread only: elsewhere, or where SIGINT is not handled by a Python
    function (ignored, the default action), this does nothing.

    Args:
      once: hold back the first Ctrl-C only: a second one raises at once (standing for
        both), for a body that may wait long, such as stopping processes.

    Example:
        >>> previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        >>> try:
        ...     with interrupts_deferred():
        ...         signal.raise_signal(signal.SIGINT)  # a Ctrl-C
        ...         print("the body ends")
        ... except KeyboardInterrupt:
        ...     print("then it is interrupted")
        ... finally:
        ...     _ = signal.signal(signal.SIGINT, previous)
        the body ends
        then it is interrupted
    """
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler) or threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []  # not the frame: it would keep the body's objects alive

    def hold(signum: int, frame: object) -> None:
        if once and received:
            received.clear()  # this one stands for both
            signal.signal(signal.SIGINT, handler)
            handler(signum, frame)
        else:
            received.append(signum)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)
        if received:
            handler(received[0], None)
