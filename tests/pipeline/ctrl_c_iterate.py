"""A training loop over two Grain workers that gets a terminal's Ctrl-C (SIGINT to its whole
process group) at one moment: ``python ctrl_c_iterate.py CORPUS MOMENT OUT [KIND]``.

KIND is ``dataset`` (the default: ``make_dataset``'s iterator) or ``loader``
(``gp.pipeline.make_data_loader``'s ``grain.DataLoader``).

MOMENT is ``start`` (the first worker to start sends it while it imports this script, as a
spawned worker does before any grainpack code runs), ``first`` (right after the first batch),
``steady`` (after 30 batches) or ``close`` (while the iterator closes). Each worker appends
its pid to ``OUT.pids``; ``OUT.sent`` holds the ``time.monotonic()`` of the Ctrl-C. The loop
prints ``interrupted`` and the seconds since the Ctrl-C from its ``except KeyboardInterrupt``
block. Run it in a session of its own.
"""

import os
import signal
import sys
import threading
import time


def ctrl_c(out: str) -> None:
    """Sends the one Ctrl-C of the run (the first caller does), and records when."""
    try:
        fd = os.open(out + ".sent", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, repr(time.monotonic()).encode())
    os.close(fd)
    os.killpg(0, signal.SIGINT)  # the whole process group, as a terminal sends it


if __name__ == "__mp_main__":  # a Grain worker starting up
    corpus, moment, out = sys.argv[1:4]
    with open(out + ".pids", "a") as pids:
        pids.write(f"{os.getpid()}\n")
    if moment == "start":
        ctrl_c(out)
        time.sleep(1)  # still starting when the signal arrives

if __name__ == "__main__":
    import grainpack as gp

    corpus, moment, out = sys.argv[1:4]
    kind = sys.argv[4] if len(sys.argv) > 4 else "dataset"
    config = gp.PipelineConfig(sources={"c": corpus}, block=16, global_batch_size=8)
    make = gp.make_dataset if kind == "dataset" else gp.pipeline.make_data_loader
    try:
        it = iter(make(config, process_index=0, process_count=1, worker_count=2))
        next(it)
        if moment == "first":
            ctrl_c(out)
        for _ in range(30):
            next(it)
        if moment == "steady":
            ctrl_c(out)
        if moment == "close":
            threading.Timer(0.01, ctrl_c, (out,)).start()
        it.close()
        time.sleep(20)  # a Ctrl-C not raised yet is raised here
        print("no KeyboardInterrupt", flush=True)
    except KeyboardInterrupt:
        with open(out + ".sent") as sent:
            print(f"interrupted {time.monotonic() - float(sent.read()):.1f} s after it", flush=True)
