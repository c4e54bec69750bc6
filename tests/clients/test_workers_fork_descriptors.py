"""What `import forewarn.clients` leaves in a forked child of a process that never makes a
guard: none of its parent's descriptors, and no guard byte of its own until it uses one."""

from __future__ import annotations

import json
import subprocess
import sys


def test_a_forked_child_holds_no_guard_byte_until_it_uses_one() -> None:
    # Each forked child made its own guard byte (a memfd, its mapping's duplicate of it) and
    # kept its parent's memfd open as well: one more descriptor at each generation of forks,
    # for a byte the child never reads. Made at the fork, the byte alone cost every fork ~0.3
    # ms of the child's CPU (memfd_create, ftruncate, mmap, its finalizer; a DataLoader's fork
    # workers pay it at each epoch): a child makes it as it first uses it
    # (workers_guardbyte._here; tests/clients/guard_fork_children.py reads one in a child).
    code = """
import json, os
import forewarn.clients  # noqa: F401  (its fork handlers, registered at import)


def guard_files():
    found = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            found += "forewarn-guard" in os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return found


counts = [guard_files()]
reader, writer = os.pipe()
for depth in range(3):  # a fork worker of a forked rank of a forked rank
    child = os.fork()
    if child:
        break
    counts.append(guard_files())
else:
    os.write(writer, json.dumps(counts).encode())
    os._exit(0)
if depth:
    os._exit(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
os.close(writer)
answer = os.read(reader, 65536)
os.waitpid(child, 0)
print(answer.decode())
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout)
    assert counts[0] in (0, 2), counts  # none where memfd_create is refused
    assert counts[1:] == [0, 0, 0], counts
