"""The guard's terminal output (forewarn.clients.guard_terminal): a write that meets the job's
terminal hung up is dropped while a guard handles SIGHUP, and raises EIO as before otherwise;
output that is not a terminal is left as it is; what reaches a live terminal is unchanged.
(The job that saves on such a write: test_guard_hangup.)"""

from __future__ import annotations

import errno
import io
import os
import pty
import signal
import subprocess
import sys
import tty
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import pytest
from forewarn.clients import guard_terminal, workers_guardbyte
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples, sighup_as_in_a_terminal


@contextmanager
def a_terminal() -> Iterator[tuple[int, io.TextIOWrapper]]:
    """A pty's master side, and a text stream on its other side as a wrapped stdout is."""
    master, terminal = pty.openpty()
    tty.setraw(terminal)  # bytes as written, no "\n" made "\r\n"
    stream = io.TextIOWrapper(
        io.BufferedWriter(guard_terminal._TerminalFile(terminal, "w", closefd=False)),
        encoding="utf-8",
        line_buffering=True,
    )
    try:
        yield master, stream
    finally:
        for fd in (terminal, master):
            with suppress(OSError):  # the master side closed already by hang_up
                os.close(fd)


def hang_up(master: int) -> None:
    os.close(master)


@settings(max_examples=examples(60), deadline=None)
@given(st.text(max_size=300).map(lambda text: text + "\n"))
def test_what_reaches_a_live_terminal_is_what_was_printed(text: str) -> None:
    with a_terminal() as (master, stream):
        print(text, end="", file=stream, flush=True)
        expected = text.encode()
        said = b""
        while len(said) < len(expected):
            said += os.read(master, 65536)
        assert said == expected


def test_without_a_guard_handling_sighup_a_hung_up_terminal_raises_eio_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A guard closed, or SIGHUP not the guard's (`nohup`, the job's own handler): the job
    meets the EIO as it would without forewarn."""
    monkeypatch.setattr(workers_guardbyte, "_guards_handling_sighup", 0)
    with a_terminal() as (master, stream):
        hang_up(master)
        with pytest.raises(OSError) as raised:
            print("step 6", file=stream, flush=True)
        assert raised.value.errno == errno.EIO


def test_a_forked_copy_drops_the_write_and_sends_no_sighup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a process that did not wrap its streams (a fork worker, its guard its parent's copy)
    the write is dropped, and no SIGHUP is sent: that copy would hand it to the default, and
    the worker would die of it (a SIGHUP here would end this test's process)."""
    monkeypatch.setattr(workers_guardbyte, "_guards_handling_sighup", 1)
    monkeypatch.setattr(guard_terminal, "_wrapped_in", os.getppid())
    with a_terminal() as (master, stream):
        hang_up(master)
        for step in range(3):
            print(f"step {step}", file=stream, flush=True)  # no OSError


def test_output_that_is_not_a_terminal_is_left_as_it_is() -> None:
    """Piped or redirected to a file, the job's stdout and stderr stay the interpreter's own:
    a print costs what it did."""
    program = (
        "import sys\n"
        "from forewarn.clients import CheckpointGuard\n"
        "guard = CheckpointGuard(every_steps=10, notices=False)\n"
        "print(sys.stdout is sys.__stdout__, sys.stderr is sys.__stderr__)\n"
        "guard.close()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        stdin=subprocess.DEVNULL,
        preexec_fn=sighup_as_in_a_terminal,  # the suite may run under nohup
    )
    assert done.stdout.split() == ["True", "True"]


@pytest.mark.parametrize("unbuffered", ["", "1"])
def test_a_terminal_output_is_wrapped_as_it_was(unbuffered: str) -> None:
    """A terminal's stdout keeps its encoding, errors, buffering, name and mode. Found: under
    PYTHONUNBUFFERED (`python -u`, set in many images) the wrapped stream was given a buffer
    the interpreter's had not, and a logging handler's lines (written without a flush) waited
    in it: the save came 20 steps after the terminal hung up, not at the next step."""
    program = (
        "import sys\n"
        "from forewarn.clients import CheckpointGuard\n"
        "before = sys.stdout\n"
        "guard = CheckpointGuard(every_steps=10, notices=False)\n"
        "after = sys.stdout\n"
        "said = [type(getattr(after.buffer, 'raw', after.buffer)).__name__, after is not before]\n"
        "said += [getattr(after, a) == getattr(before, a) for a in\n"
        "         ('encoding', 'errors', 'line_buffering', 'write_through', 'name', 'mode')]\n"
        "same = isinstance(after.buffer, type(before.buffer))\n"
        "said.append(same or (after.buffer, before.buffer))\n"
        "print(*said, after.isatty(), file=sys.stderr)\n"
        "guard.close()\n"
    )
    master, terminal = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-c", program],
            stdout=terminal,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=120,
            check=True,
            start_new_session=True,
            preexec_fn=sighup_as_in_a_terminal,  # the suite may run under nohup
            env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
            | ({"PYTHONUNBUFFERED": unbuffered} if unbuffered else {}),
        )
    finally:
        os.close(terminal)
        os.close(master)
    assert done.stderr.split() == ["_TerminalFile", "True", *["True"] * 7, "True"]


def test_a_workers_write_is_dropped_and_its_main_process_sent_sighup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a protected spawn or forkserver worker (no guard of its own) whose main process's
    guard handles SIGHUP: the write is dropped and the main process is sent the SIGHUP, which
    may never come otherwise (the job in a session of its own, its output still the terminal).
    Here the main process is a `sleep`, which SIGHUP ends."""
    monkeypatch.setattr(workers_guardbyte, "_guards_handling_sighup", 0)
    # SIGHUP at its default, as a job's main process has it: under `nohup` (CI) a child
    # inherits it ignored and the SIGHUP sent would end nothing.
    main = subprocess.Popen(
        ["sleep", "60"], start_new_session=True, preexec_fn=sighup_as_in_a_terminal
    )
    byte = workers_guardbyte._GuardByte(-1)
    byte.map[1] = 1
    try:
        monkeypatch.setattr(guard_terminal, "_main", (main.pid, byte))
        monkeypatch.setattr(guard_terminal, "_wrapped_in", os.getpid())
        with a_terminal() as (master, stream):
            hang_up(master)
            print("loaded item 12", file=stream, flush=True)  # no OSError
        assert main.wait(timeout=30) == -signal.SIGHUP
    finally:
        main.kill()
        main.wait()


def test_a_workers_write_raises_eio_when_its_main_process_has_no_guard_handling_sighup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The main process's guard closed, or SIGHUP not its (`nohup`): as without forewarn."""
    monkeypatch.setattr(workers_guardbyte, "_guards_handling_sighup", 0)
    byte = workers_guardbyte._GuardByte(-1)
    monkeypatch.setattr(guard_terminal, "_main", (os.getpid(), byte))
    monkeypatch.setattr(guard_terminal, "_wrapped_in", os.getpid())
    with a_terminal() as (master, stream):
        hang_up(master)
        with pytest.raises(OSError) as raised:
            print("loaded item 12", file=stream, flush=True)
        assert raised.value.errno == errno.EIO
