"""CheckpointGuard's own rules, in-process (no agent, no signals)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients import CheckpointGuard
from forewarn.clients.adaptive import AdaptiveInterval
from forewarn.clients.agreement import RankAgreement
from other_user import call_as
from support import eventually


def quiet_guard(**options: object) -> CheckpointGuard:
    return CheckpointGuard(notices=False, handle_signals=False, flag_file=None, **options)  # type: ignore[arg-type]


def test_every_steps() -> None:
    guard = quiet_guard(every_steps=5)
    assert [step for step in range(1, 12) if guard.due(step) and guard.saved(step)] == [5, 10]
    guard.close()


def test_every_seconds_wakes_the_loop() -> None:
    guard = quiet_guard(every_seconds=0.3)
    assert not guard.due(1)
    eventually(lambda: guard.due(2), timeout=5, what="the periodic save")
    assert guard.saved(2).reasons == ("periodic",)
    assert not guard.due(3)
    guard.close()


def test_auto_interval_follows_the_measured_flush() -> None:
    adaptive = AdaptiveInterval(mtbi_seconds=2.0, min_seconds=0.05, max_seconds=60)
    guard = quiet_guard(every="auto", adaptive=adaptive)
    assert guard.every_seconds == 0.05  # min_seconds until a flush is measured
    eventually(lambda: guard.due(1), timeout=5, what="the first periodic save")
    guard.saved(1, 0.01)
    # Daly for C = 0.01 s, M = 2 s is about 0.19 s.
    assert (
        guard.every_seconds == pytest.approx(adaptive.seconds) and 0.1 < guard.every_seconds < 0.3
    )
    guard.saved(2, 0.5)
    guard.saved(3, 0.5)
    assert guard.every_seconds > 0.5, "slower flushes widen the interval"
    guard.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"every": "auto"}, "interruption rate"),
        ({"every": "auto", "every_steps": 5, "mtbi_seconds": 60}, "drop every_steps"),
        ({"every": "sometimes"}, "every must be"),
        # Read by every="auto" only: without it no periodic save ever came, and with the
        # guard's own rate as well as an AdaptiveInterval the guard's was dropped.
        ({"adaptive": AdaptiveInterval(mtbi_seconds=3600)}, "every='auto'"),
        ({"every_steps": 600, "interruptions_per_day": 2}, "every='auto'"),
        ({"mtbi_seconds": 3600}, "every='auto'"),
        (
            {"every": "auto", "adaptive": AdaptiveInterval(mtbi_seconds=3600), "mtbi_seconds": 60},
            "not both",
        ),
        ({"every_steps": 0}, "every_steps"),
        ({"every_seconds": -1}, "every_seconds"),
        # A string from an environment variable raised a TypeError naming no option; NaN was
        # taken and no periodic save ever came; agree_every was checked only under torchrun.
        ({"every_steps": "600"}, "every_steps"),
        ({"every_steps": float("nan")}, "every_steps"),
        ({"every_seconds": "60"}, "every_seconds"),
        ({"every_seconds": float("nan")}, "every_seconds"),
        ({"agree_every": 0}, "agree_every"),
        ({"agree_every": "8"}, "agree_every"),
        # A step count is whole: 1.5 was taken, and the guard saved every 2 steps.
        ({"every_steps": 1.5}, "every_steps must be a whole number of steps"),
        ({"every_steps": True}, "every_steps must be a whole number of steps"),
        ({"agree_every": 2.5}, "agree_every must be a whole number of steps"),
        ({"agree_every": True}, "agree_every must be a whole number of steps"),
        # NaN never came within the margin of an inherited terminate's deadline: no save.
        ({"exit_margin": float("nan")}, "exit_margin"),
        ({"exit_margin": -5}, "exit_margin"),
        ({"exit_margin": "30"}, "exit_margin"),
    ],
)
def test_bad_options_say_which(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        quiet_guard(**options)


def test_request_from_another_thread_and_exit() -> None:
    guard = quiet_guard()
    assert not guard.due(1)
    guard.request("manual", exit=True)
    assert guard.due(2) and guard.should_exit
    result = guard.saved(2)
    assert result.exit and result.reasons == ("manual",)
    guard.close()


def test_the_exit_code_is_0_until_a_save_answers_an_exit() -> None:
    guard = quiet_guard(every_steps=2)
    assert guard.due(2) and not guard.saved(2).exit
    assert guard.exit_code == 0, "a periodic save"
    guard.request("drain")
    assert guard.due(3) and not guard.saved(3).exit
    assert guard.exit_code == 0, "a save that continues"
    guard.request("preempted", exit=True)
    assert guard.due(4)
    assert guard.exit_code == 0, "asked for, not taken yet"
    assert guard.saved(4).exit
    assert guard.exit_code == 143
    guard.close()


def test_saves_through_a_checkpoint_store_and_times_the_commit(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from forewarn.clients.checkpoint import CheckpointStore

    store = CheckpointStore(str(tmp_path / "ckpt"), keep=2)
    guard = quiet_guard(every_steps=10, store=store)
    for step in range(1, 31):
        if guard.due(step):
            result = guard.save(step, lambda gen, s=step: gen.write_bytes("w", b"x" * s))
            assert result.generation is not None and result.generation.step == step
            assert result.flush_seconds is not None and result.flush_seconds > 0
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 30 and latest.read_bytes("w") == b"x" * 30
    assert store.steps() == [20, 30]  # keep=2
    guard.close()


def test_due_in_eval_interrupts_only_for_an_exit() -> None:
    guard = quiet_guard(every_steps=5)
    guard.request("drain")
    assert not guard.due_in_eval(3), "a drain waits for the next training step"
    guard.request("signal", exit=True)
    assert guard.due_in_eval(3) and guard.should_exit
    assert guard.saved(3).exit
    guard.close()


def test_an_exit_before_the_first_step_writes_nothing_new(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from forewarn.clients.checkpoint import CheckpointStore

    store = CheckpointStore(tmp_path / "store")
    with store.save(7) as gen:
        gen.write_bytes("x", b"state at 7")
    guard = quiet_guard(store=store)
    guard.resumed(7)
    guard.request("signal", exit=True)
    writes: list[int] = []
    assert guard.due(7)
    result = guard.save(7, lambda gen: writes.append(gen.step))
    assert result.exit and writes == [] and result.flush_seconds == 0.0
    assert store.steps() == [7]
    guard.close()


def test_periodic_steps_count_from_the_resumed_step() -> None:
    guard = quiet_guard(every_steps=10)
    guard.resumed(40)
    assert not guard.due(40) and not guard.due(45)
    assert guard.due(50)
    guard.close()


def test_a_synchronous_save_state_hashes_the_cpu_tensors_in_place(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    from forewarn.clients.checkpoint import CheckpointStore, hashing, load_state

    # The loop waits in the save, so nothing changes its tensors until the file is closed:
    # their bytes are hashed in place instead of each write waiting for its hashing.
    stable_bytes = 0
    real_feed = hashing.StreamHasher.feed

    def feed(self, data, write, *, stable=False):  # type: ignore[no-untyped-def]
        nonlocal stable_bytes
        if stable:
            stable_bytes += memoryview(data).nbytes
        real_feed(self, data, write, stable=stable)

    monkeypatch.setattr(hashing.StreamHasher, "feed", feed)
    store = CheckpointStore(str(tmp_path / "ckpt"))
    guard = quiet_guard(store=store)
    state = {"model": {"w": torch.randn(256, 1024), "b": torch.arange(10)}, "step": 3}
    guard.save_state(3, state)
    guard.close()
    assert stable_bytes == 256 * 1024 * 4  # "b" is too small to look up: copied
    restored = load_state(store.get(3, verify="checksums"))
    assert torch.equal(restored["model"]["w"], state["model"]["w"]) and restored["step"] == 3


class PeerAgreement(RankAgreement):
    """This rank's side of a 2-rank agreement whose other rank never asks for anything: the
    all-reduce (MAX) is this rank's own flags. Records every decision taken."""

    def __init__(self, every: int) -> None:  # no torch.distributed: nothing to reduce over
        self.every = every
        self.decisions: list[tuple[bool, bool]] = []

    def decide(self, save: bool, exit: bool) -> tuple[bool, bool]:
        self.decisions.append((save, exit))
        return save, exit


