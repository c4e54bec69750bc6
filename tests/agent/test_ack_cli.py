"""`forewarn ack`: a job that is no client library (a shell script that waited with `forewarn
wait`, then saved) tells the agent it saved, as the clients' ack does. Without it such a job
could not release the flag file's drain, let Azure's `after-ack` approve, or give its flush
time to the exit margin and `forewarn plan`."""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest
from forewarn.agent.cli import (
    SAVE_START_SLACK,
    _held_for_client,
    _holder_above,
    _noticed_after,
    one_line_note,
)
from forewarn.protocol.timefmt import format_time, parse_time
from forewarn.providers.azure.simulate import AzureSimulator
from forewarn.providers.simulator import SimServer
from hypothesis import given
from hypothesis import strategies as st
from support import AgentProcess, Subscriber, agent_env, eventually, run_forewarn

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py); tests/agent/test_agent.py starts them fresh.
pytestmark = pytest.mark.usefixtures("forked_agents")

Ack = Callable[..., subprocess.CompletedProcess[str]]


def _ack(agent: AgentProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """`forewarn ack ARGS` to `agent`, as its own fresh interpreter."""
    return run_forewarn("ack", *args, env=agent.env, timeout=60)


@pytest.fixture
def ack_forked(run_forewarn_forked: Ack) -> Ack:
    """`_ack` forked from a process that loaded forewarn's command line once
    (`run_forewarn_forked`, tests/conftest.py: its own process, environment, output and exit
    code, ~0.05 CPU-s instead of ~0.25). The first test's ack, the bad inputs and the acks
    under a stepped clock run `ack` fresh, as a user does; the other tests' acks fork."""

    def ack(agent: AgentProcess, *args: str) -> subprocess.CompletedProcess[str]:
        return run_forewarn_forked("ack", *args, env=agent.env, timeout=60)

    return ack


def test_an_ack_from_the_shell_releases_the_flag_files_drain(tmp_path: Path) -> None:
    with AgentProcess(tmp_path) as agent, agent.subscriber() as sub:
        flag = Path(agent.env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
        flag.write_text("")
        drain = sub.notice(timeout=5)
        assert drain["action"] == "drain" and drain["id"].startswith("local/flag/")
        assert agent.control({"op": "status"})["ok"]
        assert flag.exists(), "removed before anything was saved"
        done = _ack(agent, drain["id"], "--step", "120", "--flush-seconds", "2.5s")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"acked {drain['id']}: saved (step 120, flush 2.5s)"
        cleared = sub.notice(timeout=5)
        assert (cleared["action"], cleared["id"]) == ("clear", drain["id"])
        assert not flag.exists()
    log = agent.output()
    assert f"ack {drain['id']} from ?: step=120 flush=2.5s outcome=saved" in log, log


def test_an_ack_of_a_notice_a_client_holds_does_not_release_it_for_that_client(
    tmp_path: Path, ack_forked: Ack
) -> None:
    """Anonymous, the shell's ack completes only a notice nobody else holds: a library client
    subscribed as `client/<id>` still has to save before the flag goes."""
    with AgentProcess(tmp_path) as agent:
        flag = Path(agent.env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
        with Subscriber(agent.events, ("notice", "client/trainer")).ready() as sub:
            flag.write_text("")
            drain = sub.notice(timeout=5)
            assert ack_forked(agent, drain["id"]).returncode == 0
            assert agent.control({"op": "status"})["ok"]
            assert flag.exists(), "released while the trainer had not saved"
            ack = {"op": "ack", "notice_id": drain["id"], "client": "trainer"}
            assert agent.control(ack)["ok"]
            assert sub.notice(timeout=5)["action"] == "clear"
        assert not flag.exists()


def test_an_ack_from_the_shell_lets_azure_approve_afterack_forked(
    tmp_path: Path, ack_forked: Ack
) -> None:
    sim = AzureSimulator(vm_name="gpu-0", removal_after=60, rate_limit=10, approval_start_after=600)
    with SimServer(sim) as server:
        env = agent_env(
            tmp_path,
            FOREWARN_AZURE_URL=server.url,
            FOREWARN_AZURE_VM_NAME="gpu-0",
            FOREWARN_AZURE_INTERVAL="0.25",
            FOREWARN_AZURE_APPROVE="after-ack",
        )
        event_id = sim.raise_notice("Preempt", {"not_before_seconds": 600})
        with AgentProcess(tmp_path, providers=("azure",), env=env) as agent:
            eventually(
                lambda: agent.control({"op": "status"})["active"], timeout=15, what="the Preempt"
            )
            assert sim.approvals == []
            done = ack_forked(agent, f"azure/{event_id}", "--flush-seconds", "4")
            assert done.returncode == 0, done.stderr
            eventually(lambda: sim.approvals, timeout=15, what="the approval")
            assert [a["EventId"] for a in sim.approvals] == [event_id]


def test_an_ack_of_no_active_notice_says_so_and_sends_nothing(
    tmp_path: Path, ack_forked: Ack
) -> None:
    with AgentProcess(tmp_path) as agent:
        agent.control({"op": "notify", "action": "drain", "id": "local/real"})
        done = ack_forked(agent, "local/typo", "--step", "3")
        assert done.returncode == 1
        assert done.stderr.strip() == (
            "forewarn: ack: no active notice 'local/typo' (active: local/real); nothing acked"
        )
        assert agent.control({"op": "status"})["ok"]
    assert "ack local/typo" not in agent.output()


def test_an_ack_of_no_notice_counts_the_flush_only(tmp_path: Path, ack_forked: Ack) -> None:
    with AgentProcess(tmp_path) as agent:
        done = ack_forked(agent, "--flush-seconds", "1m30s", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"ok": True}
        line = "ack (no notice) from ?: step=None flush=90.0s outcome=saved"
        eventually(lambda: line in agent.output(), what="the ack's log line")
    # What `forewarn plan` reads the flush time from.
    telemetry = Path(agent.env["FOREWARN_STATE_DIR"]) / "telemetry.jsonl"
    records = [json.loads(text) for text in telemetry.read_text().splitlines()]
    acks = [record for record in records if record["kind"] == "ack"]
    assert [a["flush_seconds"] for a in acks] == [90.0], records


def test_a_failed_save_acked_from_the_shell_keeps_the_flag_and_says_why(
    tmp_path: Path, ack_forked: Ack
) -> None:
    with AgentProcess(tmp_path) as agent, agent.subscriber() as sub:
        flag = Path(agent.env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
        flag.write_text("")
        drain = sub.notice(timeout=5)
        done = ack_forked(agent, drain["id"], "--outcome", "failed", "--note", "disk full")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"acked {drain['id']}: failed"
        line = f"ack {drain['id']} from ?: step=None flush=none outcome=failed (disk full)"
        eventually(lambda: line in agent.output(), what="the ack's log line")
        assert flag.exists(), "a failed save released the drain"


def test_a_note_of_several_lines_is_sent_as_one_and_the_ack_goes(
    tmp_path: Path, ack_forked: Ack
) -> None:
    # `--note "$(tail -n 2 save.log)"`: the agent refused the whole ack for the note's line
    # break (exit 2, nothing sent), so the save's flush was lost and the loop under `set -e`
    # ended there. As a blank --step, it is said on stderr and the ack goes.
    with AgentProcess(tmp_path) as agent:
        done = ack_forked(agent, "--outcome", "failed", "--note", "disk full\r\n\tretrying\x1b[0m ")
        assert done.returncode == 0, done.stderr
        assert done.stderr.startswith("forewarn: ack: --note: "), done.stderr
        assert "one line" in done.stderr and len(done.stderr.splitlines()) == 1
        line = "outcome=failed (disk full retrying [0m)"
        eventually(lambda: line in agent.output(), what="the ack's log line")


@given(st.text(max_size=60))
def test_a_note_made_one_line_is_one_the_agent_takes(note: str) -> None:
    from forewarn.agent.protocol import AckRequest

    made = one_line_note(note)
    if made is None:  # nothing but control characters and space
        assert all(ord(c) < 0x20 or ord(c) == 0x7F or c in string.whitespace for c in note)
        return
    AckRequest(op="ack", note=made)  # raises on a note the agent refuses
    if note == note.strip() and not any(ord(c) < 0x20 or ord(c) == 0x7F for c in note):
        assert made == note


def test_a_blank_notice_id_is_refused_not_sent_as_no_notice(tmp_path: Path) -> None:
    done = run_forewarn("ack", " ", "--runtime-dir", str(tmp_path), env=agent_env(tmp_path))
    assert done.returncode == 2
    assert "NOTICE_ID: empty; leave NOTICE_ID out for an ack of no notice" in done.stderr


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--step", "-1"), "--step"),
        (("--step", "1.5"), "--step"),
        (("--flush-seconds", "soon"), "--flush-seconds"),
        (("--outcome", "resumed"), "--outcome"),
        (("--note", "x" * 501), "--note"),
        (("",), "NOTICE_ID"),
        (("local/" + "x" * 200,), "NOTICE_ID"),
    ],
)
def test_a_bad_ack_exits_2_naming_what_is_wrong(
    tmp_path: Path, args: tuple[str, ...], named: str
) -> None:
    done = run_forewarn("ack", *args, "--runtime-dir", str(tmp_path), env=agent_env(tmp_path))
    assert done.returncode == 2, (done.stdout, done.stderr)
    # Prefixed as every other error of the command: `forewarn: --note: at most 500
    # characters` did not say which command of a script's it was.
    assert done.stderr.startswith(f"forewarn: ack: {named}: "), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_an_ack_without_its_id_from_a_wait_loops_client_acks_what_was_held_for_it(
    tmp_path: Path, ack_forked: Ack
) -> None:
    """`forewarn wait --client me --pid $$`, the save, then `forewarn ack --client me` with
    the notice's id left out: the ack named no notice, the hold stayed (the flag file and its
    drain kept until the notice's end), and the loop's next `wait` returned the same drain
    again, at once: the job saved over and over for one notice."""
    with AgentProcess(tmp_path) as agent:
        flag = agent.runtime / "checkpoint-now"
        flag.write_text("")
        eventually(lambda: agent.control({"op": "status"})["active"], what="the flag's drain")
        waited = run_forewarn(
            "wait",
            "--for",
            "drain",
            "--client",
            "me",
            "--pid",
            str(os.getpid()),
            "--json",
            env=agent.env,
            timeout=60,
        )
        assert waited.returncode == 0, waited.stderr
        drain = json.loads(waited.stdout)
        done = ack_forked(agent, "--client", "me", "--step", "7")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"acked {drain['id']}: saved (step 7)", done.stdout
        eventually(lambda: not flag.exists(), what="the flag file released")
        status = agent.control({"op": "status"})
        assert status["held_for"] == {} and status["active"] == [], status


def test_the_help_of_notice_id_says_what_an_ack_without_one_acks() -> None:
    """`forewarn ack --help` said an ack without NOTICE_ID acks no notice ("the save counts
    only for the flush times"); with `--client` it acks each notice held for that client (the
    test above), which is what a loop's ack without the id relies on to release its `wait`'s
    notice."""
    import contextlib
    import io

    from forewarn.agent.cli import build_parser

    shown = io.StringIO()
    with contextlib.redirect_stdout(shown), pytest.raises(SystemExit):
        build_parser().parse_args(["ack", "--help"])
    text = " ".join(shown.getvalue().split())
    assert "with --client, each notice held for that client" in text, text
    # the periodic save's ack leaves out what a backgrounded loop's save still holds
    assert "with --flush-seconds only those noticed before the save began" in text, text
    assert "without --client, none" in text, text


_IDS = st.sampled_from(["a", "b", "c"])


@given(
    active=st.lists(_IDS, unique=True),
    held_for=st.dictionaries(_IDS, st.dictionaries(st.sampled_from(["me", "other"]), st.none())),
)
def test_the_notices_an_ack_without_id_names_are_the_active_ones_held_for_its_client(
    active: list[str], held_for: dict[str, dict[str, None]]
) -> None:
    status = {"active": [{"id": notice_id} for notice_id in active], "held_for": held_for}
    named = _held_for_client(status, "me")
    assert named == [n for n in active if "me" in held_for.get(n, {})]


ANONYMOUS_ACK_IN_THE_LOOP = r"""
set -e
fw() { "$PY" -m forewarn.agent.cli "$@"; }
notice=$(fw wait --for drain --client me --pid $$ --json)
id=$(printf '%s\n' "$notice" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["id"])')
fw ack "$id" --step 3
fw wait --for drain --client me --pid $$ --json --timeout 2s || echo "waited: $?"
"""


def test_an_ack_without_client_from_the_loop_that_holds_the_notice_acks_as_its_client(
    tmp_path: Path,
) -> None:
    """The README's loop with `--client` left out of its `forewarn ack "$id"`: the anonymous
    ack kept the hold the loop's own `wait --client me --pid $$` had put, and the next `wait`
    returned the same drain at once: the loop saved over and over for one notice. The hold
    names the loop's shell, an ancestor of the ack: that is the client acking."""
    with AgentProcess(tmp_path) as agent:
        flag = agent.runtime / "checkpoint-now"
        flag.write_text("")
        eventually(lambda: agent.control({"op": "status"})["active"], what="the flag's drain")
        env = {**agent.env, "PY": sys.executable}
        done = subprocess.run(
            ["bash", "-c", ANONYMOUS_ACK_IN_THE_LOOP],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "waited: 1" in done.stdout, (done.stdout, done.stderr)
        assert "as client me" in done.stderr, done.stderr
        eventually(lambda: not flag.exists(), what="the flag file released")


def test_an_anonymous_ack_is_no_clients_when_its_shell_holds_for_several() -> None:
    """Loops started in the background of one script share its `$$`: an ack without
    `--client` from under that shell is not known to be either loop's, and taken for the
    other's it released that loop's hold while it still saved."""
    shell = os.getppid()
    status = {"active": [{"id": "n"}], "held_for": {"n": {"a": shell, "b": shell}}}
    assert _holder_above(status, "n", os.getpid()) is None
    status["held_for"] = {"n": {"a": shell, "b": 1 << 30}}
    assert _holder_above(status, "n", os.getpid()) == ("a", shell)
    assert _holder_above(status, "other", os.getpid()) is None


_HOLDERS = st.one_of(
    st.none(), st.booleans(), st.text(max_size=3), st.sampled_from([os.getppid(), 1 << 30])
)


@given(
    held_for=st.dictionaries(_IDS, st.dictionaries(st.sampled_from(["a", "b"]), _HOLDERS)),
    named=_IDS,
)
def test_an_anonymous_ack_takes_only_the_one_client_its_own_shell_holds_for(
    held_for: dict[str, dict[str, object]], named: str
) -> None:
    status = {"active": [{"id": n} for n in ("a", "b", "c")], "held_for": held_for}
    found = _holder_above(status, named, os.getpid())
    shell = os.getppid()
    holding = {
        client
        for notice_id, clients in held_for.items()
        if notice_id == named
        for client, pid in clients.items()
        if pid == shell and not isinstance(pid, bool)
    }
    assert found == ((holding.pop(), shell) if len(holding) == 1 else None)


def test_an_ack_of_a_save_over_an_hour_still_releases_its_notice(
    tmp_path: Path, ack_forked: Ack
) -> None:
    """`--flush-seconds "$(( $(date +%s) - started ))s"` after a save of more than an hour
    (a checkpoint of terabytes on a slow link): the ack was refused (exit 2) and sent
    nothing, so the notice stayed held, and a loop under `set -e` ended there. Then the figure
    was left out, and the agent's exit margin never learnt that this job's saves are slow: at
    the next drain it escalated at its floor, far too late for a save of an hour. The figure
    goes as the hour the agent takes (as the client library sends it): the widest margin."""
    with (
        AgentProcess(tmp_path) as agent,
        agent.subscriber() as sub,
        agent.subscriber(("heartbeat",)) as beats,
    ):
        flag = agent.runtime / "checkpoint-now"
        flag.write_text("")
        drain = sub.notice(timeout=5)
        done = ack_forked(agent, drain["id"], "--step", "9", "--flush-seconds", "3700s")
        assert done.returncode == 0, done.stderr
        assert "--flush-seconds: 3700s is more than 3600s" in done.stderr, done.stderr
        assert done.stdout.strip() == f"acked {drain['id']}: saved (step 9, flush 3600s)", (
            done.stdout
        )
        assert sub.notice(timeout=5)["action"] == "clear"
        assert not flag.exists()
        assert eventually(lambda: beats.recv()[1].get("exit_margin") == 7200.0, timeout=10)


def test_an_ack_of_a_notice_that_ended_while_the_job_saved_is_no_typo(
    tmp_path: Path, ack_forked: Ack
) -> None:
    """The loop's `wait` returned a drain, and while the job saved its source withdrew it (the
    flag file removed by hand, a node uncordoned, a maintenance cancelled): the loop's
    `forewarn ack "$id"` exited 1 as for a mistyped id, which ended a loop under `set -e`, so
    the terminate after it was never saved for. The agent names the notices that ended lately;
    an ack of one is sent (the flush counts) and exits 0, saying so. A typo still exits 1."""
    with AgentProcess(tmp_path) as agent, agent.subscriber() as sub:
        flag = agent.runtime / "checkpoint-now"
        flag.write_text("")
        drain = sub.notice(timeout=5)
        flag.unlink()
        assert sub.notice(timeout=5)["action"] == "clear"
        done = ack_forked(agent, drain["id"], "--client", "me", "--flush-seconds", "4s")
        assert done.returncode == 0, done.stderr
        assert f"{drain['id']} ended while" in done.stderr, done.stderr
        typo = ack_forked(agent, drain["id"] + "x", "--client", "me")
        assert typo.returncode == 1, typo.stderr
        line = f"ack {drain['id']} from me: step=None flush=4.0s outcome=saved"
        eventually(lambda: line in agent.output(), what="the ack's log line")


PERIODIC_ACK_BESIDE_THE_LOOP = r"""
set -e
fw() { "$PY" -m forewarn.agent.cli "$@"; }
fw wait --for drain --client me --pid $$ --json > /dev/null
fw ack --flush-seconds 2s
"""


def test_a_periodic_ack_of_no_notice_from_the_loops_shell_keeps_its_hold(
    tmp_path: Path,
) -> None:
    """A script that reports its periodic saves' flush times (`forewarn ack --flush-seconds`,
    no notice, no client) beside its wait loop, under the same `$$`: that ack is no save for
    the notice the loop holds, and taken for the loop's it released the hold while the loop
    still saved (the flag removed, Azure approving early)."""
    with AgentProcess(tmp_path) as agent:
        flag = agent.runtime / "checkpoint-now"
        flag.write_text("")
        eventually(lambda: agent.control({"op": "status"})["active"], what="the flag's drain")
        env = {**agent.env, "PY": sys.executable}
        script = subprocess.Popen(
            ["bash", "-c", PERIODIC_ACK_BESIDE_THE_LOOP + "echo acked; exec sleep 30"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert script.stdout is not None
            assert script.stdout.readline().startswith("acked (no notice)")
            held = agent.control({"op": "status"})["held_for"]
            assert list(held.values()) == [{"me": script.pid}], held
            assert flag.exists(), "released by a periodic save's ack"
        finally:
            script.kill()
            script.wait()


def test_a_clients_periodic_ack_of_a_save_begun_before_the_notice_keeps_its_hold(
    tmp_path: Path, ack_forked: Ack
) -> None:
    """A script whose backgrounded loop holds the flag's drain for `--client me` reports a
    periodic save's flush time with `forewarn ack --client me --flush-seconds 60s` (no id):
    that ack took every notice held for `me`, though the save began before the notice was
    noticed, and released the loop's hold while it still saved (the flag file removed and
    its drain cleared, Azure's after-ack approving a terminate mid-save). A save begun before
    the notice is no save for it: the ack counts the flush only, and says so. The loop's own
    ack (a save begun after) still releases it."""
    with AgentProcess(tmp_path) as agent:
        flag = agent.runtime / "checkpoint-now"
        flag.write_text("")
        eventually(lambda: agent.control({"op": "status"})["active"], what="the flag's drain")
        waited = run_forewarn(
            "wait",
            "--for",
            "drain",
            "--client",
            "me",
            "--pid",
            str(os.getpid()),
            "--json",
            env=agent.env,
            timeout=60,
        )
        assert waited.returncode == 0, waited.stderr
        drain = json.loads(waited.stdout)
        periodic = ack_forked(agent, "--client", "me", "--flush-seconds", "60s")
        assert periodic.returncode == 0, periodic.stderr
        assert periodic.stdout.strip() == "acked (no notice): saved (flush 60s)", periodic.stdout
        assert drain["id"] in periodic.stderr and "began" in periodic.stderr, periodic.stderr
        status = agent.control({"op": "status"})
        assert status["held_for"] == {drain["id"]: {"me": os.getpid()}}, status
        assert flag.exists(), "released by a save begun before the notice"

        loops = ack_forked(agent, "--client", "me", "--flush-seconds", "1s")
        assert loops.returncode == 0, loops.stderr
        assert loops.stdout.strip() == f"acked {drain['id']}: saved (flush 1s)", loops.stdout
        eventually(lambda: not flag.exists(), what="the flag file released")


_STATUS_TIMES = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=8),
    st.integers(min_value=-100, max_value=100).map(
        lambda offset: format_time(datetime.fromtimestamp(1_800_000_000 + offset, timezone.utc))
    ),
)


def _lead(at: object, started: float) -> float | None:
    if not isinstance(at, str):
        return None
    try:
        return parse_time(at).timestamp() - started
    except ValueError:
        return None


_AGES = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=4),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.sampled_from([2**1024 - 1, 2**1024, 10**308]),
    st.floats(allow_nan=True, allow_infinity=True),
)


def _age(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        seconds = float(value)
    except OverflowError:  # an int past any float
        return None
    return seconds if 0 <= seconds < float("inf") else None


@given(
    noticed=st.dictionaries(_IDS, _STATUS_TIMES),
    held=st.lists(_IDS, unique=True),
    raised=st.one_of(st.none(), st.integers(), st.dictionaries(_IDS, _STATUS_TIMES)),
    ages=st.one_of(st.none(), st.integers(), st.dictionaries(_IDS, _AGES)),
    flush=st.floats(min_value=0, max_value=7200),
)
def test_a_save_is_for_the_held_notices_noticed_before_it_began(
    noticed: dict[str, object], held: list[str], raised: object, ages: object, flush: float
) -> None:
    """Whatever `noticed_at`, `raised` and `ages` the status reply carries (none from an older
    agent), the notices left out of a client's ack without id are held ones noticed, and
    raised, more than the slack after the save began, and only those: by the notice's age
    where the reply gives one (a clock no step moves), else by its times."""
    now = 1_800_000_000.0
    started = now - flush
    active = [{"id": n, "noticed_at": at} for n, at in noticed.items()]
    status: dict[str, object] = {"active": active, "held_for": {}}
    if raised is not None:
        status["raised"] = raised
    if ages is not None:
        status["ages"] = ages
    early = _noticed_after(status, held, now, flush)
    expected = {}
    for notice_id, at in noticed.items():
        if notice_id not in held or not isinstance(at, str):
            continue
        age = _age(ages.get(notice_id)) if isinstance(ages, dict) else None
        lead = flush - age if age is not None else _lead(at, started)
        if lead is None:
            continue
        if age is None:
            first = _lead(raised.get(notice_id), started) if isinstance(raised, dict) else None
            if first is not None:
                lead = min(lead, first)
        if lead > SAVE_START_SLACK:
            expected[notice_id] = lead
    assert early == pytest.approx(expected)


def test_a_loops_ack_after_its_notice_changed_mid_save_releases_its_hold(
    tmp_path: Path, ack_forked: Ack
) -> None:
    """The loop's `wait --client me` returned a drain and it saved; meanwhile the notice
    changed (a second `notify` of its id with a deadline, a provider's moved deadline) and was
    re-sent, stamped with a new `noticed_at`. Its `ack --client me --flush-seconds N` then read
    the save as begun before the notice, left it out, and the hold stayed: the loop's next
    `wait` returned the same drain and the job saved again. A notice changed keeps the time it
    was first noticed."""
    with AgentProcess(tmp_path) as agent:
        raised = run_forewarn("notify", "drain", "--id", "local/job-1", env=agent.env, timeout=60)
        assert raised.returncode == 0, raised.stderr
        waited = run_forewarn(
            "wait",
            "--for",
            "drain",
            "--client",
            "me",
            "--pid",
            str(os.getpid()),
            "--json",
            env=agent.env,
            timeout=60,
        )
        assert waited.returncode == 0, waited.stderr
        drain = json.loads(waited.stdout)
        began = time.time()  # the loop's save begins
        eventually(lambda: time.time() > began + SAVE_START_SLACK + 0.5, what="the save to run")
        moved = run_forewarn(
            "notify", "drain", "--id", "local/job-1", "--deadline", "30m", env=agent.env, timeout=60
        )
        assert moved.returncode == 0, moved.stderr

        def changed() -> bool:
            (notice,) = agent.control({"op": "status"})["active"]
            return notice["id"] == drain["id"] and notice.get("deadline") is not None

        eventually(changed, what="the drain re-sent with its deadline")
        flush = f"{time.time() - began + 0.5:.0f}s"
        loops = ack_forked(agent, "--client", "me", "--flush-seconds", flush)
        assert loops.returncode == 0, loops.stderr
        assert loops.stdout.strip() == f"acked {drain['id']}: saved (flush {flush})", loops.stderr
        assert agent.control({"op": "status"})["held_for"] == {}


@pytest.mark.parametrize("step", [-120, 120])
def test_a_clock_stepped_since_the_notice_misjudges_no_save_for_it(
    tmp_path: Path, step: int
) -> None:
    """The wall clock stepped (NTP correcting a clock that ran ahead, or behind) after the
    agent noticed the flag's drain. Back: the loop's `ack --client me --flush-seconds 1s`
    read its save as begun two minutes before the notice and kept the hold, and each `wait`
    after returned the same drain (the flag never cleared, Azure never approved early) until
    the clock had caught up. Forward: a periodic save of 60 s begun before the notice read as
    begun after it, and released the loop's hold mid-save. The `forewarn ack` here runs on
    the stepped clock (a sitecustomize moves `time.time`); how long ago the agent raised each
    notice comes from a clock that does not step."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import time\n_real = time.time\n"
        f"time.time = lambda: _real() + {step}\n"
        "time.time_ns = lambda: int(time.time() * 1e9)\n"
    )
    with AgentProcess(tmp_path) as agent:
        stepped = {**agent.env, "PYTHONPATH": str(site)}
        flag = agent.runtime / "checkpoint-now"
        flag.write_text("")
        eventually(lambda: agent.control({"op": "status"})["active"], what="the flag's drain")
        waited = run_forewarn(
            "wait",
            "--for",
            "drain",
            "--client",
            "me",
            "--pid",
            str(os.getpid()),
            "--json",
            env=agent.env,
            timeout=60,
        )
        assert waited.returncode == 0, waited.stderr
        drain = json.loads(waited.stdout)
        periodic = run_forewarn("ack", "--client", "me", "--flush-seconds", "60s", env=stepped)
        assert periodic.returncode == 0, periodic.stderr
        assert periodic.stdout.strip() == "acked (no notice): saved (flush 60s)", periodic.stdout
        assert agent.control({"op": "status"})["held_for"] == {drain["id"]: {"me": os.getpid()}}

        loops = run_forewarn("ack", "--client", "me", "--flush-seconds", "1s", env=stepped)
        assert loops.returncode == 0, loops.stderr
        assert loops.stdout.strip() == f"acked {drain['id']}: saved (flush 1s)", loops.stderr
        eventually(lambda: not flag.exists(), what="the flag file released")


@pytest.mark.parametrize(("flush", "said"), [("-30s", "-30s"), ("-1m5s", "-65s"), ("-7", "-7s")])
def test_a_save_timed_across_a_clock_stepped_back_is_still_acked(
    tmp_path: Path, flush: str, said: str, ack_forked: Ack
) -> None:
    """The README's loop times its save with `$(( $(date +%s) - started ))s`: NTP stepping
    the clock back by more than the save (correcting one that ran ahead) made that negative,
    and `forewarn ack` exited 2 and sent nothing: the hold stayed (the flag never cleared, the
    next `wait` returned the same drain) and, under `set -e`, the loop ended there, so the
    terminate after it was never saved for. The ack goes without the flush time, and says
    why."""
    with AgentProcess(tmp_path) as agent:
        flag = agent.runtime / "checkpoint-now"
        flag.write_text("")
        eventually(lambda: agent.control({"op": "status"})["active"], what="the flag's drain")
        waited = run_forewarn(
            "wait",
            "--for",
            "drain",
            "--client",
            "me",
            "--pid",
            str(os.getpid()),
            "--json",
            env=agent.env,
            timeout=60,
        )
        assert waited.returncode == 0, waited.stderr
        drain = json.loads(waited.stdout)
        done = ack_forked(
            agent, drain["id"], "--client", "me", "--step", "3", "--flush-seconds", flush
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"acked {drain['id']}: saved (step 3)", done.stdout
        assert f"--flush-seconds: {said} is negative" in done.stderr, done.stderr
        # Said plainly: a negative value given as such was explained as a clock step back.
        assert "so not how long the save took" in done.stderr, done.stderr
        assert "the ack is sent without it" in done.stderr, done.stderr
        eventually(lambda: not flag.exists(), what="the flag file released")


def test_a_notices_age_outlives_an_agent_restart_in_the_same_boot(tmp_path: Path) -> None:
    """The agent restarted (an upgrade) while a loop held the flag's drain, and the clock was
    stepped back since the notice: the restored notice had no age, and the loop's `ack
    --client me --flush-seconds 1s` was judged by `noticed_at` again, its save read as begun
    two minutes before the notice and its hold kept. The boot clock's reading at the raise
    is saved with the boot id, and counts after a restart in the same boot."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import time\n_real = time.time\ntime.time = lambda: _real() - 120\n"
    )
    agent = AgentProcess(tmp_path).start()
    try:
        flag = agent.runtime / "checkpoint-now"
        flag.write_text("")
        eventually(lambda: agent.control({"op": "status"})["active"], what="the flag's drain")
        waited = run_forewarn(
            "wait",
            "--for",
            "drain",
            "--client",
            "me",
            "--pid",
            str(os.getpid()),
            "--json",
            env=agent.env,
            timeout=60,
        )
        assert waited.returncode == 0, waited.stderr
        drain = json.loads(waited.stdout)
    finally:
        agent.stop()
    with AgentProcess(tmp_path) as agent:
        status = agent.control({"op": "status"})
        assert status["held_for"] == {drain["id"]: {"me": os.getpid()}}, status
        assert drain["id"] in status["ages"], status
        stepped = {**agent.env, "PYTHONPATH": str(site)}
        loops = run_forewarn("ack", "--client", "me", "--flush-seconds", "1s", env=stepped)
        assert loops.returncode == 0, loops.stderr
        assert loops.stdout.strip() == f"acked {drain['id']}: saved (flush 1s)", loops.stderr
        eventually(lambda: not flag.exists(), what="the flag file released")


def test_ids_with_space_around_them_name_the_same_notice_and_client(
    tmp_path: Path, ack_forked: Ack
) -> None:
    """`forewarn ack " ID " --client " loop "` (a variable with a stray space): the notice was
    not found, and the client acked as " loop ", another than the `wait --client loop` it
    meant to release ("acked by  loop " in `status`)."""
    with AgentProcess(tmp_path) as agent:
        notice_id = agent.control({"op": "notify", "action": "drain"})["notice"]["id"]
        hold = {"op": "hold", "notice_id": notice_id, "client": "loop"}
        assert agent.control(hold)["held"] is True
        done = ack_forked(agent, f" {notice_id} ", "--client", " loop\t")
        assert done.returncode == 0, done.stderr
        status = agent.control({"op": "status"})
        assert status["acked_by"].get(notice_id) == ["loop"], status
        assert status["held_for"] == {}, status
        cleared = run_forewarn("notify", "clear", "--id", f"{notice_id} ", env=agent.env)
        assert cleared.returncode == 0, cleared.stderr


@given(text=st.text(string.whitespace + "lo/p", max_size=8) | st.text(max_size=12))
def test_an_id_is_read_without_the_space_around_it_or_refused_naming_why(text: str) -> None:
    import argparse

    from forewarn.agent.cli import _acked_notice_id, _client_id, _notice_id

    for read in (_notice_id, _acked_notice_id, _client_id):
        try:
            value = read(text)
        except argparse.ArgumentTypeError as error:
            assert str(error)
        else:
            assert value == text.strip(string.whitespace) and value
            assert read(f" {text}\n") == value
