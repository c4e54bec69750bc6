"""The job's output to its terminal while a guard handles SIGHUP: a write that meets the terminal
hung up is dropped, and the guard saves as on the terminal's SIGHUP.

A terminal answers every write with EIO from the moment it hangs up (its ssh session closed:
the pty's master side closed), and the shell's SIGHUP to the job comes a moment later, or never
where the job is not in the terminal's session. A progress line printed in that window raised
`OSError: [Errno 5] Input/output error` in the loop, before the guard saw any signal, and the
job ended unsaved (a loop printing every millisecond, typed into `bash -i` under a pty and the
terminal closed: 5 of 10 runs). So `sys.stdout` and `sys.stderr`, where they are the process's
own and a terminal, are given a raw file that catches that EIO: the terminal is gone for good
(it no longer answers as a terminal), its descriptors are pointed at /dev/null, the process is
sent the SIGHUP the shell would send (the guard's handler saves and exits 129; the shell's, when
it comes, is a repeat), and the write is dropped, as every later one is. Output that is not a
terminal is not wrapped, and costs nothing more. A spawn or forkserver worker of such a job (a
fresh interpreter, its stdout the terminal too) wraps its own as its protection starts
(`watch_terminal_output_in_worker`): its dataset's print there raised the EIO in the worker,
which the DataLoader raised in the loop before the save; it drops the write while the main
process's guard handles SIGHUP, and sends that process the SIGHUP (a protected fork worker,
its streams its main process's wrapped copies, sends it too).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import signal
import sys
from typing import TYPE_CHECKING, cast

from . import workers_guardbyte

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

    from .workers_guardbyte import _GuardByte

# The process that wrapped its streams; a child forked from it drops a write to the hung-up
# terminal too, but sends itself no SIGHUP: the guard there is its parent's copy (a protected
# fork worker sends it to its main process, as a spawn worker does: `_main`).
_wrapped_in = 0
# In a protected spawn or forkserver worker that wrapped its own: its main process and that
# process's guard byte, whose second place says whether a guard there handles SIGHUP.
_main: tuple[int, _GuardByte] | None = None


class _TerminalFile(io.FileIO):
    """The raw file under a wrapped `sys.stdout` or `sys.stderr`: a terminal's descriptor."""

    def write(self, data: ReadableBuffer, /) -> int:
        try:
            return _write(self, data)
        except OSError as error:
            if error.errno != errno.EIO or not _hung_up(self.fileno()):
                raise
            return memoryview(data).nbytes  # dropped: the terminal is gone


_write = io.FileIO.write


def _hung_up(fd: int) -> bool:
    """Whether the terminal `fd` is has hung up while a guard handles SIGHUP; if so its
    descriptors are pointed at /dev/null and the guard's process is sent SIGHUP."""
    if not _a_guard_saves_on_hangup() or os.isatty(fd):
        # No guard to save on it (closed, or SIGHUP not its: `nohup`), or a terminal that
        # still answers (an orphaned background job's write): as without forewarn.
        return False
    detach_hung_up_terminal()
    if _main is not None and _wrapped_in == os.getpid():
        # A worker's: its main process's guard saves, as on the shell's SIGHUP (which may
        # never come: the job in a session of its own, its output still the terminal).
        with contextlib.suppress(OSError):
            os.kill(_main[0], signal.SIGHUP)
    elif os.getpid() == _wrapped_in:
        # As the shell's SIGHUP would: the guard's handler, on the main thread, asks for the
        # save and the exit (or the handler that replaced it does what it does).
        os.kill(os.getpid(), signal.SIGHUP)
    return True


def _a_guard_saves_on_hangup() -> bool:
    """A guard of this process (or, in a fork worker, its copy of the main process's count)
    handles SIGHUP, or, in a spawn or forkserver worker, one in its main process does."""
    if workers_guardbyte._guards_handling_sighup > 0:
        return True
    return _main is not None and _main[1].map[1] != 0


def watch_terminal_output_in_worker(main: int, hangup: _GuardByte) -> None:
    """In a protected spawn or forkserver worker, a fresh interpreter whose stdout and stderr
    may be the job's terminal too: a write of its own (a dataset's print) that meets it hung
    up is dropped while the guard of its main process `main` handles SIGHUP (`hangup`, that
    process's guard byte), and that process is sent the SIGHUP. Raised in the worker, the
    DataLoader raised it in the loop before the save (measured: a spawn worker printing each
    item, the terminal closed after step 5: 3 of 3 runs ended unsaved)."""
    global _main
    _main = (main, hangup)
    watch_terminal_output()


def watch_terminal_output() -> None:
    """Give `sys.stdout` and `sys.stderr` a raw file that catches a hung-up terminal's EIO,
    where each is the interpreter's own and a terminal (once per process; kept after the guard
    closes, where it acts only while a guard handles SIGHUP)."""
    global _wrapped_in
    if _wrapped_in == os.getpid():
        return
    _wrapped_in = os.getpid()
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        # Only the interpreter's own: one a job or a tool put there (a tee, a capture) is its.
        if stream is None or stream is not getattr(sys, f"__{name}__"):
            continue
        if type(stream) is not io.TextIOWrapper:
            continue
        try:
            fd = stream.fileno()
            if not os.isatty(fd):
                continue
            stream.flush()
        except (OSError, ValueError):
            continue
        raw = _TerminalFile(fd, "w", closefd=False)
        raw.name = stream.name  # '<stdout>', as before
        # Buffered as it was: unbuffered (`python -u`, PYTHONUNBUFFERED) its layer below the
        # text is the raw file itself; given a buffer there, a line written without a flush
        # (a logging handler's) waited in it.
        below = io.BufferedWriter(raw) if isinstance(stream.buffer, io.BufferedWriter) else raw
        wrapped = io.TextIOWrapper(
            cast(io.BufferedWriter, below),  # or the raw file, as Python's own is under -u
            encoding=stream.encoding,
            errors=stream.errors,
            line_buffering=stream.line_buffering,
            write_through=stream.write_through,
        )
        wrapped.mode = stream.mode  # type: ignore[misc]
        setattr(sys, name, wrapped)


def detach_hung_up_terminal() -> None:
    """Point stdout and stderr at /dev/null where they are a terminal that has hung up: the
    loop's next progress line to it raised `OSError: [Errno 5] Input/output error`, and the
    job ended with a traceback before the save the SIGHUP asked for. A terminal still there
    (a SIGHUP sent by hand) keeps them."""
    for fd in (1, 2):
        try:
            if os.isatty(fd):
                continue  # a terminal that answers: not hung up
            name = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if not name.startswith(("/dev/pts/", "/dev/tty")):
            continue
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)


__all__ = [
    "detach_hung_up_terminal",
    "watch_terminal_output",
    "watch_terminal_output_in_worker",
]
