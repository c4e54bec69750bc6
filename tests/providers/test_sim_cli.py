"""`forewarn simulate <provider>` as a real process, the same for all five: the URL on
stdout once listening, `--ready-file`, `--fault`, `--notice`, SIGTERM, and bad values exiting
2 with one `forewarn:` line."""

from __future__ import annotations

import argparse
import email.utils
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
from forewarn.agent.cli import main
from forewarn.protocol.errors import UsageError
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.sim_cli import MOST_DATE_AHEAD, date_ahead
from forewarn.providers.simulator import SimError, SimServer, Simulator
from hypothesis import example, given
from hypothesis import strategies as st
from support import (
    AgentProcess,
    SimControl,
    agent_env,
    as_in_a_terminal,
    eventually,
    forewarn_cmd,
    run_forewarn,
)

# provider -> (a path the endpoint answers 200, its headers, a notice kind it raises)
ENDPOINTS = {
    "aws": ("/latest/meta-data/instance-id", {}, "rebalance"),
    "gcp": ("/computeMetadata/v1/instance/id", {"Metadata-Flavor": "Google"}, "preempt"),
    "azure": (
        "/metadata/scheduledevents?api-version=2020-07-01",
        {"Metadata": "true"},
        "Preempt",
    ),
    "digitalocean": ("/metadata/v1/id", {}, None),
    "kubernetes": ("/api/v1/nodes/forewarn-sim-node", {}, "cordon"),
}
EXTRA = {"aws": ["--imdsv1"], "azure": ["--rate-limit", "1000"]}
# The signals a simulator stops on, SIGHUP being at its default in the processes started here.
STOPS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@contextmanager
def simulator(tmp_path: Path, *args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`forewarn simulate ARGS` as a process, with the URL it prints once listening; killed
    on the way out if the test did not end it."""
    proc = subprocess.Popen(
        forewarn_cmd("simulate", *args),
        env=agent_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield proc, proc.stdout.readline().strip()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_localhost_in_capitals_is_a_loopback_host(tmp_path: Path) -> None:
    # A host name is read in any case: `--host LOCALHOST` was "not an IP address", exit 2.
    with simulator(tmp_path, "gcp", "--host", "LOCALHOST", "--port", "0") as (proc, url):
        assert url.startswith("http://127.0.0.1:"), (url, proc.stderr and proc.stderr.read())
        with httpx.Client(base_url=url, trust_env=False, timeout=5) as http:
            assert http.get("/_sim/state").status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


@pytest.mark.parametrize("provider", sorted(ENDPOINTS))
def test_ready_file_url_fault_and_sigterm(provider: str, tmp_path: Path) -> None:
    path, headers, kind = ENDPOINTS[provider]
    ready = tmp_path / "sim" / "ready"
    ready.parent.mkdir()
    ready.write_text("http://stale.invalid\n")  # a previous run's file never says "ready"
    args = [provider, "--ready-file", str(ready), *EXTRA.get(provider, [])]
    args += ["--fault", "status,status=503,count=1"]
    if kind is not None:
        args += ["--notice", f"{kind},after=0.2"]
    with simulator(tmp_path, *args) as (proc, url):
        assert url.startswith("http://127.0.0.1:"), url
        eventually(lambda: ready.exists() and ready.read_text() == url + "\n", what="ready file")
        with httpx.Client(base_url=url, trust_env=False, timeout=5) as http:
            assert http.get(path, headers=headers).status_code == 503  # the --fault
            assert http.get(path, headers=headers).status_code == 200
            control = SimControl(url)
            fault = control.fault("status", status=502)
            assert http.get(path, headers=headers).status_code == 502
            control.end_fault(fault)
            assert http.get(path, headers=headers).status_code == 200
            if kind is not None:
                eventually(lambda: _raised(http), what="the scripted notice")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert not ready.exists()  # removed on exit


def _blocked_signals(pid: int) -> dict[str, set[int]]:
    """Each thread and the signals it blocks, from /proc (SigBlk is a hex mask). A thread in
    sigwait counts the signals it waits for as blocked: the kernel lifts them from SigBlk
    only for the wait, so that the waiting thread takes them."""
    threads = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            lines = (task / "status").read_text().splitlines()
            waiting = (task / "wchan").read_text()
        except (FileNotFoundError, ProcessLookupError):
            # A request's thread that has just ended: gone before the open (ENOENT), or
            # between the open and the read (ESRCH, seen once in a clean-clone run).
            continue
        status = dict(line.split(":\t", 1) for line in lines)
        mask = int(status["SigBlk"], 16)
        blocked = {signum for signum in range(1, 65) if mask & (1 << (signum - 1))}
        if "sigtimedwait" in waiting:
            blocked |= STOPS
        threads[f"{task.name} {status['Name'].strip()} ({waiting or '-'})"] = blocked
    return threads


@pytest.mark.parametrize("provider", sorted(ENDPOINTS))
def test_every_thread_leaves_the_stop_signals_to_the_main_threads_sigwait(
    provider: str, tmp_path: Path
) -> None:
    """A SIGTERM the kernel hands to a server or timer thread never reached the handler in the
    main thread, which slept on in its wait: 3 stops in 120 under load never ended. Every
    thread (the server's, a scripted notice's timer, a request's) must block SIGINT, SIGTERM
    and SIGHUP (at its default here), so that only the main thread's sigwait takes them."""
    path, headers, kind = ENDPOINTS[provider]
    args = ["simulate", provider, *EXTRA.get(provider, [])]
    if kind is not None:
        args += ["--notice", f"{kind},after=600"]  # a timer thread, alive until the stop
    proc = subprocess.Popen(
        # SIGHUP at its default, as typed into a terminal: under nohup it is no stop signal.
        as_in_a_terminal(forewarn_cmd(*args)),
        env=agent_env(tmp_path),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        with httpx.Client(base_url=url, trust_env=False, timeout=5) as http:
            assert http.get(path, headers=headers).status_code == 200
        threads = _blocked_signals(proc.pid)
        assert len(threads) >= (3 if kind is not None else 2), threads
        unguarded = {name: blocked for name, blocked in threads.items() if not blocked >= STOPS}
        assert not unguarded, f"threads that could take a stop signal: {unguarded}"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _raised(http: httpx.Client) -> bool:
    """Whether the scripted notice changed the simulator's state."""
    state = http.get("/_sim/state").json()
    return bool(
        state.get("rebalance")
        or state.get("preempted") == "TRUE"
        or state.get("events")
        or (state.get("node") or {}).get("spec", {}).get("unschedulable")
    )


BAD = [
    (["--port", "99999"], "--port"),
    (["--port", "http"], "--port"),
    (["--host", "0.0.0.0"], "loopback"),
    (["--host", "metadata"], "--host"),
    (["--fault", "earthquake"], "kind"),
    (["--fault", "status,status=99"], "status"),
    (["--fault", "hang,seconds=soon"], "seconds"),
    (["--fault", "status,oops"], "key=value"),
    (["--notice", "volcano"], "volcano"),
    # Past what a timer takes: its thread died with OverflowError, the simulator ran on.
    (["--notice", "volcano,after=99999999999d"], "volcano"),
    (["--ready-file"], "--ready-file"),
    (["--date-ahead", "soon"], "--date-ahead"),
    (["--date-ahead", "99999d"], "--date-ahead"),
    (["--date-ahead=-2x"], "--date-ahead"),
]


def _exit_code(args: list[str]) -> int:
    """The CLI's own entry point in this process (what the console script runs)."""
    try:
        return main(args)
    except SystemExit as done:
        return int(done.code or 0)


@pytest.mark.parametrize("provider", sorted(ENDPOINTS))
def test_bad_values_exit_2_with_one_line(provider: str, capsys: pytest.CaptureFixture[str]) -> None:
    for bad, named in BAD:
        assert _exit_code(["simulate", provider, *bad]) == 2, bad
        out, err = capsys.readouterr()
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("forewarn: "), (bad, err)
        assert named in lines[0], (bad, lines[0])
        assert "Traceback" not in err and out == ""


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["aws", "--spot-after", "soon"], "--spot-after"),
        (["aws", "--spot-after", "99999999999d"], "--spot-after: after: expected a duration"),
        (
            ["gcp", "--notice", "preempt,after=99999999d"],
            "after: expected a duration (90s, 15m, 2h, 1d)",
        ),
        (["aws", "--scheduled", "volcano@1h"], "volcano"),
        (["gcp", "--maintenance-kind", "REBOOT"], "--maintenance-kind"),
        (["azure", "--vmss-name", "set"], "instance-id"),
        (["kubernetes", "--max-watch-seconds", "-"], "--max-watch-seconds"),
        (["digitalocean", "--droplet-id", "x"], "--droplet-id"),
    ],
)
def test_bad_provider_values_exit_2_with_one_line(
    args: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _exit_code(["simulate", *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("forewarn: "), (args, lines)
    assert named in lines[0], (args, lines[0])


@pytest.mark.parametrize("provider", sorted(ENDPOINTS))
def test_help_offers_notice_only_where_the_simulator_raises_notices(
    provider: str,
    tmp_path: Path,
    run_forewarn_forked: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    # `forewarn simulate digitalocean --help` offered --notice, which could only exit 2 there:
    # droplet metadata has no notice (DigitalOcean's reclaim notice is an email).
    # AWS's and DigitalOcean's (the one without notices) as fresh interpreters, the others
    # forked from a process that loaded the command line once (~0.02 CPU-s each instead of
    # ~0.2; tests/conftest.py): the same command, environment, exit code and output.
    run = run_forewarn if provider in ("aws", "digitalocean") else run_forewarn_forked
    helped = run("simulate", provider, "--help", env=agent_env(tmp_path))
    assert helped.returncode == 0, helped.stderr
    raises = ENDPOINTS[provider][2] is not None
    assert ("--notice" in helped.stdout) == raises, helped.stdout
    if not raises:
        given = run("simulate", provider, "--notice", "spot", env=agent_env(tmp_path))
        assert given.returncode == 2 and given.stdout == ""
        (line,) = given.stderr.strip().splitlines()
        assert line.startswith("forewarn: ") and "--notice" in line, line


def test_a_bad_value_from_a_real_process(tmp_path: Path) -> None:
    done = run_forewarn("simulate", "gcp", "--fault", "status,status=99", env=agent_env(tmp_path))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        "forewarn: simulate gcp: --fault: gcp: fault: status: a whole number from 100 to 599, "
        "got 99"
    )


@pytest.mark.parametrize("provider", sorted(ENDPOINTS))
def test_notice_and_fault_flags_take_kinds_in_any_case(provider: str) -> None:
    # `--notice SPOT` passed the case-blind check, then AWS, GCP and Kubernetes refused it.
    import importlib

    from forewarn.agent.cli import build_parser

    command = importlib.import_module(f"forewarn.providers.{provider}.simulate").COMMAND
    kind = ENDPOINTS[provider][2]
    notice = ["--notice", kind.upper()] if kind else []
    argv = ["simulate", provider, *EXTRA.get(provider, []), "--fault", "RESET,count=1", *notice]
    sim = command.start(build_parser("simulate").parse_args(argv))
    try:
        assert [fault["kind"] for fault in sim.faults()] == ["reset"]
        raised = {
            "aws": "'rebalance': {'noticeTime'",
            "gcp": "'preempted': 'TRUE'",
            "azure": "'EventType': 'Preempt'",
            "kubernetes": "'unschedulable': True",
        }
        if kind:
            assert raised[provider] in str(sim.state()), sim.state()
    finally:
        sim.cancel_scripts()


def test_ready_file_reads_tilde_as_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `--ready-file=~/sim.url` (no shell expands a `~` after `=`) wrote ./~/sim.url, and the
    # script waiting for ~/sim.url waited for good.
    from forewarn.agent.cli import build_parser

    monkeypatch.setenv("HOME", str(tmp_path))
    args = build_parser("simulate").parse_args(["simulate", "gcp", "--ready-file=~/sim.url"])
    assert args.ready_file == tmp_path / "sim.url"


@pytest.mark.parametrize("provider", sorted(ENDPOINTS))
def test_a_fault_flag_takes_after_as_the_control_api_does(provider: str) -> None:
    # `--fault status,after=30s` exited 2 ("unknown field(s) after") although POST
    # /_sim/faults takes "after" and the flag's parser reads it as a duration. Until it
    # starts it is listed as pending: its id showed nowhere, and nothing could end it.
    import importlib

    from forewarn.agent.cli import build_parser

    command = importlib.import_module(f"forewarn.providers.{provider}.simulate").COMMAND
    argv = ["simulate", provider, *EXTRA.get(provider, []), "--fault", "status,after=0.2s"]
    sim = command.start(build_parser("simulate").parse_args(argv))
    try:
        pending = sim.faults()
        assert [(fault["kind"], fault["pending"]) for fault in pending] == [("status", True)]
        started = [(pending[0]["id"], "status", False)]
        eventually(lambda: [(f["id"], f["kind"], f["pending"]) for f in sim.faults()] == started)
    finally:
        sim.cancel_scripts()
    assert _exit_code(["simulate", provider, "--fault", "status,after=99999999d"]) == 2


def _start(provider: str, *args: str) -> Simulator:
    """`forewarn simulate PROVIDER ARGS...` as the command starts it, not yet serving."""
    import importlib

    from forewarn.agent.cli import build_parser

    command = importlib.import_module(f"forewarn.providers.{provider}.simulate").COMMAND
    return command.start(build_parser("simulate").parse_args(["simulate", provider, *args]))


# provider -> a notice with a bad field, and the bad value the refusal names
BAD_LATER = {
    "aws": ({"kind": "spot", "action": "explode"}, "explode"),
    "gcp": ({"kind": "maintenance", "type": "REBOOT"}, "REBOOT"),
}


@pytest.mark.parametrize("provider", sorted(BAD_LATER))
def test_a_notice_for_later_is_checked_now(provider: str) -> None:
    # `--notice spot,action=explode,after=5` started, and 5 s later only logged that the
    # notice failed; POST /_sim/notices with "after" answered 202 for it. A script waiting
    # for the notice waited for good.
    notice, named = BAD_LATER[provider]
    flag = ",".join([notice["kind"], *(f"{k}={v}" for k, v in notice.items() if k != "kind")])
    with pytest.raises(UsageError, match=named):
        _start(provider, "--notice", f"{flag},after=1").cancel_scripts()
    with SimServer(_start(provider)) as server:
        answer = httpx.post(
            server.url + "/_sim/notices", json={**notice, "after": 1}, trust_env=False
        )
    assert answer.status_code == 400 and named in answer.json()["error"], answer.text


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["aws", "--action", "stop"], "--spot-after"),
        (["aws", "--spot-lead", "30s"], "--spot-after"),
        (["gcp", "--maintenance-kind", "MIGRATE"], "--maintenance-after"),
        (["gcp", "--maintenance-duration", "60"], "--maintenance-after"),
        (["gcp", "--upcoming-in", "1h"], "--upcoming-after"),
    ],
)
def test_an_option_of_a_scripted_notice_without_its_after_is_refused(
    argv: list[str], named: str
) -> None:
    # `forewarn simulate gcp --maintenance-kind MIGRATE --maintenance-duration 60` (the
    # --maintenance-after forgotten) served NONE for good: the options shape a notice that
    # only --maintenance-after raises, and nothing said so.
    with pytest.raises(UsageError, match=named):
        _start(*argv).cancel_scripts()
    _start(*argv, named, "0").cancel_scripts()  # with it, the same options are taken


