"""The client side of a notice's life against a small model of the README's wire protocol.

A Hypothesis state machine plays an agent to one `Notices` (in-process, through its own
`_message`, with its clock injected) and the `CheckpointGuard` listening to it: notices raised,
escalated and sent as a drain again, changed, cleared and expired; heartbeats listing the
active ids with `acked`, `acked_by` and `exit_margin`; replays to a late joiner (every
subscriber gets them); messages lost on the way (`seq` gaps) and the replay a client asks for by
subscribing again; an agent restarted with a new id, a `seq` from its reserved mark, the
notices of its state file replayed, and for its first 5 s only those listed (one published the
instant before the kill is missing until its watcher answers); deadlines moved. Between these
the job trains: `due`, and later `saved` when it said so (separate steps: notices are raised,
cleared, escalated, moved and raised again while a save is written), until a save answers an
exit.

After every step the client is held to the model: a clear (the agent's or one `Notices` makes
for an id the heartbeats no longer list) is never heard for a notice still in force; a drain
is saved for once per occurrence at most; a job exits once at most. Once the client has had
its heartbeats and the 10 s between replay asks, it holds every notice as the agent last sent
it (a lost message was recovered by a replay), every terminate in force that is this job's
asks it to exit and the loop's next save ends the job, and every drain occurrence in force has
had a save (one the client could not tell from the last, its clear lost, excepted).
"""

from __future__ import annotations

import json
import time as real_time
from datetime import datetime, timedelta
from typing import Any

from forewarn.clients import (
    CheckpointGuard,
    Notices,
    guard_background,
    guard_due,
    guard_flag,
    guard_notices,
    guard_report,
)
from forewarn.clients import guard as guard_module
from forewarn.clients import notices as notices_module
from forewarn.clients.event import Event
from forewarn.protocol.timefmt import format_time, parse_time, utcnow
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from support import examples

IDS = ["aws/spot/a", "gcp/maint/b", "local/manual/c"]
# Deadlines far enough that no inherited exit comes due on the wall clock during a run.
DEADLINES = st.sampled_from([None, 7200])
# Whether the message a rule makes the agent send is lost on its way (dropped past the
# high-water marks while the job was stopped by SIGSTOP, say).
LOST = st.sampled_from([False, False, True])
AGENT_MARGIN = 120.0
RESERVED = 100_000  # how far a restarted agent's `seq` starts past the last one
# The modules whose `time` is the test's clock: the subscriber's and the guard's parts'.
CLOCKED = (
    notices_module,
    guard_module,
    guard_background,
    guard_due,
    guard_flag,
    guard_notices,
    guard_report,
)


