"""A guard that starts under standing notices, read from the agent's replay on subscribe: it
acts once on the whole replay (one save answers a drain and a terminate) and, restarted from
its own checkpoint, saves nothing again for the notices that checkpoint answered. A real agent
(the AWS simulator on 127.0.0.1 for the walk: a rebalance recommendation, a drain, and a spot
interruption, a terminate, both in force before the job starts) and a small real torch job
(`demo_torch`, one process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients import CheckpointGuard
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.protocol.wire import ENV_CONTROL, ENV_EVENTS, ENV_RUNTIME_DIR
from forewarn.testing import RunningAgent, eventually
from support import free_port, requires

# The terminate's lead: far past the test, and past the agent's exit margin, so the restarted
# job (whose guard inherits the terminate the first job acted on) trains on.
LEAD = "20m"


def _events(out: Path) -> list[dict[str, Any]]:
    lines = out.read_text().splitlines() if out.exists() else []
    return [json.loads(line) for line in lines if line.startswith("{")]


class _Job:
    """`demo_torch` as one process (a world of one gloo rank) on `store`, its JSON lines in
    `<name>.out`, its log in `<name>.err`."""

    def __init__(self, tmp_path: Path, name: str, store: Path, env: dict[str, str]) -> None:
        job_env = dict(env, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", RANK="0")
        job_env.update(WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
        job_env.update(MASTER_PORT=str(free_port()), PYTHONUNBUFFERED="1")
        argv = [sys.executable, "-m", "forewarn.clients.demo_torch", "--dir", str(store)]
        argv += ["--eval-every", "0", "--step-time", "0.05", "--every-steps", "100000"]
        # A save that costs something, as a big model's does: a second one is not free.
        argv += ["--flush-delay", "1", "--steps", "1000000"]
        self.out, self.err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        self.proc = subprocess.Popen(
            argv,
            env=job_env,
            stdout=self.out.open("w"),
            stderr=self.err.open("w"),
            start_new_session=True,
        )

    @property
    def events(self) -> list[dict[str, Any]]:
        return _events(self.out)

    def saves(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == "saved"]

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


def _agent_env(agent: RunningAgent, env: dict[str, str]) -> dict[str, str]:
    return dict(env, **{k: agent.env[k] for k in (ENV_RUNTIME_DIR, ENV_EVENTS, ENV_CONTROL)})


@requires("torch")
@pytest.mark.slow(30)
@pytest.mark.timeout(420)
def test_a_guard_started_under_a_drain_and_a_terminate_saves_once_and_resaves_nothing_on_resume(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Walked (AWS simulator, both notices standing, then the job; load 8): one save, at
    step 1, for the drain and the terminate, exit 143; restarted from it, the job trained on
    under the inherited terminate and acked the drain at its resumed step without a save.
    Before the fix the restarted job answered the drain with a save of its resumed step (its
    `saved` line, reasons ['drain']); that its state was durable already made it free here,
    not when the replay is read a few steps later (the test below)."""
    store = tmp_path / "store"
    with RunningAgent("aws", set_env=False) as agent:
        job_env = _agent_env(agent, env)
        agent.aws.rebalance()
        drain = agent.wait_for_event(60, action="drain", provider="aws")["id"]
        agent.aws.spot_interruption(in_=LEAD)
        agent.wait_for_event(60, action="terminate", provider="aws")
        standing = {n["id"]: n["action"] for n in agent.status()["active"]}
        assert sorted(standing.values()) == ["drain", "terminate"], standing

        first = _Job(tmp_path, "first", store, job_env)
        try:
            code = first.proc.wait(180)
        finally:
            first.kill()
        log = first.err.read_text()
        assert code == 143, log[-3000:]
        saves = first.saves()
        # One save for the whole replay: the terminate's exit save answers the drain too.
        assert len(saves) == 1, (saves, log[-3000:])
        assert {"drain", "terminate"} <= set(saves[0]["reasons"]), saves
        assert saves[0]["exit"], saves
        exit_step = saves[0]["step"]
        generations = [g.step for g in CheckpointStore(str(store)).generations()]
        assert generations == [exit_step], generations

        second = _Job(tmp_path, "second", store, job_env)
        try:
            started = eventually(
                lambda: next((e for e in second.events if e["event"] == "started"), None),
                180,
                "the restarted job's start",
            )
            assert started["step"] == exit_step, started
            # Trains on under both (the terminate acted on before: inherited, its deadline far
            # off) and, its resumed save having answered the drain, acks it without a save.
            eventually(
                lambda: any(
                    e["event"] == "step" and e["step"] >= exit_step + 40 for e in second.events
                ),
                120,
                "40 steps of the restarted job",
            )
            # Its client id is `host/pid/...`: its acks, not the first job's.
            mine = f"/{second.proc.pid}/"
            acked = eventually(
                lambda: [
                    a
                    for a in agent.acks
                    if mine in str(a.get("client")) and a.get("notice_id") == drain
                ],
                30,
                "the restarted job's ack of the drain",
            )
            assert second.proc.poll() is None, second.err.read_text()[-3000:]
        finally:
            second.kill()
        log = second.err.read_text()
        assert second.saves() == [], (second.saves(), log[-3000:])
        generations = [g.step for g in CheckpointStore(str(store)).generations()]
        assert generations == [exit_step], generations
        assert [a["step"] for a in acked] == [exit_step], acked