def test_with_ranks_an_exit_asked_for_during_an_agreed_save_is_agreed_and_answered_by_it() -> None:
    """A terminate that reaches a rank while the ranks make a save they agreed on (here a
    periodic one) is agreed right after that save, and the save answers it: before, it waited
    for the next agreement, and the ranks trained on and saved again for it (a second whole
    flush in the lead)."""
    agreement = PeerAgreement(every=8)
    guard = quiet_guard(every_steps=10, agree=agreement)
    assert [step for step in range(1, 10) if guard.due(step)] == []
    assert guard.due(10)
    assert agreement.decisions[-1] == (True, False), "a periodic step agrees on exit too"
    guard.request("terminate", exit=True)  # arrives during the save of step 10
    first = guard.saved(10)
    assert agreement.decisions[-1] == (False, True), "agreed once the save ended"
    assert first.exit and set(first.reasons) == {"periodic", "terminate"}
    assert guard.exit_code == 143
    guard.close()


def test_with_ranks_an_exit_after_the_agreement_that_ends_a_save_waits_for_the_next() -> None:
    """One that reaches a rank after the ranks agreed once the save ended does not make that
    rank alone exit after it: the others were told to go on. It is agreed on at the next
    agreement, where every rank saves and exits."""
    guard: CheckpointGuard | None = None

    class LateTerminate(PeerAgreement):
        def decide(self, save: bool, exit: bool) -> tuple[bool, bool]:
            agreed = super().decide(save, exit)
            if (
                (save, exit) == (False, False)
                and guard is not None
                and guard._due_since is not None
            ):
                guard.request("terminate", exit=True)  # just after every rank said "go on"
            return agreed

    agreement = LateTerminate(every=8)
    guard = quiet_guard(every_steps=10, agree=agreement)
    assert [step for step in range(1, 10) if guard.due(step)] == []
    assert guard.due(10)
    first = guard.saved(10)
    assert not first.exit and first.reasons == ("periodic",)
    assert guard.should_exit
    assert [step for step in range(11, 17) if guard.due(step)] == [16]
    final = guard.saved(16)
    assert final.exit and final.reasons == ("terminate",)
    guard.close()