@pytest.mark.parametrize(
    ("provider", "notice", "named"),
    [
        ("aws", {"kind": "spot", "acton": "stop"}, "acton"),
        ("aws", {"kind": "scheduled", "not_befor": "10m"}, "not_befor"),
        ("gcp", {"kind": "maintenance", "typ": "MIGRATE"}, "typ"),
        ("gcp", {"kind": "upcoming", "start": 60}, "start"),
    ],
)
def test_a_notice_field_the_kind_does_not_have_is_refused(
    provider: str, notice: dict[str, object], named: str
) -> None:
    # {"kind": "maintenance", "typ": "MIGRATE"} raised a TERMINATE_ON_HOST_MAINTENANCE (the
    # type's default), {"kind": "spot", "acton": "stop"} a terminate: a typo became another
    # notice than the one asked for, and nothing said so.
    sim = _start(provider)
    with SimServer(sim) as server:
        for body in (notice, {**notice, "after": 60}):
            answer = httpx.post(server.url + "/_sim/notices", json=body, trust_env=False)
            assert answer.status_code == 400 and named in answer.json()["error"], answer.text
        state = httpx.get(server.url + "/_sim/state", trust_env=False).json()
    sim.cancel_scripts()
    assert state.get("spot") is None and state.get("maintenance-event") in (None, "NONE")
    assert not state.get("scheduled") and state.get("upcoming-maintenance") is None