class Clock:
    """`time` as the client modules see it, with a monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(real_time, name)


class ClientModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.started = utcnow()  # the agent's wall clock at clock.now 1000, moving with it
        self._patched = [module.time for module in CLOCKED]
        for module in CLOCKED:
            setattr(module, "time", self.clock)  # noqa: B010
        self.notices = Notices(
            "ipc:///nonexistent/events", "ipc:///nonexistent/control", start=False
        )
        self.acks: list[str | None] = []
        self.notices.ack = self._ack  # type: ignore[method-assign]
        self.notices.add_listener(self._heard)
        self.guard: CheckpointGuard | None = None
        self.invented: list[str] = []
        self.job_done = False
        self.step = 0
        # The agent.
        self.agent_id = "node/1/a"
        self.seq = 1_000
        self.active: dict[str, dict[str, Any]] = {}  # what the provider shows: in force
        self.listed: set[str] = set()  # what this agent knows of (its heartbeats' `active`)
        self.acked: set[str] = set()
        self.last_notice: tuple[str, dict[str, Any] | None] | None = None  # (id, before it)
        self.restarted_at: float | None = None
        self.lose_next = 0  # messages to drop on their way
        # Occurrences: a notice cleared by the agent and raised again is a new one.
        self.occurrence: dict[str, int] = dict.fromkeys(IDS, 0)
        self.drain_saves: dict[tuple[str, int], int] = {}
        self.occurrence_sent: dict[int, int] = {}  # the occurrence a notice's `seq` was sent for
        self.received_as_drain: set[str] = set()
        # Notices heard as terminate since the job last saved for them: a save answering one
        # (sent as a drain again before it) is the terminate's, made as the guard says.
        self.terminate_unsaved: set[str] = set()
        # The step `due` said to save at, until `saved` records it: notices are raised,
        # cleared, escalated and moved between the two, as they are while a job writes.
        self.saving: int | None = None
        # Occurrences a save answered (as a drain or as a terminate), and those whose clear
        # the client could not hear (lost, the id raised again before any heartbeat left it
        # out): to the client the same notice, already saved for.
        self.saved_for: set[tuple[str, int]] = set()
        self.unheard_clear: set[tuple[str, int]] = set()
        self.exits = 0
        self._heartbeat()  # a client that connects hears one within the second

    def teardown(self) -> None:
        if self.guard is not None:
            self.guard.close()
        for module, patched in zip(CLOCKED, self._patched, strict=True):
            setattr(module, "time", patched)  # noqa: B010

    # The client side.

    def _ack(self, notice_id: str | None, **_: Any) -> bool:
        self.acks.append(notice_id)
        if notice_id is not None and notice_id in self.active:
            self.acked.add(notice_id)  # the agent counts it
        return True

    def _heard(self, event: Event) -> None:
        if event.action == "clear" and event.id in self.active:
            # Said by the invariant: `Notices` logs what a listener raises, and goes on.
            self.invented.append(f"a clear heard for {event.id}, still in force")
        elif event.action == "drain":
            self.received_as_drain.add(event.id)
        else:
            self.terminate_unsaved.add(event.id)

    def _deliver(self, topic: str, message: dict[str, Any]) -> None:
        self.seq += 1
        message = {"v": 1, "seq": self.seq, **message}
        if self.lose_next:
            self.lose_next -= 1
            return
        self.notices._message([topic.encode(), json.dumps(message).encode()])
        if self.notices._replay_wanted:  # as the reading thread does: subscribe again
            self.notices._replay_wanted = False
            self._replay()

    def _send(self, notice_id: str, content: dict[str, Any]) -> None:
        now = format_time(self._wall())
        self.occurrence_sent[self.seq + 1] = self.occurrence[notice_id]
        self._deliver(
            "notice",
            {"id": notice_id, "provider": notice_id.split("/")[0], "sent_at": now, **content},
        )

    def _wall(self) -> datetime:
        return self.started + timedelta(seconds=self.clock.now - 1_000.0)

    def _replay(self) -> None:
        for notice_id in sorted(self.listed):
            self._send(notice_id, self.active[notice_id])

    def _heartbeat(self) -> None:
        listed = sorted(self.listed)
        self._deliver(
            "heartbeat",
            {
                "agent": self.agent_id,
                "version": "0.1.0",
                "providers": ["local", "aws", "gcp"],
                "active": listed,
                "acked": sorted(self.acked & self.listed),
                "acked_by": {i: ["job"] for i in listed if i in self.acked},
                "exit_margin": AGENT_MARGIN,
                "sent_at": format_time(self._wall()),
            },
        )

    def _publish(
        self, notice_id: str, content: dict[str, Any] | None, why: dict[str, str] | None = None
    ) -> None:
        """The agent's change of one notice (None: cleared, `why` its detail), as it
        publishes it."""
        before = self.active.get(notice_id)
        self.last_notice = (notice_id, before)
        if content is None:
            self.active.pop(notice_id)
            self.listed.discard(notice_id)
            self.acked.discard(notice_id)
            self.occurrence[notice_id] += 1
            assert before is not None
            self._send(notice_id, {**before, "action": "clear", "detail": why or before["detail"]})
        else:
            self.active[notice_id] = content
            self.listed.add(notice_id)
            self._send(notice_id, content)

    @staticmethod
    def _pick(ids: list[str], index: int) -> str:
        """The `index`th of `ids` (wrapping): a rule acts on a notice it can act on, so
        Hypothesis spends no step on an id absent or present."""
        return ids[index % len(ids)]

    def _settled(self) -> bool:
        return self.restarted_at is None

    # The agent's rules.

    @precondition(lambda self: self._settled() and len(self.active) < len(IDS))
    @rule(
        index=st.integers(0, len(IDS) - 1),
        action=st.sampled_from(["drain", "terminate"]),
        deadline=DEADLINES,
        lost=LOST,
    )
    def raise_notice(self, index: int, action: str, deadline: int | None, lost: bool) -> None:
        notice_id = self._pick([i for i in IDS if i not in self.active], index)
        if notice_id in self.notices.active:
            self.unheard_clear.add((notice_id, self.occurrence[notice_id]))
        self.lose_next = int(lost)
        now = utcnow()
        # Before the job started: a notice in force when it starts (inherited).
        noticed = now if self.guard is not None else now - timedelta(hours=2)
        self._publish(
            notice_id,
            {
                "action": action,
                "reason": "spot-interruption",
                "deadline": None
                if deadline is None
                else format_time(now + timedelta(seconds=deadline)),
                "noticed_at": format_time(noticed),
                "detail": {"n": 0},
            },
        )

    @precondition(lambda self: self._settled() and bool(self.active))
    @rule(index=st.integers(0, len(IDS) - 1), lost=LOST)
    def escalate_or_back(self, index: int, lost: bool) -> None:
        """A drain sent as terminate (its deadline within the margin), or a terminate sent as a
        drain again (its deadline moved out of it): same id."""
        notice_id = self._pick(sorted(self.active), index)
        known = self.active[notice_id]
        self.lose_next = int(lost)
        to = "terminate" if known["action"] == "drain" else "drain"
        self._publish(notice_id, {**known, "action": to})

    @precondition(lambda self: self._settled() and bool(self.active))
    @rule(
        index=st.integers(0, len(IDS) - 1), deadline=st.sampled_from([None, 3600, 7200]), lost=LOST
    )
    def move_deadline(self, index: int, deadline: int | None, lost: bool) -> None:
        """The provider moved the notice's deadline (earlier or later, still outside the
        margin, or unknown now): same id, same action."""
        notice_id = self._pick(sorted(self.active), index)
        known = self.active[notice_id]
        self.lose_next = int(lost)
        moved = None if deadline is None else format_time(utcnow() + timedelta(seconds=deadline))
        self._publish(notice_id, {**known, "deadline": moved})

    @precondition(lambda self: self._settled() and bool(self.active))
    @rule(index=st.integers(0, len(IDS) - 1), lost=LOST)
    def change_detail(self, index: int, lost: bool) -> None:
        notice_id = self._pick(sorted(self.active), index)
        known = self.active[notice_id]
        self.lose_next = int(lost)
        self._publish(notice_id, {**known, "detail": {"n": known["detail"]["n"] + 1}})

    @precondition(lambda self: self._settled() and bool(self.active))
    @rule(index=st.integers(0, len(IDS) - 1), expired=st.booleans(), lost=LOST)
    def clear(self, index: int, expired: bool, lost: bool) -> None:
        """Withdrawn by its provider, or expired (cleared with a reason)."""
        notice_id = self._pick(sorted(self.active), index)
        self.lose_next = int(lost)
        self._publish(notice_id, None, {"expired": "overdue by 2m"} if expired else None)

    @rule(lost=LOST)
    def heartbeat(self, lost: bool) -> None:
        self.lose_next = int(lost)
        self._heartbeat()

    @rule()
    def another_client_joins(self) -> None:
        """The agent replays its active notices, to every subscriber."""
        self._replay()

    @precondition(lambda self: self._settled())
    @rule(killed_at_once=st.booleans(), lost=st.integers(0, 2), beat_first=st.booleans())
    def restart_agent(self, killed_at_once: bool, lost: int, beat_first: bool) -> None:
        """A new agent id and `seq` mark; its state file lacks the notice published the instant
        before the kill. The client reconnects: the replay, then the new agent's heartbeat."""
        self.agent_id = f"node/{self.seq}/b"
        self.seq += RESERVED
        self.listed = set(self.active)
        if killed_at_once and self.last_notice is not None:
            notice_id, before = self.last_notice
            if before is None:
                self.listed.discard(notice_id)
        self.restarted_at = self.clock.now
        # Of its first messages, `lost` never arrive. Its first heartbeat may come before the
        # replay: the heartbeat's subscription may be read before the notice's.
        self.lose_next = lost
        if beat_first:
            self._heartbeat()
        self._replay()
        self._heartbeat()

    @rule(seconds=st.sampled_from([0.3, 1.0, 2.0, 6.0, 11.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.now += seconds
        if self.restarted_at is not None and self.clock.now - self.restarted_at >= 5.0:
            # Its watchers answered: what it did not list is published now.
            self.restarted_at = None
            for notice_id in sorted(set(self.active) - self.listed):
                self._publish(notice_id, self.active[notice_id])
        self._heartbeat()
        if self.guard is not None:
            self.guard._check_inherited()

    # The job.

    @precondition(lambda self: self.guard is None)
    @rule()
    def job_starts(self) -> None:
        self.guard = CheckpointGuard(
            notices=self.notices, flag_file=None, handle_signals=False, agree=False
        )
        self.guard._stop.set()  # its ticker's checks are made here, on the test's clock
        self.guard._ticker.join()

    def train_step(self) -> None:
        """One step of the loop: `due`, and `saved` at once when it says so."""
        self.due()
        if self.saving is not None:
            self.saved()

    @precondition(lambda self: self.guard is not None and not self.job_done and self.saving is None)
    @rule()
    def due(self) -> None:
        assert self.guard is not None
        self.step += 1
        if self.guard.due(self.step):
            self.saving = self.step

    @precondition(lambda self: self.saving is not None)
    @rule()
    def saved(self) -> None:
        """The save `due` asked for is written: whatever came while it was, it answers."""
        assert self.guard is not None and self.saving is not None
        held = dict(self.notices.active)
        result = self.guard.saved(self.saving, 1.0)
        self.saving = None
        for notice_id in result.notices:
            event = held.get(notice_id)
            if event is not None:
                self.saved_for.add((notice_id, self.occurrence_sent[event.seq]))
            if notice_id in self.terminate_unsaved:
                self.terminate_unsaved.discard(notice_id)
            elif event is not None and event.action == "drain":
                key = (notice_id, self.occurrence_sent[event.seq])
                self.drain_saves[key] = self.drain_saves.get(key, 0) + 1
                assert self.drain_saves[key] == 1, f"drain {key} saved for again"
        if result.exit:
            self.exits += 1
            self.job_done = True

    @rule()
    def settle(self) -> None:
        """Long enough for every rule of the client to have run: past a restart's 5 s, two
        heartbeats and the 10 s between replay asks, twice."""
        for _ in range(3):
            self.clock.now += 11.0
            self.time_passes(0.0)
            self._heartbeat()
        for notice_id, content in self.active.items():
            held = self.notices.active.get(notice_id)
            assert held is not None, f"{notice_id} in force, never recovered"
            assert (held.action, held.detail) == (content["action"], content["detail"])
        assert set(self.notices.active) == set(self.active)
        guard = self.guard
        if guard is None or self.job_done:
            return
        guard._check_inherited()
        for notice_id, content in self.active.items():
            if content["action"] != "terminate":
                continue
            noticed = parse_time(content["noticed_at"]).timestamp()
            inherited = notice_id not in self.received_as_drain and noticed < guard._started_wall
            if inherited and notice_id in guard._inherited:
                continue  # acted on by an earlier client: planned for its deadline
            assert guard.should_exit, f"terminate {notice_id} in force, and the job trains on"
        # The loop goes on: the save under way ends, and whatever is pending is saved for.
        if self.saving is not None:
            self.saved()
        if not self.job_done:
            self.due()
            if self.saving is not None:
                self.saved()
        if guard.should_exit or self.job_done:
            assert self.job_done and self.exits == 1, "an exit asked for, and no save ended it"
            return
        for notice_id, content in self.active.items():
            key = (notice_id, self.occurrence[notice_id])
            if content["action"] == "drain" and key not in self.unheard_clear:
                assert key in self.saved_for, f"drain {key} in force, never saved for"

    @invariant()
    def no_clear_is_heard_for_a_notice_in_force(self) -> None:
        assert self.invented == []

    @invariant()
    def one_exit_at_most(self) -> None:
        assert self.exits <= 1


ClientModel.TestCase.settings = settings(
    max_examples=examples(100), stateful_step_count=50, deadline=None
)
test_client_model = ClientModel.TestCase


def test_an_escalation_lost_with_a_restarted_agents_replay_of_it_is_asked_for_again() -> None:
    """A drain escalated while the job's messages were being dropped, the agent restarted and
    its replay of the terminate dropped too: its first heartbeat wiped the gap, and its later
    ones list the id the client holds (as a drain), so the terminate was never asked for."""
    machine = ClientModel()
    try:
        machine.job_starts()
        machine.raise_notice(index=0, action="drain", deadline=7200, lost=False)
        machine.train_step()
        machine.escalate_or_back(index=0, lost=True)
        machine.restart_agent(killed_at_once=False, lost=1, beat_first=False)
        machine.settle()
        assert machine.notices.active[IDS[0]].action == "terminate"
        assert machine.guard is not None and machine.guard.should_exit
    finally:
        machine.teardown()


def test_a_job_stopped_across_an_agent_restart_hears_no_clear_for_a_notice_in_force() -> None:
    """The client read a restarted agent's first heartbeat, then the job stopped for 6 s
    (SIGSTOP, or a call that held the GIL): the agent's heartbeats of its first 5 s, which
    leave out the drain published the instant before the kill, waited in the queue. Read
    after the client's own 5 s had passed, they withdrew the drain (a clear for a notice in
    force), and the guard saved for it again when the watcher's answer brought it back."""
    machine = ClientModel()
    queued: list[list[bytes]] = []
    read = machine.notices._message
    try:
        machine.job_starts()
        machine.raise_notice(index=0, action="drain", deadline=7200, lost=False)
        machine.train_step()
        machine.restart_agent(killed_at_once=True, lost=0, beat_first=False)
        machine.notices._message = lambda frames: queued.append(frames) or True  # type: ignore[method-assign]
        for _ in range(6):
            machine.time_passes(1.0)
        machine.notices._message = read  # type: ignore[method-assign]
        for frames in queued:
            read(frames)
        machine.no_clear_is_heard_for_a_notice_in_force()
        machine.train_step()
        machine.settle()
    finally:
        machine.teardown()


def test_a_message_lost_before_the_first_heartbeat_read_is_asked_for() -> None:
    """A client's first messages may be notices (its join replay, the agent's own): one lost
    between them and the first heartbeat it read left no gap anywhere, since the first
    heartbeat's `seq` was not compared with the messages before it."""
    notices = Notices("ipc:///nonexistent/events", "ipc:///nonexistent/control", start=False)
    sent = format_time(utcnow())
    notice = {"v": 1, "id": "aws/spot/a", "reason": "spot-interruption", "provider": "aws"}
    notice.update(deadline=None, noticed_at=sent, sent_at=sent, detail={})
    notices._message([b"notice", json.dumps({**notice, "seq": 5, "action": "drain"}).encode()])
    # seq 6, its escalation to terminate: dropped.
    beat = {"v": 1, "seq": 7, "agent": "node/1/a", "active": ["aws/spot/a"], "sent_at": sent}
    notices._message([b"heartbeat", json.dumps(beat).encode()])
    assert notices._replay_wanted


def test_a_drain_cleared_during_its_save_and_raised_again_is_saved_for_again() -> None:
    """833b6399 as the model's steps: `due`, the drain cleared, the save written, the same id
    raised again. The save marked the cleared drain handled, and the occurrence raised again
    asked the job for no save."""
    machine = ClientModel()
    try:
        machine.job_starts()
        machine.raise_notice(index=0, action="drain", deadline=7200, lost=False)
        machine.due()
        machine.clear(index=0, expired=False, lost=False)
        machine.saved()
        machine.raise_notice(index=0, action="drain", deadline=7200, lost=False)
        machine.settle()
        assert (IDS[0], 1) in machine.saved_for
    finally:
        machine.teardown()