def test_ranks_initialised_after_the_guard_was_made_still_agree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A guard made before `init_process_group` (at the top of the script, the usual place for
    set-up) looked for torch.distributed once, found none, and never agreed with the other
    ranks: a notice on one node saved its ranks alone, a terminate ended them alone and left
    the others hanging in their next collective, unsaved. It looks again at the first `due`."""
    guard = quiet_guard()
    assert guard.agreement is None  # torch.distributed not initialised yet
    agreement = PeerAgreement(every=8)
    monkeypatch.setattr(RankAgreement, "detect", classmethod(lambda cls, every: agreement))
    assert not guard.due(1)  # the first check after init_process_group agrees
    assert guard.agreement is agreement and agreement.decisions == [(False, False)]
    guard.request("terminate", exit=True)
    assert guard.due(2)  # the second check agrees too
    assert agreement.decisions[-1] == (True, True)
    guard.close()


def test_a_guard_told_not_to_agree_never_looks_for_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    guard = quiet_guard(agree=False)
    monkeypatch.setattr(RankAgreement, "detect", classmethod(lambda cls, every: PeerAgreement(8)))
    assert not guard.due(1) and guard.agreement is None
    guard.close()


def test_a_flag_file_it_cannot_remove_counts_once_and_never_raises(tmp_path: Path) -> None:
    """A training user in the agent's group enters its 0750 runtime directory but cannot
    remove a flag file there (root dropped it; the agent runs without the local provider, so
    the guard takes it). `saved` raised PermissionError right after the checkpoint."""
    if os.geteuid() != 0:
        pytest.skip("needs root to take another uid")
    base = Path(tempfile.mkdtemp(prefix="forewarn-flag-", dir="/tmp"))
    try:
        base.chmod(0o755)
        runtime = base / "forewarn"  # as RuntimeDirectory=forewarn leaves it: 0750, its group
        runtime.mkdir()
        os.chown(runtime, 10001, 10001)
        runtime.chmod(0o750)
        flag = runtime / "checkpoint-now"
        flag.write_text("")

        def training_loop() -> list[Any]:
            guard = CheckpointGuard(notices=False, handle_signals=False, flag_file=flag)
            saves: list[Any] = []
            try:
                step, first = 0, None
                # Until the flag is taken, then a second more: four more looks at the file.
                while first is None or time.monotonic() < first + 1.0:
                    step += 1
                    if guard.due(step):
                        try:
                            saves.append(list(guard.saved(step).reasons))
                        except OSError as error:
                            saves.append(repr(error))
                        first = first or time.monotonic()
                    if step > 5000:
                        break
                    time.sleep(0.002)
            finally:
                guard.close()
            return saves

        saves = call_as(1000, 1000, training_loop, groups=(10001,))
        assert saves == [["flag"]]
        assert flag.exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_with_ranks_an_exit_agreed_in_evaluation_is_due_at_the_next_training_check() -> None:
    """An evaluation loop left on `due_in_eval` without saving there: the training loop's next
    `due` answers the exit the ranks agreed on, not the agreement `agree_every` steps later
    (with 2 ranks, 6 more steps were trained after the terminate)."""
    agreement = PeerAgreement(every=8)
    guard = quiet_guard(agree=agreement)
    assert [step for step in range(1, 51) if guard.due(step)] == []
    guard.request("terminate", exit=True)
    assert [guard.due_in_eval(50) for _ in range(8)] == [False] * 7 + [True]
    decisions = len(agreement.decisions)
    assert guard.due(50), "the agreed exit is answered at once"
    assert len(agreement.decisions) == decisions, "every rank knows it: no other collective"
    result = guard.saved(50)
    assert result.exit and result.reasons == ("terminate",)
    guard.close()


def test_an_exit_requested_as_a_signal_names_it_in_the_exit_line() -> None:
    """guard.request("signal", exit=True), as the guard's warning about a replaced SIGTERM
    handler advises, logged "exiting at step 4 on None"."""
    from forewarn.clients.guard import exit_line

    assert exit_line(4, {"signal": None}, [], None).startswith("exiting at step 4 on signal;")
    assert exit_line(4, {"signal": "SIGTERM"}, [], None).startswith("exiting at step 4 on SIGTERM;")


def test_an_exit_save_past_the_notice_deadline_still_commits(tmp_path: Path) -> None:
    """A deadline is the earliest the provider may take the machine. An exit save that starts
    after it (a slow step, a late notice) and takes 1.5 s on a working disk was given up after
    1 s and lost; it now has a grace past the deadline to commit in."""
    from datetime import datetime, timedelta, timezone

    from forewarn.clients.checkpoint import CheckpointStore
    from forewarn.clients.event import Event

    store = CheckpointStore(tmp_path / "store")
    guard = quiet_guard(store=store)
    now = datetime.now(timezone.utc)
    guard._on_event(
        Event(
            id="aws/spot-itn/late",
            seq=1,
            action="terminate",
            reason="spot-interruption",
            provider="aws",
            deadline=now - timedelta(seconds=5),
            noticed_at=now,
            sent_at=now,
        )
    )
    assert guard.due(3) and guard.should_exit

    def slow_write(gen: Any) -> None:
        time.sleep(1.5)  # the disk at work, not synchronisation
        gen.write_bytes("w", b"state at 3")

    result = guard.save(3, slow_write)
    assert result.exit and result.generation is not None
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 3 and latest.read_bytes("w") == b"state at 3"
    guard.close()


@pytest.mark.parametrize("deadline", [None, 600.0, -5.0])
def test_an_exit_save_still_running_is_said_every_interval(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, deadline: float | None
) -> None:
    """An exit's save has no time limit after a SIGTERM (nor without a store): one that hung
    (a stalled network filesystem) said nothing while the job sat there until the SIGKILL."""
    import signal
    import threading
    from datetime import datetime, timedelta, timezone

    from forewarn.clients import guard_report
    from forewarn.clients.event import Event

    monkeypatch.setattr(guard_report, "EXIT_SAVE_WARN_SECONDS", 0.3)
    guard = quiet_guard()
    if deadline is None:
        guard._on_signal(signal.SIGTERM, None)
    else:
        now = datetime.now(timezone.utc)
        guard._on_event(
            Event(
                id="aws/spot-itn/slow",
                seq=1,
                action="terminate",
                reason="spot-interruption",
                provider="aws",
                deadline=now + timedelta(seconds=deadline),
                noticed_at=now,
                sent_at=now,
            )
        )
    assert guard.due(7) and guard.should_exit
    release = threading.Event()
    results: list[Any] = []
    saving = threading.Thread(
        target=lambda: results.append(guard.save(7, lambda step: release.wait(30))), daemon=True
    )
    saving.start()

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if "is still running" in r.getMessage()]

    eventually(lambda: len(said()) >= 2, 10, "two warnings")
    release.set()
    saving.join(timeout=10)
    assert results and results[0].exit
    first = said()[0]
    assert "the exit's save of step 7" in first
    # One line each 0.3 s the save runs, with that time (a tick late on a busy machine skips one).
    times = [float(re.findall(r"after ([0-9.]+)s", line)[0]) for line in said()]
    assert times == sorted(set(times)), times
    assert all(round(seconds / 0.3, 6).is_integer() for seconds in times), times
    if deadline is None:
        assert "on SIGTERM" in first and "no deadline" in first
    elif deadline > 0:
        assert "on terminate aws/spot-itn/slow" in first
        assert re.search(r"the terminate's deadline is in (599|600)s", first), first
    else:
        assert re.search(r"the terminate's deadline passed [56]s ago", first), first
    guard.close()


@pytest.mark.parametrize("deadline", [3.0, -5.0, 600.0])
def test_an_exit_save_not_ended_near_its_deadline_is_said_once(
    caplog: pytest.LogCaptureFixture, deadline: float
) -> None:
    """A hung exit's save was first said 30 s into it: after a shorter lead's SIGKILL, so the
    job's log ended with nothing about it. Said once the deadline is EXIT_SAVE_LATE_SECONDS
    away (or past), once per save; not while it is further."""
    import threading
    from datetime import datetime, timedelta, timezone

    from forewarn.clients.event import Event

    guard = quiet_guard()
    guard.resumed(4)
    now = datetime.now(timezone.utc)
    guard._on_event(
        Event(
            id="aws/spot-itn/hung",
            seq=1,
            action="terminate",
            reason="spot-interruption; rebalance",  # a `;` in a reason is not the line's end
            provider="aws",
            deadline=now + timedelta(seconds=deadline),
            noticed_at=now,
            sent_at=now,
        )
    )
    assert guard.due(7) and guard.should_exit
    # The guard's ticks that judged the save's lateness: the test counts in them, not in
    # seconds of its own, which a loaded machine's ticks need not fill.
    judged: list[float] = []
    judge = guard._check_exit_save_late

    def counted(since: float) -> None:
        judge(since)
        judged.append(since)

    guard._check_exit_save_late = counted  # type: ignore[method-assign]
    release = threading.Event()
    saving = threading.Thread(target=lambda: guard.save(7, lambda step: release.wait(30)))
    saving.start()

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if "has not ended" in r.getMessage()]

    def ticks(count: int) -> None:
        seen = len(judged)
        eventually(lambda: len(judged) >= seen + count, 10, f"{count} more ticks")

    try:
        if deadline > 10:
            ticks(4)  # nothing may be said of a deadline 10 min away
            assert said() == []
            return
        eventually(lambda: said(), 10, "the save said not to have ended")
        ticks(4)  # said once
        (line,) = said()
    finally:
        release.set()
        saving.join(timeout=10)
        guard.close()
    assert "(on terminate aws/spot-itn/hung from aws (spot-interruption; rebalance)) " in line
    assert "the job resumes from step 4" in line
    if deadline > 0:
        assert re.search(r"has not ended [0-3]s before the terminate's deadline", line), line
    else:  # the save began after the deadline: it was not running at it
        assert re.search(r"began [56]s after the terminate's deadline and has not ended", line)


@pytest.mark.parametrize(
    ("deadline", "ran", "words"),
    [
        (-9.0, 0.0, r"\) began 9s after the terminate's deadline and has not ended"),
        (-5.0, 12.0, r"has not ended by the terminate's deadline \(5s ago\) \(it has run 12s\)"),
    ],
)
def test_an_exit_save_begun_after_its_deadline_is_not_said_to_have_missed_it(
    caplog: pytest.LogCaptureFixture, deadline: float, ran: float, words: str
) -> None:
    """A job started 9 s after a terminate's deadline nobody had acted on was told its exit's
    save "has not ended by the terminate's deadline (8s ago) (it has run 0s)": a save that
    began after the deadline cannot have been running at it, and no kill comes "at the
    deadline" that passed. One running across the deadline is still said as before."""
    from datetime import datetime, timedelta, timezone

    from forewarn.clients.event import Event

    guard = quiet_guard()
    guard.resumed(4)
    # 0.3 s later than said: the whole seconds the line rounds to stay the same for a check
    # run up to 0.8 s after this (a loaded machine's pause).
    now = datetime.now(timezone.utc)
    at = now + timedelta(seconds=deadline + 0.3)
    guard._on_event(
        Event(
            id="aws/spot-itn/old",
            seq=1,
            action="terminate",
            reason="spot-interruption",
            provider="aws",
            deadline=at,
            noticed_at=now,
            sent_at=now,
        )
    )
    try:
        assert guard.due(7) and guard.should_exit
        guard._check_exit_save_late(time.monotonic() - ran)
    finally:
        guard.close()
    (line,) = [r.getMessage() for r in caplog.records if "exit's save of step 7" in r.getMessage()]
    assert re.search(words, line), line
    assert "the job resumes from step 4" in line
    if ran == 0.0:
        assert "has not ended by" not in line and "killed at the deadline" not in line, line