def test_a_yes_or_no_notice_field_is_read_as_one() -> None:
    # `--notice spot,drift=false` turned drift ON (the text "false" is true), and so did
    # {"drift": "no"}; `--notice upcoming,can_reschedule=false` said the window could be
    # rescheduled.
    aws = _start("aws", "--notice", "spot,drift=false")
    assert isinstance(aws, ImdsSimulator) and aws.spot is not None
    assert aws.spot[1].fixed is not None  # a fixed time: no drift
    for bad in ("no", 1, None):
        with pytest.raises(SimError, match="drift"):
            aws.raise_notice("spot", {"drift": bad})
    gcp = _start("gcp", "--notice", "upcoming,can_reschedule=False")
    assert isinstance(gcp, GcpSimulator) and gcp.upcoming is not None
    assert gcp.upcoming["can_reschedule"] is False
    with pytest.raises(UsageError, match="can_reschedule"):
        _start("gcp", "--notice", "upcoming,can_reschedule=0")


@given(st.text(max_size=20))
@example("-2h")
@example("- 2h")
@example("--2h")
@example("3650d")
@example("-3651d")
def test_any_date_ahead_is_seconds_within_the_bound_or_refused(text: str) -> None:
    try:
        seconds = date_ahead(text)
    except argparse.ArgumentTypeError as error:
        assert str(error)
        return
    assert abs(seconds) <= MOST_DATE_AHEAD


