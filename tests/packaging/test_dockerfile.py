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
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from forewarn.agent.config import DEFAULT_CONFIG_FILE, load_settings, settings_model
from forewarn.protocol.wire import DEFAULT_CONFIG_FILE as WIRE_CONFIG_FILE
from image_build import (
    DOCKERFILE,
    Dockerfile,
    base_image_env,
    build_args,
    copy_from_build_stage,
    final_stage,
    parse_dockerfile,
    pip_steps,
    run_step,
)
from pydantic import BaseModel
from status_probe import run_check, silent_agent, status_timeout
from support import AgentProcess, agent_env, eventually, free_port

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
    # Only the runtime extra unless the build asks for more.
    assert build_args(parsed, final)["FOREWARN_EXTRAS"] == "metrics"


def healthcheck_command(parsed: Dockerfile) -> list[str]:
    args = parsed.of("HEALTHCHECK")[-1].args
    _, _, command = args.partition("CMD ")
    argv = json.loads(command)
    assert argv[0] == "forewarn"
    return argv


def healthcheck_timeout(parsed: Dockerfile) -> float:
    """Seconds Docker gives the check before it kills it (`--timeout`, 30 s unless set)."""
    found = re.search(r"--timeout=(\d+)s\b", parsed.of("HEALTHCHECK")[-1].args.partition("CMD ")[0])
    return float(found.group(1)) if found else 30.0


def image_environment(parsed: Dockerfile) -> dict[str, str]:
    final = final_stage(parsed)
    found: dict[str, str] = {}
    for env in parsed.of("ENV"):
        if env.stage == final:
            for pair in shlex.split(env.args):
                key, _, value = pair.partition("=")
                found[key] = value
    return found


def image_config(parsed: Dockerfile) -> Path:
    """The file of this tree the final stage copies to where the agent looks for its config."""
    final = final_stage(parsed)
    found = [
        ROOT / source
        for copy in parsed.of("COPY")
        if copy.stage == final and not copy.args.startswith("--from")
        for *sources, destination in [copy.args.split()]
        if Path(destination) == DEFAULT_CONFIG_FILE
        for source in sources
    ]
    assert len(found) == 1, f"expected one COPY to {DEFAULT_CONFIG_FILE}, found {found}"
    return found[0]


def image_settings(parsed: Dockerfile) -> dict[str, str]:
    """The image's FOREWARN_* variables and its config file, which FOREWARN_CONFIG names here
    in place of /etc/forewarn/forewarn.toml; each test's own directories, set by `agent_env`
    as variables, override the file's."""
    settings = {k: v for k, v in image_environment(parsed).items() if k.startswith("FOREWARN_")}
    return {**settings, "FOREWARN_CONFIG": str(image_config(parsed))}


def test_the_image_sets_no_setting_in_its_environment():
    """A variable beats any config file: with FOREWARN_METRICS_ADDRESS, _RUNTIME_DIR,
    _STATE_DIR and _LOG_FORMAT in the image's ENV, a forewarn.toml mounted at
    /etc/forewarn/forewarn.toml had those keys ignored in silence."""
    model = settings_model()
    variables = [f"FOREWARN_{key.upper()}" for key in model.model_fields]
    variables += [
        f"FOREWARN_{section.upper()}_{key.upper()}"
        for section, field in model.model_fields.items()
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
        for key in field.annotation.model_fields
    ]
    assert not set(image_environment(parse_dockerfile(DOCKERFILE))) & set(variables)


def test_the_images_config_file_holds_its_settings(monkeypatch: pytest.MonkeyPatch):
    parsed = parse_dockerfile(DOCKERFILE)
    assert DEFAULT_CONFIG_FILE == WIRE_CONFIG_FILE  # the clients' (HEALTHCHECK) look there too
    for variable in [name for name in os.environ if name.startswith("FOREWARN_")]:
        monkeypatch.delenv(variable)
    settings = load_settings(image_config(parsed))
    assert settings.runtime_dir == Path("/run/forewarn")
    assert settings.state_dir == Path("/var/lib/forewarn")
    assert settings.metrics_address == "127.0.0.1:9464"
    assert settings.log_format == "json"


def test_a_mounted_config_files_metrics_address_wins(tmp_path: Path):
    """A forewarn.toml mounted over the image's (or named by FOREWARN_CONFIG) is the agent's
    configuration, under the image's whole environment: its metrics address is the one
    served, and no warning says a variable overrides it."""
    parsed = parse_dockerfile(DOCKERFILE)
    port = free_port()
    mounted = tmp_path / "forewarn.toml"
    mounted.write_text(f'metrics_address = "127.0.0.1:{port}"\n')
    env = agent_env(tmp_path, **image_environment(parsed), FOREWARN_CONFIG=str(mounted))
    with AgentProcess(tmp_path, env=env) as agent:
        eventually(lambda: _healthz(port) == 200, timeout=20, what=f"/healthz on {port}")
    assert "overrides its value" not in agent.output(), agent.output()