@pytest.mark.parametrize(
    ("ran", "hung"),
    [(0.0, False), (2.0, False), (60.0, True)],
)
def test_an_exit_save_begun_in_a_short_lead_is_not_said_to_hang(
    caplog: pytest.LogCaptureFixture, ran: float, hung: bool
) -> None:
    """With `forewarn agent --exit-margin 5s` a drain became a terminate 5-6 s before its
    deadline and a 3 s save begun then was told it "has not ended 5s before the terminate's
    deadline (it has run 2s): it waits on its storage (a hung mount ...)": a save that has
    run a few seconds cannot be told hung from slow. One that has run a minute still is."""
    from datetime import datetime, timedelta, timezone

    from forewarn.clients.event import Event

    guard = quiet_guard()
    guard.resumed(4)
    now = datetime.now(timezone.utc)
    # Within EXIT_SAVE_LATE_SECONDS, and said as 5 s by a check run up to 0.4 s after this.
    at = now + timedelta(seconds=4.95)
    guard._on_event(
        Event(
            id="local/manual/short",
            seq=1,
            action="terminate",
            reason="manual",
            provider="local",
            deadline=at,
            noticed_at=now,
            sent_at=now,
        )
    )
    # The guard's own tick judges the save it sees begin at `due`: only this test's call may.
    judge = guard._check_exit_save_late
    guard._check_exit_save_late = lambda since: None  # type: ignore[method-assign]
    try:
        assert guard.due(7) and guard.should_exit
        judge(time.monotonic() - ran)
    finally:
        guard.close()
    (line,) = [r.getMessage() for r in caplog.records if "exit's save of step 7" in r.getMessage()]
    assert "has not ended 5s before the terminate's deadline" in line, line
    assert "the job resumes from step 4" in line, line
    if hung:
        assert "it waits on its storage (a hung mount" in line, line
        return
    assert "hung mount" not in line, line
    began = f"it has run {ran:.0f}s, begun {5 + ran:.0f}s before the deadline"
    assert began in line, line
    assert "too short to tell a slow save from a hung one" in line, line
    assert "if it needs more than the 5s left it is killed at the deadline" in line, line


