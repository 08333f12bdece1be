"""One process of a multi-process JAX job, launched by ``tests/e2e/test_host_agreement.py``.

``--mode build`` builds the pipeline of ``--config`` (process 1: of ``--config-1`` when
given); ``--mode save`` also reads two batches and saves the iterator with Orbax at step 2;
``--mode restore`` restores step 2 into a fresh iterator. Whatever it raises is written to
``--out``/``process_{i}.json`` (type, message, seconds) and the process exits 0, so the test
sees every process's outcome.

Usage (one line per process)::

    JAX_PLATFORMS=cpu python tests/host_agreement_worker.py --mode build --config cfg.json \
        --out out --process-id 0 --num-processes 2 --port 12345
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time
from collections.abc import Sequence

import loopback  # tests/ is sys.path[0]
import orbax.checkpoint as ocp
from absl import flags

import grainpack as gp


def main(argv: Sequence[str] | None = None) -> None:
    flags.FLAGS.mark_as_parsed()  # grain 0.2.18 reads absl flags (google/grain#1355)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("build", "save", "restore"), required=True)
    parser.add_argument("--config", required=True, help="JSON file of PipelineConfig kwargs")
    parser.add_argument("--config-1", default=None, help="process 1's config, if another")
    parser.add_argument("--checkpoints", default=None, help="Orbax CheckpointManager dir")
    parser.add_argument("--out", required=True, help="directory for process_{i}.json")
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--port", type=int, default=None)
    args = parser.parse_args(argv)

    loopback.initialize(args.port, args.num_processes, args.process_id)
    path = args.config_1 if args.config_1 and args.process_id == 1 else args.config
    config = gp.PipelineConfig(**json.loads(pathlib.Path(path).read_text()))
    start, outcome = time.monotonic(), {"raised": None, "message": ""}
    try:
        iterator = iter(gp.make_dataset(config))  # process index and count from JAX
        if args.mode != "build":
            options = ocp.CheckpointManagerOptions(create=True)
            with ocp.CheckpointManager(pathlib.Path(args.checkpoints), options=options) as mngr:
                if args.mode == "save":
                    next(iterator), next(iterator)
                    mngr.save(2, args=ocp.args.Composite(data=gp.CheckpointSave(iterator)))
                    mngr.wait_until_finished()
                else:
                    restore = ocp.args.Composite(data=gp.CheckpointRestore(iterator))
                    mngr.restore(2, args=restore)
                    outcome["step"] = iterator.get_state()["step"]
    except Exception as err:
        outcome = {"raised": type(err).__name__, "message": str(err)}
    outcome["seconds"] = time.monotonic() - start
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"process_{args.process_id}.json").write_text(json.dumps(outcome))


if __name__ == "__main__":
    main()
