"""``grainpack build`` whose first worker, still starting, sends Ctrl-C to the process group.

A spawned worker imports this script (as ``__mp_main__``) before it runs any grainpack code,
so the signal arrives while the workers start, as a terminal's Ctrl-C can. Run it in a
session of its own: ``python ctrl_c_build.py build ... -o OUT``.
"""

import os
import signal
import sys
import time

from grainpack.cli.main import main

if __name__ == "__mp_main__":  # a build worker starting up
    try:
        os.close(os.open(sys.argv[-1] + ".ctrl-c", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        pass  # one Ctrl-C
    else:
        os.killpg(0, signal.SIGINT)  # the whole process group, as a terminal sends it
        time.sleep(1)  # still starting when the signal arrives

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