def _terminate(notice_id: str, **detail: Any) -> Any:
    from datetime import datetime, timedelta, timezone

    from forewarn.clients.event import Event

    now = datetime.now(timezone.utc)
    return Event(
        id=notice_id,
        seq=1,
        action="terminate",
        reason="preemption",
        provider="azure",
        deadline=now + timedelta(seconds=30),
        noticed_at=now,
        sent_at=now,
        detail=detail,
    )


def test_a_terminate_sent_again_after_its_exit_save_asks_for_no_second_save() -> None:
    """Azure's event goes from Scheduled to Started (the agent sends it again, same id, for
    its detail), or a restarted agent replays it, after the job's save said exit: the guard
    asked for the same save again, and a loop that went on (a framework's teardown, a loop
    that checks `due` once more before it leaves) saved and acked twice inside the window."""
    guard = quiet_guard()
    guard._on_event(_terminate("azure/preempt/1", EventStatus="Scheduled"))
    assert guard.due(5)
    assert guard.saved(5).exit and guard.exit_code == 143
    guard._on_event(_terminate("azure/preempt/1", EventStatus="Started"))
    assert not guard.due(6), "the exit was answered: the same terminate asks for nothing more"
    assert guard.should_exit and guard.exit_code == 143
    # Withdrawn and raised again: a new occurrence, saved for again.
    from dataclasses import replace

    guard._on_event(replace(_terminate("azure/preempt/1"), action="clear"))
    guard._on_event(_terminate("azure/preempt/1", EventStatus="Scheduled"))
    assert guard.due(7)
    guard.close()


