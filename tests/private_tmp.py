"""The suite's own TMPDIR, and what the tests left in it.

A test must leave nothing behind. The suite runs with a TMPDIR of its own (a fresh directory
under the machine's, which is shared with whatever else runs there: other suites, other
users), so what is left in it at the end is the tests' alone, and is named. pytest's own
`tmp_path` directories stay where they were (`PYTEST_DEBUG_TEMPROOT`, the machine's TMPDIR):
their paths, and their length under a socket's 107 bytes, do not change, and the last three
runs' are kept there for a look after a failure, as pytest does.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import tempfile
from pathlib import Path

# Left by the libraries, not by forewarn's code or its tests' own files, in a process that
# ends without its exit handlers (a rank or DataLoader job forked from a launcher and ended
# by `os._exit`, a signal, a torchrun agent's own children): multiprocessing's `pymp-*`
# (removed by an atexit finalizer), torchrun's `torchelastic_*` log directory and
# torch.compile's `torchinductor_*` cache, and pip's CA bundle (`tmp*cacert.pem`, unpacked
# from a zipped pip, as `python -m venv` runs it, and removed at its exit). They go with the
# suite's TMPDIR.
LIBRARY_LEFTOVERS = ("pymp-*", "torchelastic_*", "torchinductor_*", "tmp*cacert.pem")


def make(parent: str | None = None) -> Path:
    """A fresh TMPDIR for the run: short (a socket under it keeps its room), and open to
    every user like /tmp (sticky), as the tests that run code as another uid need."""
    path = Path(tempfile.mkdtemp(prefix="fw-", dir=parent))
    path.chmod(0o1777)
    return path


def leftovers(path: Path) -> list[str]:
    """The entries in `path` a test left, sorted; the libraries' own are not counted."""
    return sorted(
        name
        for name in os.listdir(path)
        if not any(fnmatch.fnmatch(name, pattern) for pattern in LIBRARY_LEFTOVERS)
    )


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
