"""Every shell block of the README and docs/*.md works pasted as a script.

A ```sh block is run here, as written, unless the line before it says why not
(`<!-- not run in tests: REASON -->`) or which test runs it (`<!-- run by tests/PATH -->`,
or `<!-- example: NAME -->` for the guide's examples, run by tests/testing/test_guide.py).
No block is skipped silently, and a block that only needs this machine is never skipped.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from shell_blocks import ShellBlock, shell_blocks
from support import agent_env

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_RUN_BY = re.compile(r"^<!-- run by (?P<test>tests/\S+\.py) -->$")
_EXAMPLE = re.compile(r"^<!-- example: \S+ -->$")
GUIDE_TEST = "tests/testing/test_guide.py"
# What a reason to leave a block out may be: things this machine does not have or must not do.
ALLOWED_REASONS = ("systemd", "Docker", "root", "the test run itself", "live agent")


def _marker(path: Path, block: ShellBlock) -> str:
    lines = path.read_text().splitlines()
    # block.line is the body's first line (1-based): the fence is above it, the marker above that.
    return lines[block.line - 3].strip() if block.line >= 3 else ""


def _all_blocks() -> list[tuple[Path, ShellBlock]]:
    return [(page, block) for page in PAGES for block in shell_blocks(page)]


def _runs_here(page: Path, block: ShellBlock) -> bool:
    marker = _marker(page, block)
    return not (block.skip_reason or _RUN_BY.match(marker) or _EXAMPLE.match(marker))


RUN_HERE = [(page, block) for page, block in _all_blocks() if _runs_here(page, block)]


def test_every_block_is_run_somewhere_or_says_why_not() -> None:
    blocks = _all_blocks()
    assert len(blocks) >= 15
    for page, block in blocks:
        marker = _marker(page, block)
        run_by = _RUN_BY.match(marker)
        if block.skip_reason:
            assert any(why in block.skip_reason for why in ALLOWED_REASONS), block
        elif run_by:
            test = ROOT / run_by.group("test")
            assert test.is_file(), f"{block.source}: {test} does not exist"
            assert page.name in test.read_text(), f"{test} does not read {page.name}"
        elif _EXAMPLE.match(marker):
            assert "<!-- example: " in (ROOT / GUIDE_TEST).read_text(), block
    # The flows that need only this machine are run here, not skipped.
    assert {page.name for page, _ in RUN_HERE} >= {"README.md", "aws.md", "gcp.md"}


_TRY_DIR = re.compile(r"^export FOREWARN_RUNTIME_DIR=\$\(mktemp -d\)", re.MULTILINE)


def _keeps_its_state_in_its_try_dir(block: ShellBlock) -> bool:
    """Whether the block's agent keeps its state in the block's own temporary directory."""
    before_agent = block.body.split("forewarn agent", 1)[0]
    own_state = re.compile(r"^export FOREWARN_STATE_DIR=\S*\$FOREWARN_RUNTIME_DIR", re.M)
    return bool(own_state.search(before_agent))


def test_a_try_in_a_temporary_directory_keeps_its_state_there() -> None:
    """The flows that start an agent in `export FOREWARN_RUNTIME_DIR=$(mktemp -d)` ("this
    try's sockets, state and URL") set the state directory there too. Pasted as written, the
    state went to `run-tmp.*` under the machine's state directory, `/var/lib/forewarn` for
    root (where a node's own agent keeps its state) or `~/.local/state/forewarn`, one new
    directory left behind per try; and an `/etc/forewarn/forewarn.toml` setting `state_dir`
    (the container image's does) gave the try the node agent's own state directory, where
    the try's agent was refused (exit 2)."""
    tries = [
        block
        for page, block in _all_blocks()
        if _TRY_DIR.search(block.body) and "forewarn agent" in block.body
    ]
    assert len(tries) >= 3, [block.source for block in tries]  # aws.md, gcp.md, kubernetes.md
    assert [b.source for b in tries if not _keeps_its_state_in_its_try_dir(b)] == []


@pytest.mark.parametrize(("page", "block"), RUN_HERE, ids=[block.source for _, block in RUN_HERE])
def test_the_block_runs_as_written(page: Path, block: ShellBlock, tmp_path: Path) -> None:
    # `forewarn` on PATH is this interpreter's, as an installed console script would be.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "forewarn"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m forewarn.agent.cli "$@"\n')
    shim.chmod(0o755)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = agent_env(tmp_path, TMPDIR=str(scratch))
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    home = tmp_path / "home"
    if _keeps_its_state_in_its_try_dir(block):
        # As pasted: no state directory from this test, and a home of its own to check.
        del env["FOREWARN_STATE_DIR"]
        env.update(HOME=str(home), XDG_STATE_HOME=str(home / ".local" / "state"))
    # A copy of what the blocks read (the manifests), so what they write stays out of the tree.
    work = tmp_path / "work"
    shutil.copytree(ROOT / "packaging", work / "packaging", symlinks=True)
    proc = subprocess.Popen(
        ["bash", "-e", "-c", block.body],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the block's background jobs go with it
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, f"{block.source} failed:\n{block.body}\n{out}\n{err}"
    assert "Traceback" not in err, err
    assert not home.exists() or not any(home.rglob("*")), sorted(home.rglob("*"))