def test_an_evaluation_after_the_exit_save_asks_for_no_second_save(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The exit's save was made (SaveResult.exit); the job runs a last evaluation on its way
    out. `due_in_eval` still answered the exit that was saved for: a loop that saves when it
    says so saved the same step again inside the grace, and one that did not was told every
    30 s that "the exit's save ... is still running"."""
    import signal

    from forewarn.clients import guard_report

    monkeypatch.setattr(guard_report, "EXIT_SAVE_WARN_SECONDS", 1e-6)
    guard = quiet_guard()
    guard._on_signal(signal.SIGTERM, None)
    assert guard.due(4) and guard.saved(4).exit
    assert not guard.due_in_eval(4), "the exit was saved for"
    guard._check_exit_save()  # the ticker's look, made here at once
    assert "still running" not in caplog.text
    assert guard.should_exit and guard.exit_code == 143
    guard.request("last words", exit=True)  # a new request still asks
    assert guard.due_in_eval(4) and guard.saved(4).exit
    guard.close()


def test_an_exit_requested_again_after_its_save_asks_for_no_second_save() -> None:
    """A job's own SIGTERM handler calling `guard.request('signal', exit=True)` (as the
    README says to, installed after the guard) hears systemd's and torchrun's repeated
    SIGTERM too: after the exit's save that asked for the same save again, and a loop that
    went on (a framework's teardown, one more `due` on the way out) saved and acked twice
    inside the window. The guard's own handler ignores such a repeat; so does `request`
    (another reason still asks: test_an_evaluation_after_the_exit_save_asks_for_no_second_save)."""
    guard = quiet_guard()
    guard.request("signal", exit=True)
    assert guard.due(1)
    assert guard.saved(1, 0.01).exit
    guard.request("signal", exit=True)  # the platform's SIGTERM again
    assert not guard.due(2)
    assert guard.should_exit and guard.exit_code == 143
    guard.request("checkpoint")  # a save asked for without an exit is still made
    assert guard.due(3)
    guard.close()


def test_a_save_after_the_exits_save_is_not_logged_as_an_exit_of_its_own(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A loop that went on after its exit's save (a framework's teardown, a loop that reads
    only `should_exit` at its epoch's end) logged "exiting at step 8 on periodic" at each
    periodic save, and the exit's code went from 130 (the Ctrl-C it saved for) to 143."""
    import signal

    caplog.set_level("INFO", logger="forewarn.clients")
    guard = quiet_guard(every_steps=5)
    try:
        assert not guard.due(2)
        guard._on_signal(signal.SIGINT, None)
        assert guard.due(3)
        first = guard.saved(3)
        assert first.exit and first.reasons == ("signal",) and guard.exit_code == 130
        assert [step for step in range(4, 9) if guard.due(step)] == [8]
        again = guard.saved(8)
        assert again.exit, "the loop is still to leave"
        assert again.reasons == ("periodic",)
        assert guard.exit_code == 130, "the exit saved for was the Ctrl-C's"
    finally:
        guard.close()
    said = [record.getMessage() for record in caplog.records]
    assert [line for line in said if "exiting at step" in line] == [
        "forewarn: exiting at step 3 on SIGINT; checkpoint saved by the caller"
    ]
    assert any(
        "saved at step 8 (periodic)" in line and "exit's save at step 3" in line for line in said
    ), said


def test_a_save_after_the_exits_save_that_fails_or_runs_long_is_not_the_exits(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A periodic save past the exit's save (a loop that went on) that raised made the exit's
    code 1, as if the exit's state was lost, and logged "exiting at step 8 on periodic; the
    checkpoint of step 8 was NOT saved"; one running long was said to be "the exit's save of
    step 8 (on periodic)". The exit's state was saved at step 3: its code stays 143."""
    import signal

    from forewarn.clients import guard_report

    monkeypatch.setattr(guard_report, "EXIT_SAVE_WARN_SECONDS", 1e-6)
    guard = quiet_guard(every_steps=5)
    guard._on_signal(signal.SIGTERM, None)
    assert guard.due(3) and guard.saved(3).exit and guard.exit_code == 143
    assert [step for step in range(4, 9) if guard.due(step)] == [8]
    guard._check_exit_save()  # the ticker's look, made here at once
    guard.save_failed(8, OSError("disk full"))
    assert guard.exit_code == 143, "the exit's state is saved, at step 3"
    assert "still running" not in caplog.text
    assert "NOT saved" not in caplog.text and "exiting at step 8" not in caplog.text
    # A new exit asked for past the exit's save is one of its own: its save failing says so.
    guard.request("shutdown", exit=True)
    assert guard.due(9)
    guard.save_failed(9, OSError("disk full"))
    assert guard.exit_code == 1 and "exiting at step 9 on shutdown" in caplog.text
    guard.close()