def _healthz(port: int) -> int:
    """The status of GET /healthz on loopback `port`, 0 while nothing answers there."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


@pytest.mark.parametrize("configured_by", ["metrics off", "config file"])
def test_the_health_check_follows_the_agents_own_configuration(configured_by: str, tmp_path: Path):
    """The check once GET /healthz at FOREWARN_METRICS_ADDRESS (else 127.0.0.1:9464) alone: an
    agent with metrics turned off, or set up by its config file (its runtime_dir and
    metrics_address there), ran and answered while Docker called it unhealthy."""
    parsed = parse_dockerfile(DOCKERFILE)
    check, limit = healthcheck_command(parsed), healthcheck_timeout(parsed)
    settings = image_settings(parsed)
    runtime = tmp_path / "run"
    if configured_by == "metrics off":
        settings["FOREWARN_METRICS_ADDRESS"] = "off"
        env = agent_env(tmp_path, **settings)
    else:
        # The operator's file, mounted over the image's.
        runtime = tmp_path / "elsewhere"
        config = tmp_path / "forewarn.toml"
        config.write_text(
            f'runtime_dir = "{runtime}"\nmetrics_address = "127.0.0.1:{free_port()}"\n'
        )
        env = agent_env(tmp_path, **{**settings, "FOREWARN_CONFIG": str(config)})
        del env["FOREWARN_RUNTIME_DIR"]
    assert run_check(check, env, limit).returncode != 0  # no agent yet
    with AgentProcess(tmp_path, env=env, runtime=runtime):
        result = run_check(check, env, limit)
        assert result.returncode == 0, result.stderr


def test_the_health_check_answers_before_docker_kills_it(tmp_path: Path):
    """`forewarn status` waits 30 s by default, the check's own limit is shorter: against a
    hung agent Docker killed the check, and its log said only that. Now status gives up first,
    saying why."""
    parsed = parse_dockerfile(DOCKERFILE)
    check, limit = healthcheck_command(parsed), healthcheck_timeout(parsed)
    assert status_timeout(check) < limit
    env = agent_env(tmp_path, **image_settings(parsed))
    with silent_agent(tmp_path / "run"):
        result = run_check(check, env, limit)
    assert result.returncode == 1
    assert "has not answered within" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("given", "extras"),
    [(None, "[metrics]"), ("metrics,k8s", "[metrics,k8s]"), ("", "")],
    ids=["default", "metrics,k8s", "none"],
)
def test_the_extras_build_argument_picks_what_pip_installs(
    given: str | None, extras: str, tmp_path: Path
):
    """`--build-arg FOREWARN_EXTRAS=...` reaches the install step's pip; without it the image
    has the `metrics` extra as before; empty, the bare wheel (`wheel[]` is no requirement)."""
    parsed = parse_dockerfile(DOCKERFILE)
    final = final_stage(parsed)
    (install,) = [s for s in pip_steps(parsed) if s.stage == final]
    image = tmp_path / "image"
    wheel = image / "dist" / "forewarn-0.1.0-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    wheel.touch()
    # The base image's python stood in for: its `-m venv DIR` leaves a DIR/bin/pip that
    # records its arguments, one a line.
    record = tmp_path / "pip-arguments"
    pip = tmp_path / "pip"
    pip.write_text(f'#!/bin/sh\nfor word; do printf "%s\\n" "$word"; done > "{record}"\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(
        f'#!/bin/sh\n[ "$1 $2" = "-m venv" ] || exit 1\nmkdir -p "$3/bin"\n'
        f'cp "{pip}" "$3/bin/pip" && chmod +x "$3/bin/pip"\n'
    )
    (bin_dir / "python").chmod(0o755)
    args = build_args(parsed, final, None if given is None else {"FOREWARN_EXTRAS": given})
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", **args}
    run_step(install, image, env)
    requirements = [word for word in record.read_text().splitlines() if ".whl" in word]
    assert requirements == [f"{wheel}{extras}"]


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
            run_step(step, image, {**env, **build_args(parsed, step.stage)})

    venv = image / "opt" / "forewarn"
    python = venv / "bin" / "python"
    # Only the runtime extras: prometheus-client yes, the cloud SDKs no.
    probe = "import importlib.util as u; print([bool(u.find_spec(m)) for m in "
    probe += "('prometheus_client', 'zmq', 'httpx', 'boto3', 'azure', 'matplotlib')])"
    found = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[True, True, True, False, False, False]"

    port = free_port()
    # The image's own FOREWARN_* settings, with this test's directories and port.
    image_env = image_settings(parsed)
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
            # `!packaging/` lets in what is under it too (packaging/container/forewarn.toml).
            parts = Path(source.rstrip("/")).parts
            prefixes = {"/".join(parts[:depth]) for depth in range(1, len(parts) + 1)}
            assert prefixes & admitted, f"COPY {source}: .dockerignore leaves it out"
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


def test_the_documented_stop_timeout_survives_a_machine_shutdown():
    """At a shutdown or reboot systemd bounds what dockerd allows: docker.service sets only
    TimeoutStartSec=0, so it is stopped within the manager's DefaultTimeoutStopSec (90 s on
    most distributions), and with the systemd cgroup driver each container's own scope is
    SIGKILLed after the same 90 s. The documented `--stop-timeout 120` was cut at 90 s; the
    page raises the default above it (plus the 5 s dockerd adds) and says how."""
    page = (ROOT / "docs" / "operations.md").read_text()
    stop = {int(found) for found in re.findall(r"--stop-timeout (\d+)", page)}
    assert stop, "the page documents no --stop-timeout"
    default = re.findall(r"DefaultTimeoutStopSec=(\d+)s", page)
    assert default, "the page does not say how to keep the stop timeout at a shutdown"
    assert max(stop) + 5 < min(int(value) for value in default), (stop, default)
    assert "/etc/systemd/system.conf.d/" in page
