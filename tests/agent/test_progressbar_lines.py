"""A line said while a progress bar is drawn (`forewarn checkpoint get`'s wait line, a
request to S3 left unanswered mid-copy) goes on a line of its own: it was written after the
bar on the same line (found reading `_say_waiting`, which printed after a bar's unended
`\r` line; seen on a stand-in terminal: `\rcopying step-000000000001 [######-----...]  25%
1.0 MiB of 4.0 MiBforewarn: checkpoint: waiting for an answer ...`)."""

from __future__ import annotations

import io
import logging
import threading
from unittest import mock

import pytest
from forewarn.agent import checkpoint_cli
from forewarn.agent.progressbar import LineHandler, ProgressBar, say_line
from hypothesis import given
from hypothesis import strategies as st


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_waiting_line_ends_the_bars_line_first_and_the_bar_is_drawn_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    bar = ProgressBar("copying step-000000000001", 4 << 20)
    bar.update(1 << 20)
    checkpoint_cli._say_waiting("waiting for an answer from http://h/b/k (GET): none for 5 s")
    bar.update(1 << 20)  # at once: drawn again all the same, below the line
    bar.close()
    lines = terminal.getvalue().split("\n")
    assert lines[0].endswith("1.0 MiB of 4.0 MiB"), lines
    assert (
        lines[1]
        == "forewarn: checkpoint: waiting for an answer from http://h/b/k (GET): none for 5 s"
    )
    assert lines[2].startswith("\rcopying step-000000000001 ["), lines
    assert lines[3:] == [""], lines


@given(st.lists(st.sampled_from(["draw", "say", "close"]), max_size=12))
def test_every_said_line_stands_alone_whatever_the_order(steps: list[str]) -> None:
    terminal = Terminal()
    bar = ProgressBar("copying", 100, stream=terminal)
    done = 0
    for step in steps:
        if step == "draw":
            done += 10
            bar._drawn = 0.0  # no redraw limit in this test
            bar.update(done)
        elif step == "say":
            say_line("said", terminal)
        else:
            bar.close()
    bar.close()
    for line in terminal.getvalue().split("\n"):
        assert "said" not in line or line == "said", terminal.getvalue()


def test_lines_said_from_another_thread_stand_alone() -> None:
    terminal = Terminal()
    bar = ProgressBar("copying", 10_000, stream=terminal)

    def say() -> None:
        for _ in range(200):
            say_line("said", terminal)

    sayer = threading.Thread(target=say)
    sayer.start()
    for done in range(2000):
        bar._drawn = 0.0
        bar.update(done)
    sayer.join()
    bar.close()
    for line in terminal.getvalue().split("\n"):
        assert "said" not in line or line == "said"


@given(
    st.lists(st.sampled_from(["draw", "log", "close"]), max_size=12),
    st.text(st.characters(blacklist_categories=["Cs", "Cc"]), max_size=30),
)
def test_a_logged_line_stands_alone_and_the_bar_comes_back_below_it(
    steps: list[str], message: str
) -> None:
    """The command's log handler (`LineHandler`), as `get` installs it: each record a line
    of its own, and a bar shown when it came drawn again at once below it."""
    terminal = Terminal()
    logger = logging.getLogger(f"forewarn.test.bar.{id(terminal)}")
    logger.propagate = False
    handler = LineHandler(logging.WARNING)
    logger.addHandler(handler)
    bar = ProgressBar("copying", 100, stream=terminal)
    done, shown = 0, False
    try:
        with mock.patch("sys.stderr", terminal):
            for step in steps:
                if step == "draw":
                    done += 10
                    bar._drawn = 0.0  # no redraw limit in this test
                    bar.update(done)
                    shown = True
                elif step == "log":
                    before = len(terminal.getvalue())
                    logger.warning("said %s", message)
                    written = terminal.getvalue()[before:]
                    assert written.startswith("\n" if shown else "said"), written
                    head, _, tail = written.lstrip("\n").partition("\n")
                    assert head == f"said {message}"
                    assert tail == (bar._text if shown else ""), written
                else:
                    bar.close()
                    shown = False
    finally:
        logger.removeHandler(handler)
