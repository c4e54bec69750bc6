"""The install paths work as written: the shell blocks of docs/operations.md and of the
README's deployment section run in order, in a copy of the repository, as a user would paste
them (a release built with `python -m build`, installed into a fresh virtual environment),
and then the installed `forewarn` runs the local drill and the cloud-init renderer.

The blocks run exactly as written, with pip resolving from the session's wheelhouse (the
`wheelhouse` fixture: every distribution they install, downloaded once from the indexes this
machine's pip is configured with) instead of reading every index page again in each of them."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from shell_blocks import doc_section, run_script, shell_blocks

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = ROOT / "docs" / "operations.md"
README = ROOT / "README.md"
# Paths the documented commands use as written; cleared before and after the run.
DOCUMENTED_PATHS = (Path("/tmp/forewarn-build"), Path("/tmp/forewarn-venv"))


def source_copy(target: Path) -> Path:
    """The tracked files of the repository, as a fresh clone would hold them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        relative = name.decode()
        source = ROOT / relative
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            destination.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, destination)
    return target


def systemd_block_as_root(work: Path, tmp_path: Path, pip_env: dict[str, str]) -> None:
    """docs/operations.md's systemd block as root pastes it, in a mount namespace of its own
    (/etc, /opt and /usr/local are overlays there, so the machine keeps no user, venv or
    unit), with `systemctl` recorded instead of run (no systemd is PID 1 here); then the unit
    it installed passes `systemd-analyze verify` on that root as it is. `pip_env` says where
    pip resolves from."""
    (block,) = [b for b in shell_blocks(OPERATIONS) if "systemctl enable" in b.body]
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        if os.environ.get("CI"):
            pytest.fail("CI runs as root with unshare (util-linux)")
        return
    scratch = tmp_path / "namespace"
    overlays = []
    for place in ("etc", "opt", "usr/local"):
        upper, lower = scratch / place.replace("/", "-") / "up", scratch / place.replace("/", "-")
        (lower / "work").mkdir(parents=True)
        upper.mkdir()
        overlays.append(
            f"mount -t overlay overlay -o lowerdir=/{place},upperdir={upper},"
            f"workdir={lower / 'work'} /{place}"
        )
    calls = scratch / "systemctl.log"
    script = "\n".join(
        [
            *overlays,
            'sudo() { "$@"; }',
            f'systemctl() {{ echo "$*" >> {calls}; }}',
            "TRAINING_USER=nobody",
            block.body,
            "systemd-analyze verify /etc/systemd/system/forewarn-agent.service",
            "echo groups: $(id -nG nobody)",
            "echo installed: $(/usr/local/bin/forewarn --version)",
        ]
    )
    result = run_script(
        script, cwd=work, env={**os.environ, **pip_env}, timeout=600, private_mounts=True
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert calls.read_text().splitlines() == ["daemon-reload", "enable --now forewarn-agent"]
    assert "forewarn" in result.stdout.split("groups:")[1].split()
    assert "installed: forewarn 0.1.0" in result.stdout
    # Unknown keys and bad values are only warnings for verify: none may name the unit.
    assert "forewarn-agent.service" not in result.stderr, result.stderr
    # Nothing of it is left on the machine.
    assert not Path("/opt/forewarn").exists() and not Path("/etc/forewarn/forewarn.env").exists()


def test_every_block_is_run_or_says_why_not():
    blocks = shell_blocks(README, "Running it where users run it") + shell_blocks(OPERATIONS)
    assert len(blocks) >= 5
    skipped = {block.source: block.skip_reason for block in blocks if block.skip_reason}
    # Only what needs a running systemd or a Docker daemon is left out.
    assert all("systemd" in why or "Docker" in why for why in skipped.values()), skipped


def test_every_install_path_names_the_python_it_needs():
    """pip refuses forewarn under an older Python (requires-python): a user who pastes the
    commands on such a machine, or a cloud-init machine whose image has one (its python3
    makes the venv), must have been told which Python it takes."""
    requires = metadata.metadata("forewarn")["Requires-Python"]
    floor = re.fullmatch(r">=\s*(\d+\.\d+)", requires)
    assert floor, requires
    needed = f"Python {floor.group(1)} or newer"
    for path, section in (
        (README, "Try it on a fresh machine"),
        (README, "Running it where users run it"),
        (OPERATIONS, "Install: a release built from this repository"),
        (OPERATIONS, "cloud-init"),
    ):
        assert needed in doc_section(path, section), f"{path.name} ## {section}: {needed}"


@pytest.fixture
def documented_paths_to_ourselves() -> Iterator[None]:
    """The documented paths are machine-wide: one run at a time uses them (two checkouts
    testing on one machine would otherwise rebuild each other's virtual environments)."""
    with open("/tmp/forewarn-release-test.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.mark.slow(44)
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("documented_paths_to_ourselves")
def test_documented_install_builds_installs_and_runs(
    tmp_path: Path, pip_from_wheelhouse: dict[str, str]
):
    for path in DOCUMENTED_PATHS:
        shutil.rmtree(path, ignore_errors=True)
    work = source_copy(tmp_path / "forewarn")
    runnable = [
        block
        for block in shell_blocks(README, "Running it where users run it")
        + shell_blocks(OPERATIONS)
        if block.skip_reason is None
    ]
    # The README repeats the first lines of docs/operations.md's build block: running the
    # longer one is enough (each build takes half a minute).
    blocks = [
        block
        for index, block in enumerate(runnable)
        if not any(
            other.body.startswith(block.body) and (other.body != block.body or later < index)
            for later, other in enumerate(runnable)
            if later != index
        )
    ]
    assert len(blocks) < len(runnable), "the README's build block is no longer run"
    script = "\n".join(f"echo '== {block.source}'\n{block.body}" for block in blocks)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("FOREWARN_", "VIRTUAL_ENV", "PYTHON"))
    }
    env["HOME"] = str(tmp_path)
    env.update(pip_from_wheelhouse)
    try:
        result = run_script(script, cwd=work, env=env, timeout=800)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        dist = sorted(path.name for path in (work / "dist").iterdir())
        assert [name.split("-")[0] for name in dist] == ["forewarn", "forewarn"], dist
        assert any(name.endswith(".whl") for name in dist)
        assert any(name.endswith(".tar.gz") for name in dist)
        assert "forewarn 0.1.0" in result.stdout
        # What the cloud-init block wrote installs from the source it was given.
        user_data = yaml.safe_load((work / "user-data.yaml").read_text())
        pip = next(cmd for cmd in user_data["runcmd"] if cmd[0].endswith("/pip"))
        assert pip[-1].startswith("forewarn[metrics] @ https://")

        # The installed command, not the source tree, runs the drill.
        installed = Path("/tmp/forewarn-venv/bin/forewarn")
        drill_env = {**env, "FOREWARN_RUNTIME_DIR": str(tmp_path / "run")}
        drill = subprocess.run(
            [str(installed), "drill", "local", "--steps", "120", "--dir", str(tmp_path / "drill")],
            cwd=tmp_path,
            env=drill_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert drill.returncode == 0, drill.stdout[-3000:] + drill.stderr[-3000:]
        assert "steps lost: 0" in drill.stdout, drill.stdout[-2000:]
        # A message that asks for an extra names the wheel this forewarn came from.
        hint = subprocess.run(
            [
                "/tmp/forewarn-venv/bin/python",
                "-c",
                "from forewarn.protocol.install import extra_hint; print(extra_hint('aws'))",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout.strip()
        wheel = next((work / "dist").glob("forewarn-*.whl")).resolve()
        # By the venv's own pip: `pip` on this PATH is another Python's.
        expected = f"/tmp/forewarn-venv/bin/pip install 'forewarn[aws] @ {wheel.as_uri()}'"
        assert hint == expected, hint
        files = subprocess.run(
            [
                "/tmp/forewarn-venv/bin/python",
                "-c",
                "import forewarn.agent.deploy as d, pathlib; "
                "print(pathlib.Path(d.__file__).parent / 'files')",
            ],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout.strip()
        shipped = Path(files)
        assert (shipped / "systemd" / "forewarn-agent.service").read_text() == (
            ROOT / "packaging" / "systemd" / "forewarn-agent.service"
        ).read_text()
        assert not shipped.is_symlink(), "the wheel must hold the files, not a link"
        systemd_block_as_root(work, tmp_path, pip_from_wheelhouse)
    finally:
        for path in DOCUMENTED_PATHS:
            shutil.rmtree(path, ignore_errors=True)


@pytest.mark.timeout(600)
def test_the_systemd_block_runs_where_only_the_release_was_copied(
    tmp_path: Path, image_build_stage: Path, pip_from_wheelhouse: dict[str, str]
) -> None:
    """found: the Install section says to copy `dist/` to the machines, and the systemd
    block then installed the unit from `packaging/systemd/`, which only a checkout has: on a
    machine holding `dist/` alone it stopped at `install: cannot stat
    'packaging/systemd/forewarn-agent.service'`, after the venv and the link were made. The
    block takes the unit from the package it installed, which ships it."""
    machine = tmp_path / "machine"
    (machine / "dist").mkdir(parents=True)
    for wheel in (image_build_stage / "dist").glob("forewarn-*.whl"):
        shutil.copy(wheel, machine / "dist" / wheel.name)
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("runs as root with unshare (util-linux), as CI does")
    systemd_block_as_root(machine, tmp_path, pip_from_wheelhouse)
