"""A protected worker (a multiprocessing process given `worker_init_fn()`, as a DataLoader
worker is) that never gets to its init: it hangs as it unpickles its arguments (as a dataset
that hangs importing the user's module does). The main process then stops it as the
DataLoader and multiprocessing's exit handler do, with `terminate()`. A spawn worker also
starts a program as it imports this main module (`sleep`), and this process sends that
program SIGTERM. Prints one JSON object: the worker's exit code 5 s after terminate() (null:
still running, then SIGKILLed), and whether the program had ended 5 s after its SIGTERM.

    starting_worker.py spawn|forkserver DIRECTORY
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from forewarn.clients.workers import worker_init_fn

if __name__ == "__mp_main__" and os.environ.get("STARTING_WORKER_DIR"):
    # A program the main module starts as a spawn worker imports it (a process of its own).
    program = subprocess.Popen(["sleep", "30"])
    Path(os.environ["STARTING_WORKER_DIR"], "program").write_text(str(program.pid))


class Hang:
    def __reduce__(self) -> tuple[object, ...]:
        return (hang, (os.environ["STARTING_WORKER_DIR"],))


def hang(directory: str) -> None:
    Path(directory, "hanging").touch()
    while True:  # until a signal ends it (the one a handler passes by returns here)
        signal.pause()


def worker(_hang: object, init: object) -> None:
    raise AssertionError("not reached")


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never came"
        time.sleep(0.01)


def ended(pid: int) -> bool:
    # Its parent, the hung worker, does not reap it: a zombie has ended.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.01)
    return False


def main() -> None:
    directory = Path(sys.argv[2])
    os.environ["STARTING_WORKER_DIR"] = str(directory)
    context = multiprocessing.get_context(sys.argv[1])
    process = context.Process(target=worker, args=(Hang(), worker_init_fn()), daemon=True)
    process.start()
    wait_for(directory / "hanging")
    result: dict[str, object] = {}
    if (directory / "program").exists():
        program = int((directory / "program").read_text())
        os.kill(program, signal.SIGTERM)
        result["program ended"] = ended(program)
        if not result["program ended"]:
            os.kill(program, signal.SIGKILL)
    process.terminate()
    process.join(5)
    result["worker"] = process.exitcode
    if process.exitcode is None:
        process.kill()
        process.join()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
