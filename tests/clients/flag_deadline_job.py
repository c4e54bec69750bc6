"""A torch-free training loop with the guard and no agent: it prints `ready` once its guard
reads the flag file, then one JSON line per save ({"step", "reasons", "exit", "at"}: `at` the
wall time), and exits with the guard's code after a save that says exit.

    flag_deadline_job.py FLAG EXIT_MARGIN
"""

from __future__ import annotations

import json
import sys
import time

from forewarn.clients import CheckpointGuard


def main() -> int:
    flag, margin = sys.argv[1], float(sys.argv[2])
    with CheckpointGuard(
        notices=False, handle_signals=False, flag_file=flag, agree=False, exit_margin=margin
    ) as guard:
        print("ready", flush=True)
        step = 0
        while True:
            step += 1
            time.sleep(0.02)  # the step's work
            if guard.due(step):
                result = guard.saved(step, 0.01)
                line = {"step": step, "reasons": list(result.reasons), "exit": result.exit}
                print(json.dumps({**line, "at": time.time()}), flush=True)
                if result.exit:
                    return guard.exit_code


if __name__ == "__main__":
    sys.exit(main())
