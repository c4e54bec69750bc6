"""A training loop with a CheckpointGuard that prints its progress to its terminal at every
step, as a loop run by hand in an ssh session does; it records each step, each save and its
exit code in a file (the terminal is gone by then) and ends with `sys.exit(guard.exit_code)`.

    hangup_job.py RECORD
"""

from __future__ import annotations

import json
import sys
import time

from forewarn.clients import CheckpointGuard


def main() -> int:
    record = open(sys.argv[1], "a", buffering=1)  # noqa: SIM115 (open for the whole run)
    guard = CheckpointGuard(every_steps=100_000, notices=False)
    step = 0
    while True:
        time.sleep(0.02)  # the scenario: a training step
        step += 1
        print(f"step {step}", flush=True)
        record.write(json.dumps({"step": step}) + "\n")
        if guard.due(step):
            record.write(json.dumps({"saved": step}) + "\n")
            if guard.saved(step).exit:
                break
    record.write(json.dumps({"exit": guard.exit_code}) + "\n")
    return guard.exit_code


if __name__ == "__main__":
    sys.exit(main())
