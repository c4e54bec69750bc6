"""Which notice `forewarn wait` returns on, and when, for notices in force before it began.

A shell job's `wait` is a new process each time it runs: started while notices are in force,
it gets them all at once as the agent's replay. It decides about them as the client library's
`CheckpointGuard` decides for a job started under them, by the heartbeat's `acked` (the active
notices some client has saved for):

- a drain nobody saved for is returned, like any drain; one some client saved for is passed
  by. A `wait` → save → `forewarn ack` loop otherwise got back, from its next `wait`, the drain
  it had just saved for, whenever the drain outlived the ack (a library client still holding
  it, or any provider's drain), and saved for it forever;
- a terminate nobody acted on is returned at once; one an earlier client acted on is returned
  `exit_margin` before its deadline (at once when that is past), and one without a deadline
  ahead asks nothing of this job. The library lets a job restarted under a terminate train
  until then; `wait --for terminate && kill "$JOB"` killed the restarted job at once.

With a client id (`wait --client ID`, the id the loop's `forewarn ack --client ID` sends), a
drain counts as saved for only when that client acked it (the heartbeat's `acked_by`): a drain
that arrived while the loop saved for the one before, and that another client saved for
first, was passed by, and the loop never saved for it. An agent whose heartbeat has no
`acked_by` (older), or names as many clients as it lists for a notice without this one, is
read by `acked` as before.

A notice raised after the wait began is returned at once, and so is a drain this wait saw
and passed by that is escalated to terminate (its `noticed_at` is the drain's). Raised after
it began is told by the agent's `ages` (seconds since each notice was raised, on a clock no
step of the wall clock moves) where the agent gives them, else by `noticed_at`. By
`noticed_at` alone, NTP stepping the clock back after the wait began had a drain raised since
taken for one in force before it, and passed by when another client had acked it; and one
stepping it back after a drain was raised had every later `wait` of the README's loop return
that drain, acked by the loop already, as news, for as long as the step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from forewarn.protocol.timefmt import parse_time, span_text, utcnow

from .limits import ACKED_BY_LISTED
from .steadyclock import steady_seconds

# The client library's INHERITED_EXIT_MARGIN (tests/agent/test_shell_job_loops.py pins the
# two together): a terminate an earlier job acted on stops the next one this long before
# its deadline.
WAIT_EXIT_MARGIN = 30.0
# A heartbeat that leaves a replayed notice undecided (it does not list it, or an agent too old
# to send `acked`) is waited past for this long, the client library's heartbeat timeout. The
# notice then counts as nobody's yet and is returned, as `wait` always returned it: where the
# library lets the job train on, a `wait` that cannot tell stops the job early rather than
# perhaps not at all (an old agent's terminate without a deadline would never end it).
DECIDE_WITHIN = 3.0

Notice = dict[str, Any]


class WaitRule:
    """Feed it every notice and heartbeat `wait` reads; `notice`, `heartbeat` and `due` return
    the notice to return on, when one is due. `say` gets one line for each notice passed by or
    put off, for stderr."""

    def __init__(
        self,
        accepted: tuple[str, ...],
        *,
        started: datetime,
        exit_margin: float,
        say: Callable[[str], None],
        client: str | None = None,
        clock: Callable[[], float] = steady_seconds,
        ages: Callable[[], Mapping[str, object] | None] | None = None,
    ) -> None:
        """`clock`: the boot clock, as the agent's; `ages`: the agent's status `ages`
        (None when it does not answer or gives none)."""
        self.accepted = accepted
        self.client = client
        self.started = started
        self.clock = clock
        self.started_clock = clock()
        self.ages = ages
        self.exit_margin = exit_margin
        self.say = say
        self._beat: dict[str, Any] | None = None
        self._drains_seen: set[str] = set()
        self._undecided: dict[str, tuple[Notice, float]] = {}  # and since when (monotonic)
        self._put_off: dict[str, tuple[Notice, datetime]] = {}  # and when it is due
        self._passed: dict[str, Notice] = {}

    def notice(self, notice: Notice) -> Notice | None:
        notice_id, action = notice["id"], notice["action"]
        if action == "clear":
            self._forget(notice_id)
            self._drains_seen.discard(notice_id)
            return None
        if action == "drain":
            known = self._known(notice_id)
            self._drains_seen.add(notice_id)
            if known is not None and known["action"] == "drain" and notice_id in self._passed:
                return None  # saved for already: a changed drain asks for no second save
            # A terminate sent as a drain again: the exit put off for it is dropped.
            self._forget(notice_id)
            if action not in self.accepted:
                return None
            return self._in_force_before(notice)
        if action not in self.accepted:
            return None
        known = self._known(notice_id)
        if known is not None and known["action"] == "terminate":
            if known.get("deadline") == notice.get("deadline"):
                return None  # the same terminate sent again (a reason, the provider's detail)
            self._forget(notice_id)
            return notice  # a new deadline acts at once, as in the library
        if notice_id in self._drains_seen:
            return notice  # a drain escalated while this wait listened
        return self._in_force_before(notice)

    def heartbeat(self, beat: dict[str, Any]) -> Notice | None:
        self._beat = beat
        return self._decide()

    def due(self) -> Notice | None:
        """An acted-on terminate whose exit margin has come, or a notice decided by time."""
        decided = self._decide()
        if decided is not None:
            return decided
        now = utcnow()
        for notice_id, (notice, when) in list(self._put_off.items()):
            if now >= when:
                del self._put_off[notice_id]
                return notice
        return None

    def next_due(self) -> float | None:
        """Seconds until the first put-off terminate is due (None when there is none)."""
        if not self._put_off:
            return None
        first = min(when for _, when in self._put_off.values())
        return max(0.0, (first - utcnow()).total_seconds())

    def _known(self, notice_id: str) -> Notice | None:
        if notice_id in self._undecided:
            return self._undecided[notice_id][0]
        if notice_id in self._put_off:
            return self._put_off[notice_id][0]
        return self._passed.get(notice_id)

    def _forget(self, notice_id: str) -> None:
        self._undecided.pop(notice_id, None)
        self._put_off.pop(notice_id, None)
        self._passed.pop(notice_id, None)

    def _in_force_before(self, notice: Notice) -> Notice | None:
        if self._raised_since(notice):
            return notice
        self._undecided[notice["id"]] = (notice, time.monotonic())
        return self._decide()

    def _raised_since(self, notice: Notice) -> bool:
        """Whether the agent raised the notice after this wait began: by its age on the boot
        clock where the agent gives one, else (an older agent, one not answering, a notice
        restored from an earlier boot) by its `noticed_at`. The age decides both ways: by
        `noticed_at`, a clock stepped back after a drain was raised had every later `wait`
        take it for news and the loop save for it again and again, and a clock stepped back
        after the wait began had one raised since passed by. A notice changed since it was
        raised (a deadline moved) is judged by its raise: a drain saved for asks no second
        save, and a terminate acted on is put off by its deadline as it is now."""
        age = self._age(notice["id"])
        if age is not None:
            return age < self.clock() - self.started_clock
        return parse_time(notice["noticed_at"]) >= self.started

    def _age(self, notice_id: str) -> float | None:
        ages = self.ages() if self.ages is not None else None
        age = ages.get(notice_id) if ages is not None else None
        if not isinstance(age, (int, float)) or isinstance(age, bool) or not 0 <= age < math.inf:
            return None
        return float(age)

    def _decide(self) -> Notice | None:
        beat = self._beat
        for notice_id, (notice, since) in list(self._undecided.items()):
            if beat is not None and notice_id in beat.get("active", ()) and "acked" in beat:
                acted = notice_id in beat["acked"]
                if acted and notice["action"] == "drain":
                    acted = self._acked_by_this(beat, notice_id)
            elif time.monotonic() - since < DECIDE_WITHIN:
                continue
            else:
                acted = False
            del self._undecided[notice_id]
            if not acted:
                return notice
            if notice["action"] == "drain":
                self._passed[notice_id] = notice
                who = f"client {self.client}" if self.client else "a client"
                self.say(
                    f"drain {notice_id} was in force before this wait began and {who} has "
                    "saved for it (the agent lists it as acked): waiting for another notice"
                )
                continue
            ready = self._put_off_terminate(notice)
            if ready is not None:
                return ready
        return None

    def _acked_by_this(self, beat: dict[str, Any], notice_id: str) -> bool:
        """Whether this wait's client acked the notice; without a client, any client's ack
        counts (the caller has seen one). An agent that does not say who acked (no
        `acked_by`), or lists as many as it names without this client, cannot tell: then any
        client's ack counts, as before."""
        if self.client is None:
            return True
        by = beat.get("acked_by")
        if not isinstance(by, dict):
            return True
        clients = by.get(notice_id)
        if not isinstance(clients, list):
            return False
        if self.client in clients:
            return True
        return len(clients) >= ACKED_BY_LISTED

    def _put_off_terminate(self, notice: Notice) -> Notice | None:
        notice_id = notice["id"]
        deadline = parse_time(notice["deadline"]) if notice.get("deadline") else None
        why = (
            f"terminate {notice_id} was in force before this wait began and an earlier client "
            "acted on it (saved; the agent lists it as acked)"
        )
        left = (deadline - utcnow()).total_seconds() if deadline is not None else None
        if deadline is None or left is None or left <= 0:
            self._passed[notice_id] = notice
            state = "past" if left is not None else "unknown"
            self.say(f"{why}; its deadline is {state}, so it is ignored: waiting for another")
            return None
        margin = self._margin()
        if left <= margin:
            return notice
        # Past the margin, so no earlier than now: the difference cannot overflow.
        self._put_off[notice_id] = (notice, deadline - timedelta(seconds=margin))
        self.say(
            f"{why}; it does not end this wait at once: it returns {margin:g}s before "
            f"its deadline ({span_text(left)} away)"
        )
        return None

    def _margin(self) -> float:
        """`exit_margin`, or the agent's (the heartbeat's) when larger, as the client library
        takes it: under an agent's 120 s margin a job stopped 30 s before the deadline had its
        save cut by the kill."""
        agents = self._beat.get("exit_margin") if self._beat is not None else None
        if isinstance(agents, (int, float)) and not isinstance(agents, bool):
            return max(self.exit_margin, float(agents))
        return self.exit_margin


__all__ = ["DECIDE_WITHIN", "WAIT_EXIT_MARGIN", "WaitRule"]