# Tries, each with a new pair of notices and a new guard: the replay's drain is read a moment
# before its terminate, and a step seldom falls between them every time.
TRIES = 6


@pytest.mark.timeout(120)
def test_the_first_due_under_a_standing_drain_and_terminate_answers_both() -> None:
    """In-process, a loop of quick steps from the guard's first moment (a real agent, two
    manual notices in force before the guard): the replay's drain is read first, then the
    terminate, which the heartbeat before them says nobody acted on. Before the fix a `due`
    between the two saved for the drain alone (3 of 8 tries), and the terminate's exit took
    a second save a step later."""
    with RunningAgent("local", set_env=True) as agent:
        for _ in range(TRIES):
            agent.clear()
            drain = agent.notify("drain", reason="manual")
            terminate = agent.notify("terminate", LEAD, reason="manual")
            guard = CheckpointGuard(handle_signals=False, flag_file=None)
            try:
                step, results = 0, []
                while not (results and results[-1].exit) and step < 200_000:
                    step += 1
                    if guard.due(step):
                        results.append(guard.saved(step, 0.0))
                    time.sleep(0.0005)  # a step of training
            finally:
                guard.close()
            saves = [(r.step, r.reasons, r.notices) for r in results]
            assert len(results) == 1, saves
            assert results[0].exit and set(results[0].notices) == {drain, terminate}, saves


@pytest.mark.timeout(120)
def test_a_drain_the_resumed_generation_answered_is_acked_when_read_after_steps(
    tmp_path: Path,
) -> None:
    """A job saved for a drain, then stopped; restarted from that generation, it reads the
    drain (still standing, the same occurrence) only after some steps, as from an agent slow
    to answer its subscription on a loaded node. Before the fix it saved again, a full new
    generation at the step it had reached; now it acks the drain as answered at the resumed
    step, and writes nothing."""
    from forewarn.clients import Notices

    store = CheckpointStore(str(tmp_path / "store"))
    with RunningAgent("local", set_env=True) as agent:
        drain = agent.notify("drain", reason="manual")
        first = CheckpointGuard(store=store, handle_signals=False, flag_file=None)
        try:
            eventually(lambda: first.due(1), 30, "the drain's save")
            saved = first.save(1, lambda gen: gen.write_bytes("state.bin", b"1"))
            assert saved.notices == (drain,) and not saved.exit, saved
        finally:
            first.close()

        restored = store.restore(lambda gen: gen.read_bytes("state.bin"))
        assert restored is not None and restored[0].step == 1
        notices = Notices(start=False)
        second = CheckpointGuard(store=store, notices=notices, handle_signals=False, flag_file=None)
        try:
            second.resumed(1)
            step, saves = 1, []
            for step in range(2, 6):  # steps before the agent is heard
                if second.due(step):
                    saves.append(second.save(step, lambda gen: gen.write_bytes("state.bin", b"2")))
            notices.start()
            mine = f"{notices.client_id}"

            def acked() -> bool:
                nonlocal step
                step += 1
                if second.due(step):
                    saves.append(second.save(step, lambda gen: gen.write_bytes("state.bin", b"3")))
                time.sleep(0.01)  # a step of training
                return any(
                    a.get("client") == mine and a.get("notice_id") == drain for a in agent.acks
                )

            eventually(acked, 30, "the restarted job's ack of the drain")
        finally:
            second.close()
            notices.close()  # given to the guard, so not closed by it
        ack = next(a for a in agent.acks if a.get("client") == mine and a["notice_id"] == drain)
    assert [(s.step, s.reasons) for s in saves] == [], saves
    assert [g.step for g in store.generations()] == [1]
    assert ack["step"] == 1, ack
