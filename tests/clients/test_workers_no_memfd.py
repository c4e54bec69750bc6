"""A process where memfd_create is refused (a seccomp filter, a kernel without it) still
imports forewarn.clients, and its workers still see whether a guard handles SIGTERM."""

from __future__ import annotations

import subprocess
import sys


def test_forewarn_clients_imports_where_memfd_create_is_refused() -> None:
    """Its guard byte is a memfd, made at import and in a forked child that uses one: where the
    call is refused, `import forewarn.clients` raised OSError and the job could not start."""
    script = """
import errno, os, sys
from multiprocessing import context

def refused(*args):
    raise OSError(errno.ENOSYS, "Function not implemented")

os.memfd_create = refused
import forewarn.clients
from forewarn.clients import workers

byte = workers._guard_handles_sigterm_here
workers.guard_handles_sigterm(True)
reader, writer = os.pipe()
child = os.fork()
if child == 0:
    # A fork worker reads its main process's byte, which it shares: the guard's close shows.
    os.read(reader, 1)
    os._exit(0 if byte.map[0] == 0 else 1)
workers.guard_handles_sigterm(False)
os.write(writer, b"x")
assert os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0, "the fork worker's byte"


class Popen:  # what a spawn or forkserver start hands the pickler: the fds the worker gets
    @staticmethod
    def duplicate_for_child(fd):
        return os.dup(fd)

    @staticmethod
    def DupFd(fd):
        return Sent(fd)


class Sent:
    def __init__(self, fd):
        self.fd = fd

    def detach(self):
        return self.fd


# A spawn or forkserver worker is sent the byte's values as it starts: whether a guard handles
# SIGTERM, and whether one handles SIGHUP.
from forewarn.clients import workers_guardbyte

for handles in (True, False):
    workers.guard_handles_sigterm(handles)
    workers_guardbyte.guard_handles_sighup(not handles)
    chained = workers._Chained(None)
    chained.guarded = byte
    context.set_spawning_popen(Popen())
    try:
        function, args = chained.__reduce__()
    finally:
        context.set_spawning_popen(None)
    then, lifeline, sent, hangup = args
    started = function(then, lifeline, sent, hangup)
    assert workers._guard_saves_first(started.guarded) is handles, (handles, sent)
    saves = workers_guardbyte._guard_saves_on_hangup(started.hangup)
    assert saves is not handles, (handles, hangup)
"""
    job = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert job.returncode == 0, job.stderr
    assert "Exception ignored" not in job.stderr
