"""The fork server of a job that found forewarn on a `sys.path` entry it added at run time."""

from __future__ import annotations

import json
import site
import subprocess
import sys
from pathlib import Path

import forewarn.clients

SCRIPT = Path(__file__).with_name("fork_server_path.py")
SOURCE = Path(forewarn.clients.__file__).resolve().parents[1]


def test_a_fork_server_started_without_forewarn_on_its_path_lets_its_children_stop(
    tmp_path: Path,
) -> None:
    """The fork server starts with SIGTERM and SIGINT blocked when it is to preload forewarn's
    module, which unblocks them in the processes it forks. Python 3.11's fork server is given
    the job's sys.path but does not use it: a job that found forewarn on an entry it added at
    run time had a server that could not import it, and every process it forked that did not
    import forewarn itself kept them blocked: `terminate()` did not end it (and
    multiprocessing's exit handler then waited for it for ever). The server now starts with
    the job's sys.path after its own."""
    vendored = tmp_path / "vendor" / "forewarn"
    vendored.mkdir(parents=True)
    for folder in ("clients", "protocol", "providers", "agent", "testing"):
        if (SOURCE / folder / "__init__.py").exists():
            (vendored / folder).symlink_to(SOURCE / folder)
    done = subprocess.run(
        [sys.executable, "-S", str(SCRIPT), str(vendored.parent), *site.getsitepackages()[:1]],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"helper": -15}
