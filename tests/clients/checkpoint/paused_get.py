"""`forewarn checkpoint get ...` whose copy stops before its first file, holding DESTINATION's
lock, until a file tells it to go on (run by test_cli.py as the first of two gets at once).

    paused_get.py PAUSED GO URL DESTINATION [FLAGS...]

Creates PAUSED once paused; goes on when GO exists: copies when GO holds `go`, fails the copy
with an I/O error when it holds `fail`.
"""

from __future__ import annotations

import errno
import runpy
import sys
import time
from pathlib import Path
from typing import Any

from forewarn.clients.checkpoint.generation import Generation


def main() -> None:
    paused, go = Path(sys.argv[1]), Path(sys.argv[2])
    real = Generation._get_file

    def held(self: Generation, *args: Any, **kwargs: Any) -> Path:
        paused.touch()
        while not go.exists() or not go.read_text():
            time.sleep(0.01)
        if go.read_text() == "fail":
            raise OSError(errno.EIO, "Input/output error (the test's)")
        return real(self, *args, **kwargs)

    Generation._get_file = held  # type: ignore[method-assign]
    sys.argv = ["forewarn", "checkpoint", "get", *sys.argv[3:]]
    runpy.run_module("forewarn.agent.cli", run_name="__main__")


if __name__ == "__main__":
    main()