# `--date-ahead -2h`, as people write a flag's value, was argparse's "expected one argument":
# the one flag of `simulate` whose value may be negative.
@pytest.mark.parametrize("spelled", [("--date-ahead=-2h",), ("--date-ahead", "-2h")])
def test_a_date_ahead_moves_every_answers_date(tmp_path: Path, spelled: tuple[str, ...]) -> None:
    """The simulator's `Date` stands for a provider's clock that this machine's is off."""
    with simulator(tmp_path, "gcp", *spelled) as (proc, url):
        assert url.startswith("http://"), (url, proc.stderr and proc.stderr.read())
        with httpx.Client(base_url=url, trust_env=False, timeout=5) as http:
            answer = http.get("/computeMetadata/v1/instance/id", headers=GOOGLE)
        date = email.utils.parsedate_to_datetime(answer.headers["Date"])
        behind = (datetime.now(timezone.utc) - date).total_seconds()
        assert 7200 - 3 < behind < 7200 + 3, answer.headers["Date"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


# provider -> (the notice raised on the simulator, seconds from it to the deadline the agent
# publishes for it): an AWS spot interruption two minutes ahead, an Azure eviction whose
# NotBefore is 30 s ahead.
LEADS = {
    "aws": ({"kind": "spot", "lead": 120}, 120.0),
    "azure": ({"kind": "Preempt", "not_before_seconds": 60}, 60.0),
}


# The simulator's command line is the check: its agents fork (`forked_agents`, tests/conftest.py).
@pytest.mark.parametrize("ahead", ["2h", "-2h"])
@pytest.mark.parametrize("provider", sorted(LEADS))
@pytest.mark.usefixtures("forked_agents")
def test_a_notice_under_a_date_ahead_reaches_the_job_with_its_lead(
    provider: str, ahead: str, tmp_path: Path
) -> None:
    """A simulator whose `Date` is 2 h off stands for a provider whose clock is right and a
    node whose clock is not: the times in its notices are on its clock, as its `Date` is.
    They were on this machine's, so an agent that read them through `Date` (as it must)
    published a two-minute spot deadline 2 h in the past (an immediate terminate, then the
    notice retired as expired), or 2 h late with `--date-ahead=-2h`."""
    notice, lead = LEADS[provider]
    with simulator(tmp_path, provider, f"--date-ahead={ahead}") as (proc, url):
        env = agent_env(tmp_path, **{f"FOREWARN_{provider.upper()}_URL": url})
        with AgentProcess(tmp_path, providers=(provider,), env=env) as agent:
            with httpx.Client(base_url=url, trust_env=False, timeout=5) as http:
                assert http.post("/_sim/notices", json=notice).status_code == 201
            raised = datetime.now(timezone.utc)

            def published() -> list[dict[str, object]]:
                return list(agent.control({"op": "status"})["active"])

            (active,) = eventually(published, what="the notice in the agent's status")
        deadline = datetime.fromisoformat(str(active["deadline"]).replace("Z", "+00:00"))
        off = (deadline - raised).total_seconds() - lead
        # Whole seconds on the wire (Azure rounds NotBefore up), and the raise took a moment.
        assert -3 < off < 3, (active, agent.output())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def test_a_gcp_window_under_a_date_ahead_starts_on_the_providers_clock() -> None:
    """GCP's upcoming maintenance window `start_in` from now is from the `Date`'s now."""
    sim = GcpSimulator()
    sim.date_ahead = 7200.0
    with SimServer(sim) as server, httpx.Client(base_url=server.url, trust_env=False) as http:
        raised = http.post("/_sim/notices", json={"kind": "upcoming", "start_in": "1h"})
        assert raised.status_code == 201, raised.text
        answer = http.get("/computeMetadata/v1/instance/upcoming-maintenance", headers=GOOGLE)
    date = email.utils.parsedate_to_datetime(answer.headers["Date"])
    start = datetime.fromisoformat(answer.json()["window_start_time"].replace("Z", "+00:00"))
    assert 3600 - 3 < (start - date).total_seconds() < 3600 + 3, answer.text


GOOGLE = {"Metadata-Flavor": "Google"}


STOPPED_BY = {"ctrl-c": signal.SIGINT, "kill": signal.SIGTERM, "terminal-closed": signal.SIGHUP}


@pytest.mark.parametrize("stop", list(STOPPED_BY))
def test_a_simulator_stopped_as_users_stop_it_removes_its_ready_file_and_says_so(
    stop: str, tmp_path: Path
) -> None:
    """A closed terminal's SIGHUP killed the simulator where it stood: its --ready-file went
    on naming a URL nobody served, for the script or agent that reads it. Each stop removes it,
    and the last line on stderr says what stopped the simulator."""
    ready = tmp_path / "sim.url"
    proc = subprocess.Popen(
        as_in_a_terminal(forewarn_cmd("simulate", "aws", "--ready-file", str(ready))),
        env=agent_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own terminal's group: Ctrl-C and a hangup reach it alone
    )
    try:
        eventually(ready.exists, what="the ready file")
        signum = STOPPED_BY[stop]
        os.killpg(proc.pid, signum)
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, (proc.returncode, err)
        assert not ready.exists(), ready.read_text()
        assert err.strip().splitlines()[-1] == (
            f"forewarn simulate aws: stopped by {signal.Signals(signum).name}"
        ), err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_simulator_under_nohup_serves_on_after_a_hangup(tmp_path: Path) -> None:
    """`nohup forewarn simulate ... &` asked for a simulator that outlives its terminal: a
    SIGHUP ignored when it starts stays ignored."""
    proc = subprocess.Popen(
        ["nohup", *forewarn_cmd("simulate", "aws")],
        env=agent_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        proc.send_signal(signal.SIGHUP)
        with httpx.Client(base_url=url, trust_env=False, timeout=5) as http:
            assert http.get("/_sim/state").status_code == 200
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
