from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from forewarn.agent import drill_local
from forewarn.agent.drill_local import DrillFailed, Machine, NoticeSource
from forewarn.protocol.wire import request
from support import Subscriber, as_in_a_terminal, eventually, forewarn_cmd

README = Path(__file__).resolve().parents[2] / "README.md"


def timeline_events(output: str) -> list[str]:
    """A drill's timeline as its events alone: no times, steps, durations or notice ids, which
    change from run to run."""
    lines = output.split("  time        step  event\n", 1)[1].split("steps lost:", 1)[0]
    events = []
    for line in lines.splitlines():
        event = re.sub(r"^\s*\+\s*[\d.]+s\s+(\d+|-)\s+", "", line)
        event = re.sub(r"/[0-9a-f]{8}\)", "/ID)", event)
        events.append(re.sub(r"\d+(\.\d+)?", "N", event))
    return events


def test_drill_local_loses_no_step(tmp_path: Path, env: dict[str, str]) -> None:
    done = subprocess.run(
        forewarn_cmd("drill", "local", "--dir", str(tmp_path / "drill")),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "steps lost: 0" in done.stdout
    assert (
        "resumed from step" in done.stdout and "verified (checksums), state matches" in done.stdout
    )
    # The README shows this run's timeline: it must show the events the drill prints.
    assert timeline_events(README.read_text()) == timeline_events(done.stdout)
    # What an operator reads on the replacement: its agent's resume line with the restore
    # time and the steps lost the drill printed (`steps_lost=unknown` before: the demo said
    # nothing of the exit's save it resumed from).
    log = (tmp_path / "drill" / "machine-2" / "agent.log").read_text()
    assert re.search(r"resume of \S+ at step \d+: restore=[\d.]+s steps_lost=0\n", log), log
    # Issue 18: a second run in the same directory hung 31 s and failed ("the demo said
    # nothing for 30s"); it must run as the first did.
    again = subprocess.run(
        forewarn_cmd("drill", "local", "--dir", str(tmp_path / "drill"), "--steps", "150"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "steps lost: 0" in again.stdout and "said nothing" not in again.stderr
    assert "previous drill's checkpoints and machines in it were removed" in again.stdout


def test_a_dir_with_someone_elses_checkpoints_is_refused_not_emptied(
    tmp_path: Path, env: dict[str, str]
) -> None:
    precious = tmp_path / "project" / "checkpoints" / "model.pt"
    precious.parent.mkdir(parents=True)
    precious.write_bytes(b"weights")
    done = subprocess.run(
        forewarn_cmd("drill", "local", "--dir", str(tmp_path / "project")),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("forewarn: drill local: --dir: ")
    assert precious.read_bytes() == b"weights"


def test_a_dir_this_user_cannot_write_into_is_refused_naming_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An existing --dir the drill cannot write into (another user's directory, a read-only
    mount; /proc for every user, root too) failed as 'unexpected PermissionError ... please
    report it', exit 1, after the drill had started."""
    from forewarn.agent.cli import main

    assert main(["drill", "local", "--dir", "/proc"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("forewarn: drill local: --dir: cannot write into /proc: "), err
    assert "unexpected" not in err


@pytest.mark.slow(11)
def test_a_terminate_during_a_background_upload_is_durable_before_its_deadline(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Issue 20: the demo uploads in the background over a slow link, the terminate arrives
    while a periodic save is uploading, the final checkpoint is durable before the deadline,
    and the resume loses no step (real agent and demo processes)."""
    done = subprocess.run(
        forewarn_cmd(
            "drill",
            "local",
            "--background",
            "--upload-delay",
            "1.5",
            "--deadline",
            "30",
            "--dir",
            str(tmp_path / "drill"),
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "terminate sent during the upload of step" in out
    assert "final save: waited for the upload in flight" in out
    assert "durable" in out and "before deadline" in out
    assert "steps lost: 0" in out and "state matches" in out


def _slow_agent(endpoint: str, delay: float, answer: bool) -> threading.Thread:
    """A control socket that answers one notify after `delay` seconds, as a loaded agent does."""
    import zmq

    sock = zmq.Context.instance().socket(zmq.REP)
    sock.bind(endpoint)

    def serve() -> None:
        try:
            sock.recv()
            time.sleep(delay)
            if answer:
                sock.send_json({"ok": True, "notice": {"id": "manual-1"}})
        finally:
            sock.close(linger=0)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_notice_the_loaded_agent_answers_late_is_still_rehearsed(tmp_path: Path) -> None:
    # A clean-clone run under load crashed the drill with "unexpected TimeoutError" when the
    # agent took more than 2 s to answer the drain.
    endpoint = f"ipc://{tmp_path}/control"
    server = _slow_agent(endpoint, delay=2.5, answer=True)
    assert NoticeSource("local", endpoint, {}, tmp_path).raise_notice("drain") == "manual-1"
    server.join(5)


def test_an_agent_that_never_answers_the_notice_fails_the_drill_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(drill_local, "PHASE_TIMEOUT", 0.3)
    endpoint = f"ipc://{tmp_path}/control"
    server = _slow_agent(endpoint, delay=1.0, answer=False)
    with pytest.raises(DrillFailed, match=r"did not answer the terminate on ipc://.*within 0.3s"):
        NoticeSource("local", endpoint, {}, tmp_path).raise_notice("terminate")
    server.join(5)


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--handler", "plain"], "--handler: only used with --scenario"),
        (["--lead", "3s", "--seed", "4"], "--lead, --seed: only used with --scenario"),
        (["--upload-delay", "3"], "--upload-delay: only used with --background"),
        (["--deadline", "5s"], "--deadline: only used with --background"),
        (["--scenario", "systemd", "--provider", "aws"], "--provider: not used by --scenario"),
        (["--scenario", "cloud", "--steps", "10"], "--steps: not used by --scenario cloud"),
    ],
)
def test_an_option_the_chosen_drill_does_not_use_is_refused(
    words: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`forewarn drill local --handler plain` (the README's baseline handler) ran the guard's
    quick drill and printed "steps lost: 0"; `--upload-delay 3` without --background, a plain
    drill. Each option is used by one of the drills the README's table lists: given to
    another, it is bad input, refused before anything starts."""
    from forewarn.agent.cli import main

    assert main(["drill", "local", *words]) == 2
    assert message in capsys.readouterr().err


def test_the_drills_agent_ignores_the_nodes_config_file(tmp_path: Path) -> None:
    """On a node whose /etc/forewarn/forewarn.toml is the documented example, with the real
    agent holding its metrics port, the drill's agent read that file, could not listen and
    exited 2 ("drill failed: the agent exited with code 2"). The default config path is
    pointed at such a file here through a sitecustomize in the agent's environment."""
    node_config = tmp_path / "etc" / "forewarn.toml"
    node_config.parent.mkdir()
    with socket.socket() as taken:  # the node's own agent, serving its metrics
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        node_config.write_text(
            f'providers = ["local", "aws"]\nmetrics_address = "127.0.0.1:{port}"\n'
            'log_format = "json"\nexit_margin = 45\n'
        )
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(
            "from pathlib import Path\nimport forewarn.agent.config as config\n"
            f"config.DEFAULT_CONFIG_FILE = Path({str(node_config)!r})\n"
        )
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("FOREWARN_")}
        base_env["PYTHONPATH"] = os.pathsep.join(
            [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        machine = Machine(tmp_path / "drill", "local", base_env, "machine-1")
        try:
            status = request(machine.control, {"op": "status"})
            assert status["ok"] and status["agent"]["providers"] == ["local"]
        finally:
            machine.stop()


def test_an_agent_that_cannot_start_is_explained(tmp_path: Path) -> None:
    """The drill said only "the agent exited with code 2"; why was in the agent's log, in a
    work directory the drill then removed."""
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("FOREWARN_")}
    base_env["PYTHONPATH"] = os.pathsep.join(
        [str(tmp_path / "site"), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(
        "import sys\nif 'forewarn.agent.cli' in sys.orig_argv:\n"
        "    sys.exit('forewarn: agent: cannot start: the reason is here')\n"
    )
    with pytest.raises(drill_local.DrillFailed) as failed:
        Machine(tmp_path / "drill", "local", base_env, "machine-1")
    assert "the agent exited with code 1" in str(failed.value)
    assert "forewarn: agent: cannot start: the reason is here" in str(failed.value)


def processes_of(directory: Path) -> list[str]:
    """Live processes whose command line or environment names `directory`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (entry / "stat").read_text().rpartition(")")[2].split()[0] == "Z":
                continue
            text = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
        except OSError:
            continue
        if str(directory).encode() in text:
            found.append(f"{entry.name}: {(entry / 'cmdline').read_bytes()!r}")
    return found


def _training_drill(work: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """A long `drill local --dir work`, returned once its demo trains."""
    drill = subprocess.Popen(
        # SIGHUP at its default, as typed into a terminal: under nohup the drill ignores it.
        as_in_a_terminal(forewarn_cmd("drill", "local", "--steps", "100000", "--dir", str(work))),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert drill.stdout is not None
    for line in drill.stdout:
        if "demo training started" in line:
            break
    return drill


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_drill_stopped_by_a_signal_leaves_no_process_behind(
    tmp_path: Path, env: dict[str, str], signum: int
) -> None:
    """`kill DRILL` (a CI timeout, a closed terminal) ended the drill at once, and its agent
    went on running, an orphan, with the demo too had it started."""
    work = tmp_path / "drill"
    drill = _training_drill(work, env)
    try:
        assert processes_of(work), "the drill's agent and demo run"
        drill.send_signal(signum)
        assert drill.wait(60) == 130
    finally:
        if drill.poll() is None:
            drill.kill()
            drill.wait()
    eventually(lambda: not processes_of(work), timeout=10, what="no process of the drill left")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_drill_killed_outright_takes_its_agent_and_demo_with_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """`kill -9` of the drill runs none of its cleanup: its agent and demo went on running,
    orphans holding the ports and the run directory. They get SIGTERM when the drill dies.
    Then the demo, having heard the agent, lingered 10 s retrying its SIGTERM save's ack to the
    agent that had stopped with it."""
    work = tmp_path / "drill"
    drill = _training_drill(work, env)
    try:
        running = " ".join(processes_of(work)).replace("\\x00", " ")
        assert "-m forewarn.clients.demo" in running and "forewarn.agent.cli agent" in running
        # The agent beats at once for a new subscriber; a second, periodic beat here is one
        # the demo, subscribed before it trained, has heard too.
        with Subscriber(f"ipc://{work}/machine-1/run/events", ("heartbeat",)) as beats:
            beats.ready().recv()
            beats.recv(timeout=30)
        drill.kill()
        drill.wait()
        try:
            eventually(lambda: not processes_of(work), timeout=8, what="no process left")
        except AssertionError as error:
            raise AssertionError(f"{error}: {processes_of(work)}") from None
    finally:
        if drill.poll() is None:
            drill.kill()
            drill.wait()
        for line in processes_of(work):  # this test's orphans, if the drill's did not go
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.partition(":")[0]), signal.SIGKILL)


def test_a_second_drill_in_the_same_dir_is_refused_while_the_first_runs(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A second `drill local --dir D` while one ran in D removed the running drill's
    checkpoints and machine directories ("the previous drill's checkpoints and machines in
    it were removed")."""
    work = tmp_path / "drill"
    first = _training_drill(work, env)
    try:
        second = subprocess.run(
            forewarn_cmd("drill", "local", "--dir", str(work)),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"--dir: {work}: a drill is running there" in second.stderr
        assert (work / "machine-1" / "agent.log").exists() and first.poll() is None
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(60)
    # Once the first has ended, the directory is free again.
    os.close(drill_local._lock_dir(work))


def test_an_interrupt_while_the_agent_starts_stops_that_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C before the drill's agent answered left that agent running: only a failed start
    stopped it."""
    started: list[subprocess.Popen[str]] = []

    def interrupted(control: str, agent: subprocess.Popen[str]) -> None:
        started.append(agent)
        raise KeyboardInterrupt

    monkeypatch.setattr(drill_local, "_wait_for_agent", interrupted)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("FOREWARN_")}
    with pytest.raises(KeyboardInterrupt):
        Machine(tmp_path / "drill", "local", base_env, "machine-1")
    assert started and started[0].poll() is not None


def test_a_run_too_short_for_the_drill_is_refused_before_anything_starts(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """`--steps 10` (and `--steps 1`): the drill started the agent and the demo, which
    finished before the drain was due, and failed with exit 1 (earlier still it waited 30 s,
    "the demo said nothing for 30s"). A run too short for the drill is refused, exit 2,
    with the least --steps it runs in, and no agent is started."""
    work = tmp_path / "drill"
    for steps in ("1", "10", str(drill_local.MIN_STEPS - 1)):
        done = subprocess.run(
            forewarn_cmd("drill", "local", "--steps", steps, "--dir", str(work)),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, done.stderr
        assert (
            f"drill local: --steps: at least {drill_local.MIN_STEPS} for this drill "
            f"(a drain at step 20 and a terminate 20 steps after that save), got {steps}"
        ) in done.stderr
        assert "agent started" not in done.stdout
        assert not (work / "machine-1").exists()


def test_the_least_steps_of_a_background_drill_leave_room_for_a_periodic_save() -> None:
    """With --background the terminate waits for the first periodic save after the drain:
    the least --steps leaves a whole interval after the drain's point (a fifth into the run)
    and the 20 steps after its save, with MIN_STEPS' margin."""
    for step_time, upload_delay in ((0.02, 1.5), (0.001, 0.01), (0.5, 30.0)):
        every = drill_local.periodic_every(step_time, upload_delay)
        least = drill_local.minimum_steps(step_time, True, upload_delay)
        assert least >= drill_local.MIN_STEPS
        latest_terminate = least // 5 + drill_local.AFTER_DRAIN + every
        assert least - latest_terminate >= 40, (step_time, upload_delay, least)
    assert drill_local.minimum_steps(0.02, False, 1.5) == drill_local.MIN_STEPS


def test_the_default_steps_of_a_background_drill_grow_to_the_least_it_runs_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A slow --upload-delay spaces the periodic saves beyond the default 400 steps: left
    out, --steps grows to the drill's least rather than being refused as a given 400 is."""
    from forewarn.agent.cli import main

    ran: list[int] = []

    def fake_drill(args: argparse.Namespace, reclaim: object = None, machines: int = 2) -> int:
        ran.append(args.steps)
        return 0

    monkeypatch.setattr(drill_local, "run_local_drill", fake_drill)
    work = str(tmp_path / "drill")
    least = drill_local.minimum_steps(0.02, True, 3.0)
    assert least > 400
    assert main(["drill", "local", "--background", "--upload-delay", "3", "--dir", work]) == 0
    assert ran == [least]
    given = ["--steps", "400", "--dir", work]
    assert main(["drill", "local", "--background", "--upload-delay", "3", *given]) == 2
    assert f"--steps: at least {least} for this drill" in capsys.readouterr().err
    assert main(["drill", "local", "--dir", work]) == 0
    assert ran == [least, 400]


def test_a_reclaim_scenario_without_torch_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reclaim scenarios run a torchrun job. Without torch (`pip install .`, as the README's
    first command does) every cell failed with `the job exited (code 1) before 'started'`,
    the job's traceback left in a work directory the drill then removed."""
    from forewarn.agent.cli import main

    # No torch here, nor in the processes the drill would start.
    monkeypatch.setitem(sys.modules, "torch", None)
    shadow = tmp_path / "no-torch" / "torch"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\")\n")
    monkeypatch.setenv("PYTHONPATH", str(shadow.parent))
    work = tmp_path / "drill"
    assert main(["drill", "local", "--scenario", "systemd", "--dir", str(work)]) == 2
    err = capsys.readouterr().err
    assert "--scenario systemd" in err and "torch" in err
    assert re.search(r"pip install .*\[torch\]", err), err
    assert not (work / "checkpoints").exists()


def test_a_resume_that_is_not_the_save_is_not_reported_as_nothing_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A resumed state that differs from the saved one printed "steps lost: 0" and exited 1
    with nothing more: the drill claimed a loss it had not measured."""

    class Tampered(drill_local.Demo):
        def next(self, timeout: float = drill_local.PHASE_TIMEOUT, **kwargs: Any) -> dict[str, Any]:
            event = super().next(timeout, **kwargs)
            if event.get("event") == "resumed":
                event["state"] = "not what was saved"
            return event

    monkeypatch.setattr(drill_local, "Demo", Tampered)
    monkeypatch.setenv("FOREWARN_RUNTIME_DIR", str(tmp_path / "run"))
    args = argparse.Namespace(
        dir=str(tmp_path / "drill"),
        keep=False,
        source="local",
        steps=150,
        step_time=0.02,
        background=False,
        scenario="quick",
    )
    assert drill_local.run_local_drill(args) == 1
    out = capsys.readouterr().out
    assert "steps lost: 0" not in out
    assert re.search(
        r"steps lost: unknown: resumed from step \d+, but the resumed state differs from the "
        r"one saved at step \d+",
        out,
    )


def test_a_dir_too_deep_for_the_agents_socket_is_refused_and_a_deep_tmpdir_is_not_used(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A socket path has at most 107 bytes. A --dir deep enough that
    DIR/machine-1/run/control is longer failed after the drill had started, as "unexpected
    ZMQError: File name too long ... please report it", exit 1; so did the plain `forewarn
    drill local` under a deep TMPDIR, which the user never chose. A --dir too deep is bad
    input (exit 2, naming the socket), and the default work directory falls back to /tmp."""
    deep = Path("/tmp") / f"forewarn-test-deep-{os.getpid()}-{'d' * 80}"
    try:
        done = subprocess.run(
            forewarn_cmd("drill", "local", "--dir", str(deep)),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stdout + done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("forewarn: drill local: --dir: "), lines
        assert "at most 107" in lines[0] and "unexpected" not in lines[0]
        assert "agent started" not in done.stdout

        deep.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            forewarn_cmd("drill", "local", "--steps", "100"),
            env={**env, "TMPDIR": str(deep)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "steps lost: 0" in done.stdout
        assert not list(deep.iterdir())  # nothing made, nothing left there
    finally:
        with contextlib.suppress(OSError):
            for path in sorted(deep.rglob("*"), reverse=True):
                path.rmdir() if path.is_dir() else path.unlink()
            deep.rmdir()


def test_a_scenario_drill_starts_its_dir_afresh_and_refuses_one_no_drill_made(
    tmp_path: Path,
) -> None:
    """A --scenario drill skipped what the quick drill does with its --dir: a directory
    holding someone's `checkpoints/` was used as the torch job's store (which resumes from it
    and prunes it to 4 generations), and one an earlier drill used was run on with that
    drill's checkpoints (the first cell resumed from the old run) and its machines' agent
    state (machine-1's agent restarted on the old run's notices)."""
    seen: list[list[str]] = []

    def reclaim(args: argparse.Namespace, work: Path, base_env: dict[str, str]) -> int:
        seen.append(sorted(path.name for path in work.iterdir()))
        (work / "checkpoints" / "step-000000000010").mkdir(parents=True)
        for n in range(1, 5):
            (work / f"machine-{n}" / "state").mkdir(parents=True)
        (work / "job-1.log").write_text("a job's log\n")
        return 0

    def args(work: Path) -> argparse.Namespace:
        return argparse.Namespace(dir=work, keep=False, scenario="systemd", lead=8.0)

    precious = tmp_path / "project" / "checkpoints" / "model.pt"
    precious.parent.mkdir(parents=True)
    precious.write_bytes(b"weights")
    with pytest.raises(drill_local.UsageError, match=r"--dir: .* already holds checkpoints"):
        drill_local.run_local_drill(args(tmp_path / "project"), reclaim=reclaim)
    assert precious.read_bytes() == b"weights" and not seen

    work = tmp_path / "drill"
    assert drill_local.run_local_drill(args(work), reclaim=reclaim) == 0
    assert drill_local.run_local_drill(args(work), reclaim=reclaim) == 0
    assert seen == [[drill_local.DRILL_MARK], [drill_local.DRILL_MARK]]


@pytest.mark.slow(16)
def test_an_upload_slower_than_the_drills_patience_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo says nothing while its final save waits for an upload: `--background
    --upload-delay 45s --deadline 3m` (a real checkpoint's upload time, rehearsed) failed as
    "the demo said nothing for 30s" with the final checkpoint on its way. The drill's patience
    with a quiet demo grows by what it asked of it (uploads, steps). Here with a patience of
    1 s and 2.5 s uploads, the same shape in seconds."""
    monkeypatch.setattr(drill_local, "QUIET_TIMEOUT", 1.0)
    args = argparse.Namespace(
        dir=tmp_path / "drill",
        keep=False,
        scenario="quick",
        source="local",
        step_time=0.02,
        background=True,
        upload_delay=2.5,
        deadline=30.0,
    )
    args.steps = drill_local.minimum_steps(args.step_time, True, args.upload_delay)
    code = drill_local.run_local_drill(args)
    out, err = capsys.readouterr()
    assert "said nothing" not in err, err
    assert code == 0, out + err
    assert "final save: waited for the upload in flight" in out and "steps lost: 0" in out
