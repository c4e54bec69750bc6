"""`forewarn checkpoint get` on a terminal: a WARNING the store logs while the progress bar is
drawn (an S3 upload it could not abort, a store without locks, ...) went out through logging's
last-resort handler, after the bar's unended `\r` line, so it ran on after `... 1.0 MiB of
2.0 MiB`; and the bar was not drawn again below it until bytes moved. Now every log line ends
the bar's line first and the bar is drawn again at once below it."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

from forewarn.clients.checkpoint import CheckpointStore

_WORKER = Path(__file__).with_name("warning_get.py")
_BAR = re.compile(r"^copying step-000000000001 \[[#-]{24}\] +\d+% [\d.]+ MiB of 2\.0 MiB$")


def _on_a_terminal(argv: list[str]) -> tuple[int, str]:
    """Run `argv` with stderr on a pseudo-terminal; its exit code and all it wrote there."""
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=terminal)
        os.close(terminal)
        drawn = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not chunk:
                break
            drawn += chunk
        code = process.wait(timeout=120)
        assert process.stdout is not None
        process.stdout.close()
    finally:
        os.close(controller)
    return code, drawn.decode()


def test_a_log_line_during_the_bar_ends_its_line_and_the_bar_is_drawn_again(
    tmp_path: Path,
) -> None:
    url = str(tmp_path / "store")
    store = CheckpointStore(url)

    def write(gen: object) -> None:
        for name in ("a.bin", "b.bin"):
            gen.write_bytes(name, os.urandom(1 << 20))  # type: ignore[attr-defined]

    store.flush(1, write)
    store.close()
    code, drawn = _on_a_terminal([sys.executable, str(_WORKER), url, str(tmp_path / "out")])
    assert code == 0, drawn
    # The terminal turns each "\n" into "\r\n"; a bar's line starts with its own "\r".
    lines = drawn.replace("\r\n", "\n").split("\n")
    said = [i for i, line in enumerate(lines) if "the test's warning" in line]
    assert len(said) == 2, drawn
    for i in said:
        assert re.fullmatch(
            r"forewarn: checkpoint: the test's warning after [ab]\.bin", lines[i]
        ), repr(lines[i - 1 : i + 2])
        # The bar, drawn again at once below the line: its last draw before the next line.
        after = lines[i + 1].split("\r")
        assert after[0] == "" and _BAR.match(after[-1]), repr(lines[i - 1 : i + 2])
    # The bar drawn before the first line ended where it stood, with nothing run on after it.
    assert _BAR.match(lines[said[0] - 1].split("\r")[-1]), repr(lines[: said[0] + 1])
