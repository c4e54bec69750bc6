"""The Dockerfile: hadolint passes, and its install steps and health check really work.

Container builds cannot run here, so the test replays the Dockerfile's own pip steps in a
scratch directory standing in for the image's filesystem, then runs the installed agent and
the HEALTHCHECK command against it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from image_build import (
    DOCKERFILE,
    Dockerfile,
    base_image_env,
    copy_from_build_stage,
    final_stage,
    parse_dockerfile,
    pip_steps,
    run_step,
)
from support import agent_env, free_port

ROOT = Path(__file__).resolve().parents[2]
Tool = Callable[[str], str]


def hadolint(tool: Tool, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("hadolint"), "--no-color", str(path)], capture_output=True, text=True, timeout=60
    )


def test_dockerfile_passes_hadolint(tool: Tool):
    result = hadolint(tool, DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_flags_an_unpinned_install(tmp_path: Path, tool: Tool):
    sloppy = tmp_path / "Dockerfile"
    sloppy.write_text("FROM python:3.12-slim\nRUN pip install forewarn\n")
    result = hadolint(tool, sloppy)
    assert result.returncode != 0 and "DL3013" in result.stdout


def test_image_shape():
    parsed = parse_dockerfile(DOCKERFILE)
    final = final_stage(parsed)
    user = [i.args for i in parsed.of("USER") if i.stage == final]
    assert user and user[-1].split(":")[0] not in ("0", "root")
    assert json.loads(parsed.of("ENTRYPOINT")[-1].args) == ["forewarn", "agent"]
    assert "slim" in parsed.of("ARG")[0].args
    installs = " ".join(i.args for i in parsed.of("RUN") if "pip install" in i.args)
    assert "[metrics]" in installs and "[all]" not in installs


def healthcheck_command(parsed: Dockerfile) -> list[str]:
    args = parsed.of("HEALTHCHECK")[-1].args
    _, _, command = args.partition("CMD ")
    argv = json.loads(command)
    assert argv[0] == "python"
    return argv


def image_environment(parsed: Dockerfile) -> dict[str, str]:
    final = final_stage(parsed)
    found: dict[str, str] = {}
    for env in parsed.of("ENV"):
        if env.stage == final:
            for pair in shlex.split(env.args):
                key, _, value = pair.partition("=")
                found[key] = value
    return found


# It installs a wheel with its dependencies: a minute on a loaded machine.
@pytest.mark.slow(23)
@pytest.mark.timeout(600)
def test_install_steps_give_a_working_agent_and_health_check(
    tmp_path: Path, image_build_stage: Path, pip_from_wheelhouse: dict[str, str]
):
    """The build stage (COPY of the source tree, the wheel build) is replayed once per session
    by the `image_build_stage` fixture, which tests/packaging/test_wheel.py shares; here the
    final stage's steps run on what it copies from there, pip resolving the dependencies from
    the session's wheelhouse (the same versions the configured indexes give)."""
    parsed = parse_dockerfile(DOCKERFILE)
    final = final_stage(parsed)
    steps = pip_steps(parsed)
    assert len(steps) >= 2, "expected a wheel build step and an install step"
    assert [s for s in steps if s.stage < final], "expected a wheel build step in a build stage"
    assert (image_build_stage / "dist").is_dir(), "the build stage left no /dist"
    image = tmp_path / "image"
    copy_from_build_stage(image_build_stage, image)
    # `python` on PATH stands for the base image's interpreter.
    env = {**base_image_env(tmp_path), **pip_from_wheelhouse}
    for step in steps:
        if step.stage == final:
            run_step(step, image, env)

    venv = image / "opt" / "forewarn"
    python = venv / "bin" / "python"
    # Only the runtime extras: prometheus-client yes, the cloud SDKs no.
    probe = "import importlib.util as u; print([bool(u.find_spec(m)) for m in "
    probe += "('prometheus_client', 'zmq', 'httpx', 'boto3', 'azure', 'matplotlib')])"
    found = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[True, True, True, False, False, False]"

    port = free_port()
    # The image's own FOREWARN_* settings, with this test's directories and port.
    image_env = {k: v for k, v in image_environment(parsed).items() if k.startswith("FOREWARN_")}
    image_env.pop("FOREWARN_RUNTIME_DIR")
    image_env.pop("FOREWARN_STATE_DIR")
    image_env["FOREWARN_METRICS_ADDRESS"] = f"127.0.0.1:{port}"
    agent_environment = agent_env(tmp_path, **image_env)
    agent_environment["PATH"] = f"{venv / 'bin'}:{agent_environment['PATH']}"
    health = healthcheck_command(parsed)
    health_env = {**agent_environment, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}

    def healthy() -> bool:
        return (
            subprocess.run(health, env=health_env, capture_output=True, timeout=10).returncode == 0
        )

    assert not healthy()  # nothing listens yet: the check must fail
    log = (tmp_path / "agent.log").open("w")
    agent = subprocess.Popen(
        [venv / "bin" / "forewarn", "agent", "--provider", "local"],
        env=agent_environment,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 20
        while not healthy():
            assert agent.poll() is None, (tmp_path / "agent.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "agent.log").read_text()
            time.sleep(0.2)
    finally:
        agent.terminate()
        agent.wait(10)
        log.close()
    assert agent.returncode == 0
    # The image logs JSON, one object per line.
    lines = (tmp_path / "agent.log").read_text().splitlines()
    assert lines and all(json.loads(line)["level"] for line in lines)


def test_dockerignore_admits_everything_the_build_copies():
    """The build context is cut down to what .dockerignore lets through: a COPY of anything
    else fails the build (it did once, for protocol/ and packaging/)."""
    admitted = {
        line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    for copy in parse_dockerfile(DOCKERFILE).of("COPY"):
        if copy.args.startswith("--from"):
            continue
        *sources, _ = copy.args.split()
        for source in sources:
            assert source.rstrip("/") in admitted, f"COPY {source}: .dockerignore leaves it out"
    # Every code folder of the package (setup.py's FOLDERS) is copied.
    folders = ast.literal_eval(
        re.search(r"^FOLDERS = (\(.*?\))$", (ROOT / "setup.py").read_text(), re.M).group(1)  # type: ignore[union-attr]
    )
    copied = {
        source.rstrip("/")
        for copy in parse_dockerfile(DOCKERFILE).of("COPY")
        if not copy.args.startswith("--from")
        for source in copy.args.split()[:-1]
    }
    assert {*folders, "packaging"} <= copied, f"not copied: {set(folders) - copied}"
