"""grainpack.processes: children started with SIGINT blocked, a Ctrl-C held back to the end
of a body (the first only, with ``once``)."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from grainpack.processes import interrupts_deferred

REPO = Path(__file__).parent.parent

STARTING = """
import multiprocessing, signal
from grainpack.processes import starting_children

def blocked():
    return [s.name for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])]

with starting_children():
    multiprocessing.get_context("spawn").Lock()  # the first semaphore: the resource tracker
    print(blocked())
print(blocked())
"""


def test_starting_children_blocks_sigint_even_where_the_resource_tracker_starts():
    # Before: starting the resource tracker (a new process's first semaphore, as Grain's
    # queues are) unblocked SIGINT in the body, so Grain's workers started with it open.
    done = subprocess.run(
        [sys.executable, "-c", STARTING],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=True,
    )
    assert done.stdout == "['SIGINT']\n[]\n"


@pytest.fixture
def ctrl_c():
    """SIGINT raises ``KeyboardInterrupt`` (as in a terminal), restored after the test."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("once", [False, True])
def test_one_ctrl_c_is_raised_when_the_body_ends(ctrl_c, once):
    steps = []
    with pytest.raises(KeyboardInterrupt), interrupts_deferred(once=once):
        signal.raise_signal(signal.SIGINT)
        steps.append("held")
        steps.append("the body ends")
    assert steps == ["held", "the body ends"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize(("once", "expected"), [(False, ["held", "held"]), (True, ["held"])])
def test_with_once_a_second_ctrl_c_raises_at_once(ctrl_c, once, expected):
    steps = []
    with pytest.raises(KeyboardInterrupt) as raised, interrupts_deferred(once=once):
        signal.raise_signal(signal.SIGINT)
        steps.append("held")
        signal.raise_signal(signal.SIGINT)
        steps.append("held")
    assert steps == expected
    assert raised.value.__context__ is None  # one KeyboardInterrupt, not one per Ctrl-C
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
