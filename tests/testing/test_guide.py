"""docs/testing.md's and the README's examples run as written: each Python test example is a
test file run by its own pytest (the plugin's fixtures, none of this repository's
configuration), a Python script by python without pytest, the shell one by sh."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from forked_ranks import RankLauncher
from support import agent_env, free_port

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "testing.md"
EXAMPLE = re.compile(r"<!-- example: (\S+) -->\n```\w+\n(.*?)```\n<!-- /example -->", re.S)
EXAMPLES = dict(EXAMPLE.findall(GUIDE.read_text() + (ROOT / "README.md").read_text()))
PYTHON = sorted(name for name in EXAMPLES if name.startswith("test_") and name.endswith(".py"))
SCRIPTS = sorted(name for name in EXAMPLES if not name.startswith("test_") and name.endswith(".py"))


def test_the_guide_has_its_examples() -> None:
    assert PYTHON == [
        "test_lightning_handler.py",
        "test_plain_loop.py",
        "test_readme_handler.py",
        "test_spot_loop.py",
        "test_transformers_handler.py",
    ]
    assert SCRIPTS == ["without_pytest.py"]
    assert "handler.sh" in EXAMPLES


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", SCRIPTS)
def test_a_python_script_passes_without_pytest(name: str, tmp_path: Path) -> None:
    (tmp_path / name).write_text(EXAMPLES[name])
    (tmp_path / "env").mkdir()
    env = agent_env(tmp_path / "env")
    for key in ("FOREWARN_RUNTIME_DIR", "FOREWARN_STATE_DIR"):
        env.pop(key)
    # pytest is installed here; the script must not need it.
    code = f"import sys; sys.modules['pytest'] = None; exec(open({name!r}).read())"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def need(module: str) -> None:
    """Skip without `module` (the `test` extra installs it), but never in CI: there the
    example must run. Found, not imported: the example's own pytest imports it, and the
    worker importing Lightning too cost it ~4.8 CPU-s."""
    if importlib.util.find_spec(module) is not None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{module} is not installed: the example must run in CI")
    pytest.skip(f"needs {module}")


# The framework examples import Lightning or transformers (and torch) in their pytest.
FRAMEWORK_SECONDS = {"test_lightning_handler.py": 24, "test_transformers_handler.py": 11}


# A fresh pytest importing torch and training on a shared 2-core machine: minutes, not seconds.
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.slow(FRAMEWORK_SECONDS[name]))
        if name in FRAMEWORK_SECONDS
        else name
        for name in PYTHON
    ],
)
def test_a_python_example_passes(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    for framework in ("lightning", "transformers"):
        if framework in name:
            need(framework)
    (tmp_path / name).write_text(EXAMPLES[name])
    (tmp_path / "env").mkdir()
    env = agent_env(tmp_path / "env")
    for key in ("FOREWARN_RUNTIME_DIR", "FOREWARN_STATE_DIR"):
        env.pop(key)
    args = [
        "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
        "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path / name),
    ]  # fmt: skip
    if name in FRAMEWORK_SECONDS:
        # Its own pytest all the same, forked from the launcher that imported torch once
        # (tests/forked_ranks.py): a fresh one spent ~2 CPU-s of its ~8 importing torch.
        launcher: RankLauncher = request.getfixturevalue("rank_launcher")
        pytest_run = launcher.start("-m pytest", args, env, cwd=tmp_path)
        out, err = pytest_run.communicate(timeout=540)
        done = subprocess.CompletedProcess(args, pytest_run.returncode, out, err)
    else:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *args],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=540,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout


@pytest.mark.timeout(300)
def test_the_shell_example_passes(tmp_path: Path) -> None:
    script = tmp_path / "handler.sh"
    script.write_text(EXAMPLES["handler.sh"])
    (tmp_path / "env").mkdir()
    env = agent_env(tmp_path / "env", PORT=str(free_port()), TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    for key in ("FOREWARN_RUNTIME_DIR", "FOREWARN_STATE_DIR"):
        env.pop(key)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("handler test passed")
    assert list((tmp_path / "tmp").iterdir()) == [], "the script cleaned up"
