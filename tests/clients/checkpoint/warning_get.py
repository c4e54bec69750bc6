"""`forewarn checkpoint get ...` during which the store logs a WARNING after each file it
copies, as its own warnings come (run by test_cli_bar_lines.py on a pseudo-terminal).

    warning_get.py URL DESTINATION [FLAGS...]
"""

from __future__ import annotations

import logging
import runpy
import sys
from pathlib import Path
from typing import Any

from forewarn.clients.checkpoint.generation import Generation


def main() -> None:
    real = Generation._get_file
    log = logging.getLogger("forewarn.checkpoint")

    def warned(self: Generation, name: str, *args: Any, **kwargs: Any) -> Path:
        copied = real(self, name, *args, **kwargs)
        log.warning("forewarn: checkpoint: the test's warning after %s", name)
        return copied

    Generation._get_file = warned  # type: ignore[method-assign]
    sys.argv = ["forewarn", "checkpoint", "get", *sys.argv[1:]]
    runpy.run_module("forewarn.agent.cli", run_name="__main__")


if __name__ == "__main__":
    main()
