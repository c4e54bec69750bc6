"""A training loop with a CheckpointGuard that hands work to a `multiprocessing.Pool` (fork
start unless told, made after the guard) at every step, as a data-prep pool does; prints one
JSON line per step, `{"saved": N}` at each save, and ends with `sys.exit(guard.exit_code)`.

    pool_job.py CHECKPOINT [pool|executor] [fork|spawn|forkserver]

`executor`: a `concurrent.futures.ProcessPoolExecutor` (fork) in place of the Pool, with a
pause before each map (a training step before the next step's data). The start method is
`fork` unless given (`forkserver` is Python 3.14's default on Linux).
The test sends the job's whole process group SIGTERM or SIGINT (systemd's control-group stop,
a terminal's Ctrl-C) while it trains."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from forewarn.clients import CheckpointGuard


def square(x: int) -> int:
    return x * x


def main() -> int:
    checkpoint = sys.argv[1]
    guard = CheckpointGuard(every_steps=1000, notices=False)
    executor = sys.argv[2:3] == ["executor"]
    context = multiprocessing.get_context(sys.argv[3] if len(sys.argv) > 3 else "fork")
    if executor:
        pool = ProcessPoolExecutor(2, mp_context=context)
        mapped = pool.map
    else:
        pool = context.Pool(2)
        mapped = pool.map
    step = 0
    while step < 100_000:
        if executor:
            time.sleep(0.3)  # the scenario: a training step before the next step's data
        assert list(mapped(square, range(8))) == [x * x for x in range(8)]
        step += 1
        print(json.dumps({"step": step}), flush=True)
        if guard.due(step):
            with open(checkpoint + ".tmp", "w") as f:
                f.write(str(step))
            os.replace(checkpoint + ".tmp", checkpoint)
            print(json.dumps({"saved": step}), flush=True)
            if guard.saved(step).exit:
                break
    return guard.exit_code


if __name__ == "__main__":
    sys.exit(main())
