"""What an operator reads after a reclaim: the agent's `resume of ...` line of a job that
resumed from its exit save, with the restore time and the steps lost."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from forewarn.protocol.notifydeadline import seconds_fields
from hypothesis import given, settings
from hypothesis import strategies as st
from support import AgentProcess, eventually, examples, free_port, requires

LEAD = 60.0  # the job saves within it; nothing here waits for the deadline


def _run_demo(
    argv: list[str], env: dict[str, str], out: Path, err: Path
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv, env=env, stdout=out.open("w"), stderr=err.open("w"), start_new_session=True
    )


def _events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]


@requires("torch")
def test_the_demo_jobs_resume_after_a_terminate_reports_its_restore_time_and_no_step_lost(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The torch demo (the reclaim drill's job, one rank, DataLoader workers) saves for a
    terminate and exits 143; started again, it resumes from that exit save. Its resume line
    said `restore=none steps_lost=unknown`: the demo passed neither figure. The store timed the
    restore it made, and the generation says it was an exit's save (the job stopped there)."""
    store = tmp_path / "store"
    job_env = dict(env, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", RANK="0", WORLD_SIZE="1")
    job_env.update(LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
    argv = [sys.executable, "-m", "forewarn.clients.demo_torch", "--dir", str(store)]
    argv += ["--eval-every", "0", "--step-time", "0.05", "--workers", "1"]
    with AgentProcess(tmp_path, env=env) as agent:
        first_out, first_err = tmp_path / "first.out", tmp_path / "first.err"
        job_env["MASTER_PORT"] = str(free_port())
        job = _run_demo([*argv, "--steps", "1000000"], job_env, first_out, first_err)
        try:
            eventually(
                lambda: any(e["event"] == "step" for e in _events(first_out)), 120, "a first step"
            )
            notice: dict[str, Any] = {"op": "notify", "action": "terminate", "reason": "reclaim"}
            notice.update(seconds_fields(LEAD))
            reply = agent.control(notice)
            assert reply["ok"], reply
            assert job.wait(LEAD) == 143, first_err.read_text()[-3000:]
        finally:
            if job.poll() is None:
                job.kill()
                job.wait(30)
        saved = [e for e in _events(first_out) if e["event"] == "saved"]
        assert saved and saved[-1]["exit"], _events(first_out)
        step = saved[-1]["step"]
        assert agent.control({"op": "clear", "id": reply["notice"]["id"]})["ok"]
        # The replacement: the same store, the job runs two more steps and finishes.
        second_out, second_err = tmp_path / "second.out", tmp_path / "second.err"
        job_env["MASTER_PORT"] = str(free_port())
        job = _run_demo([*argv, "--steps", str(step + 2)], job_env, second_out, second_err)
        try:
            assert job.wait(120) == 0, second_err.read_text()[-3000:]
        finally:
            if job.poll() is None:
                job.kill()
                job.wait(30)
        started = [e for e in _events(second_out) if e["event"] == "started"]
        assert started and started[0]["step"] == step, _events(second_out)
        pattern = rf"resume of \S+ at step {step}: restore=(\S+) steps_lost=(\S+)"
        eventually(
            lambda: re.search(pattern, agent.log_path.read_text()) is not None,
            30,
            "the agent's resume line",
        )
        found = re.search(pattern, agent.log_path.read_text())
        assert found is not None
        assert found.group(1) != "none" and float(found.group(1).rstrip("s")) >= 0, found[0]
        assert found.group(2) == "0", found[0]


class _Acks:
    """Stands in for the guard's `Notices`: records its acks."""

    alive = True

    def __init__(self) -> None:
        self.acks: list[dict[str, Any]] = []

    def ack(self, notice_id: str | None, **fields: Any) -> None:
        self.acks.append({"notice_id": notice_id, **fields})


def _guard(store: Any, acks: _Acks) -> Any:
    from forewarn.clients import CheckpointGuard

    guard = CheckpointGuard(store=store, notices=False, flag_file=None, handle_signals=False)
    guard.notices = acks  # what it acks, with no agent
    return guard


def _write(gen: Any) -> None:
    gen.write_bytes("state.bin", b"x" * 64)


def _load(gen: Any) -> bytes:
    return bytes(gen.read_bytes("state.bin"))


def test_a_resume_from_an_exits_save_reports_the_stores_restore_time_and_no_step_lost(
    tmp_path: Path,
) -> None:
    from forewarn.clients.checkpoint import CheckpointStore

    store = CheckpointStore(str(tmp_path / "store"))
    guard = _guard(store, _Acks())
    try:
        guard.request("terminate", exit=True)
        assert guard.due(12)
        assert guard.save(12, _write).exit
    finally:
        guard.close()
    again = CheckpointStore(str(tmp_path / "store"))
    restored = again.restore(_load)
    assert restored is not None
    generation, _ = restored
    assert generation.step == 12 and again.last_restored is generation
    assert generation.restore_seconds is not None and generation.restore_seconds >= 0
    acks = _Acks()
    guard = _guard(again, acks)
    try:
        guard.resumed(12)
    finally:
        guard.close()
    (ack,) = acks.acks
    assert ack["outcome"] == "resumed" and ack["step"] == 12
    assert ack["restore_seconds"] == generation.restore_seconds
    assert ack["steps_lost"] == 0


def test_a_resume_from_a_periodic_save_lost_steps_nobody_here_knows(tmp_path: Path) -> None:
    """The job trained past its newest periodic save before it stopped: how far is not
    known at the resume, so the steps lost stay unreported (`unknown`), not 0; the figures a
    caller passes win over the store's."""
    from forewarn.clients.checkpoint import CheckpointStore

    store = CheckpointStore(str(tmp_path / "store"))
    guard = _guard(store, _Acks())
    try:
        guard.request("periodic")
        assert guard.due(10)
        assert not guard.save(10, _write).exit
    finally:
        guard.close()
    again = CheckpointStore(str(tmp_path / "store"))
    assert again.restore(_load) is not None
    acks = _Acks()
    guard = _guard(again, acks)
    try:
        guard.resumed(10)
        guard.resumed(10, restore_seconds=4.5, steps_lost=3)
        guard.resumed(11)  # not the step restored: none of the store's figures
    finally:
        guard.close()
    first, given, other = acks.acks
    assert first["restore_seconds"] is not None and first["steps_lost"] is None
    assert given["restore_seconds"] == 4.5 and given["steps_lost"] == 3
    assert other["restore_seconds"] is None and other["steps_lost"] is None


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=examples(50), deadline=None)
@given(mark=_JSON)
def test_only_the_guards_own_exit_mark_reads_as_no_step_lost(
    tmp_path_factory: Any, mark: Any
) -> None:
    """A generation's metadata is what its writer put there (a user's own keys included):
    only `true` under the guard's key says the job stopped at that step."""
    from forewarn.clients.checkpoint import CheckpointStore
    from forewarn.clients.guard_state import EXIT_SAVE

    store = CheckpointStore(str(tmp_path_factory.mktemp("store")))
    store.flush(5, _write, metadata={EXIT_SAVE: mark})
    assert store.restore(_load) is not None
    acks = _Acks()
    guard = _guard(store, acks)
    try:
        guard.resumed(5)
    finally:
        guard.close()
    (ack,) = acks.acks
    assert ack["steps_lost"] == (0 if mark is True else None)
    assert ack["restore_seconds"] is not None


def test_a_resume_past_a_newer_generation_that_did_not_load_lost_steps(tmp_path: Path) -> None:
    """Two reclaims, each saved for: the second exit's save (step 20) does not load, and
    restore() falls back to the first's (step 12). That generation is an exit's save too, but
    the job had trained to step 20 since: 0 steps lost would be false; they are unknown."""
    from forewarn.clients.checkpoint import CheckpointStore, CorruptGenerationError

    store = CheckpointStore(str(tmp_path / "store"))
    for step in (12, 20):
        guard = _guard(store, _Acks())
        try:
            guard.resumed(step - 4 if step == 20 else 0)
            guard.request("terminate", exit=True)
            assert guard.due(step)
            assert guard.save(step, _write).exit
        finally:
            guard.close()

    def load(gen: Any) -> bytes:
        if gen.step == 20:
            raise CorruptGenerationError(gen.name, ["state.bin: checksum mismatch (test)"])
        return _load(gen)

    again = CheckpointStore(str(tmp_path / "store"))
    restored = again.restore(load)
    assert restored is not None and restored[0].step == 12
    acks = _Acks()
    guard = _guard(again, acks)
    try:
        guard.resumed(12)
    finally:
        guard.close()
    (ack,) = acks.acks
    assert ack["restore_seconds"] is not None
    assert ack["steps_lost"] is None
