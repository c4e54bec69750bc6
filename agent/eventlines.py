"""How `watch`, `wait`, `notify` and `status` print an event for people, and how `watch`
tells a replay from news.

The agent replays every active notice to each new subscriber: a heartbeat listing the active
ids first, then each notice again with a new `seq` and `sent_at` and nothing else changed. The
XPUB sends that replay to every subscriber, so a watcher that has been listening all along sees
it too. Nothing on the wire says "replay"; a watcher knows from what it has already seen.
"""

from __future__ import annotations

import math
import time
from datetime import datetime
from typing import Any

from forewarn.protocol.fields import CLOCK_AHEAD
from forewarn.protocol.oneline import one_line
from forewarn.protocol.timefmt import format_time, parse_time, span_text, time_or_none, utcnow

# A note is free text from whoever ran `forewarn notify`: show all of it, on one line, with
# nothing a terminal would act on.
MAX_NOTE_CHARS = 200


def _visible(text: str) -> str:
    shown = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text)
    if len(shown) > MAX_NOTE_CHARS:
        shown = shown[: MAX_NOTE_CHARS - 3] + "..."
    return '"' + shown.replace('"', '\\"') + '"'


def describe(notice: dict[str, Any], *, replay: bool = False, noticed: bool = False) -> str:
    """One line a person can read: the deadline and time left (not on a `clear`, which
    withdraws the notice), why an expired notice was cleared, the `--note`, and `[replay]`
    on a notice that was already active, sent again for a subscriber that joined late.
    `noticed`: say when the notice was noticed where that is not when it was sent (`status`:
    a restarted agent sends its restored notices again, and the time alone, the restart's,
    read as a drain raised a moment ago however long it had stood)."""
    # Each field as received, on one line: a peer that is not the agent may send any text
    # (a newline in `sent_at` split the line, since a time is read without its blanks).
    sent_at, action, notice_id, reason, provider = (
        one_line(str(notice.get(name, "")))
        for name in ("sent_at", "action", "id", "reason", "provider")
    )
    line = f"{sent_at}  {action:<9} {notice_id}  {reason} ({provider})"
    detail = notice.get("detail")
    detail = detail if isinstance(detail, dict) else {}
    deadline = notice.get("deadline")
    if deadline and notice["action"] != "clear":
        left = (parse_time(deadline) - utcnow()).total_seconds()
        line += f"  deadline {one_line(str(deadline))} ({_left(left)})"
    expired = detail.get("expired")
    if notice["action"] == "clear" and isinstance(expired, str):
        line += f"  expired: {_visible(expired)}"
    withdrawn = detail.get("withdrawn")
    if notice["action"] == "clear" and isinstance(withdrawn, str):
        line += f"  withdrawn: {_visible(withdrawn)}"
    note = detail.get("note")
    if isinstance(note, str) and note:
        line += f"  note {_visible(note)}"
    noticed_at = notice.get("noticed_at")
    if noticed and noticed_at and _apart(noticed_at, notice.get("sent_at")):
        line += f"  noticed {one_line(str(noticed_at))}"
    if replay:
        line += "  [replay]"
    return line


# Noticed and sent closer than this are one moment: the report's time and the send's, read
# microseconds apart, fall on two milliseconds now and then, and `status` said "noticed
# 11:45:35.236Z" of a drain sent at 11:45:35.237Z, as if it had stood before. A restored
# notice's resend comes a restart later, never this soon.
SAME_MOMENT_SECONDS = 0.01


def _apart(noticed_at: object, sent_at: object) -> bool:
    """Whether `noticed_at` is another moment than `sent_at` (text that is no time: unless
    the same text)."""
    noticed, sent = time_or_none(noticed_at), time_or_none(sent_at)
    if noticed is None or sent is None:
        return noticed_at != sent_at
    return abs((sent - noticed).total_seconds()) >= SAME_MOMENT_SECONDS


def _after(beat_seq: object, notice_seq: object) -> object:
    """The heartbeat's `seq` when it is a number past the notice's, else the notice's."""
    if type(beat_seq) is int and (type(notice_seq) is not int or beat_seq > notice_seq):
        return beat_seq
    return notice_seq


def _left(seconds: float) -> str:
    """The time to a deadline, or since it: `in 42s`, `in 300d 5h`, `3h 12m ago` (span_text)."""
    return f"in {span_text(seconds)}" if seconds >= 0 else f"{span_text(-seconds)} ago"


class ReplayTracker:
    """Marks each notice a watcher receives as news or replay.

    A notice is a replay when this watcher already showed it with the same action, reason,
    deadline and detail (less `clock_ahead_seconds`, which the agent sends nothing for), or
    when it was active before the watcher first saw it (listed by the heartbeat that precedes
    every replay), unless the heartbeats began to list it while this watcher listened and it
    never arrived (`missed`). A changed notice (an escalation, a moved deadline, a new note)
    is news, and so is one raised again after its clear.
    """

    def __init__(self) -> None:
        self._shown: dict[str, tuple[Any, ...]] = {}
        self._notices: dict[str, dict[str, Any]] = {}  # the last shown of each, by id
        self._active: set[str] = set()
        self._agent: object = None  # the last heartbeat's `agent`
        self._settle_until = -math.inf
        # The `sent_at` of a restarted agent's first heartbeat read here: as in the client
        # library, its 5 s count on the agent's clock too (a watcher stopped just after it
        # read that heartbeat read the queued ones of those seconds later).
        self._settle_from: datetime | None = None
        self._missed: set[str] = set()  # listed, never received, asked for again
        # Listed by every heartbeat since the first one read here, and not received yet: in
        # force before this watcher joined. One an agent slow to read subscriptions has not
        # replayed within MISSED_AFTER is asked for again too, and still a replay when it
        # comes (taken as missed, a drain standing for an hour printed as just raised).
        self._joined: set[str] | None = None

    def heartbeat(self, beat: dict[str, Any]) -> list[dict[str, Any]]:
        """Note the active ids; returns the `clear` of each shown notice the heartbeat no
        longer lists. One withdrawn while the agent restarted never gets a clear of its own
        (the new agent sent it before this watcher had reconnected), and the watcher went on
        showing it as in force: it gets the clear the client library gives it, and, as
        there, only once a restarted agent's RESTART_SETTLE has passed."""
        active = beat.get("active")
        if not isinstance(active, list):
            return []
        listed = {item for item in active if isinstance(item, str)}
        self._joined = set(listed) if self._joined is None else self._joined & listed
        self._missed &= listed
        self._active = listed - self._missed
        # Imported here: the client library loads zmq, which `status` and `notify` do not need.
        from forewarn.clients import notices

        agent = beat.get("agent")
        if self._agent is not None and agent != self._agent:
            # A notice published the instant before the agent was killed is not in its state
            # file yet, and the restarted agent lists it only once its watcher reports it
            # again: a clear printed meanwhile withdrew a notice nobody had withdrawn.
            self._settle_until = time.monotonic() + notices.RESTART_SETTLE
            self._settle_from = time_or_none(beat.get("sent_at"))
        self._agent = agent
        if time.monotonic() < self._settle_until:
            return []
        if self._settle_from is not None:
            sent = time_or_none(beat.get("sent_at"))
            if sent is not None and (sent - self._settle_from).total_seconds() < (
                notices.RESTART_SETTLE
            ):
                return []
            self._settle_from = None
        withdrawn = []
        # Numbered as the heartbeat that shows them gone, after every message of the notice: with
        # its last message's `seq`, a consumer keeping the highest `seq` of each id kept the
        # notice in force. (Several withdrawn at once share it; none was the agent's message.)
        seq = beat.get("seq")
        for notice_id in [i for i in self._notices if i not in self._active]:
            notice = self._notices.pop(notice_id)
            self._shown.pop(notice_id, None)
            now = format_time(utcnow())
            withdrawn.append(
                {
                    **notice,
                    "seq": _after(seq, notice.get("seq")),
                    "action": "clear",
                    "noticed_at": now,
                    "sent_at": now,
                    "detail": dict(notices.WITHDRAWN),
                }
            )
        return withdrawn

    def missed(self, ids: set[str]) -> None:
        """Notices the heartbeats listed while this watcher listened and that never reached
        it (dropped on the way): when they come, asked for again, they are news. Not those
        in force before it joined, whose replay is only late."""
        ids = ids - (self._joined or set())
        self._missed |= ids
        self._active -= ids

    def is_replay(self, notice: dict[str, Any]) -> bool:
        notice_id = notice["id"]
        self._missed.discard(notice_id)
        if self._joined is not None:
            self._joined.discard(notice_id)
        if notice["action"] == "clear":
            self._shown.pop(notice_id, None)
            self._notices.pop(notice_id, None)
            self._active.discard(notice_id)
            return False
        # The detail too, as the client library and the C subscriber compare: a notice sent
        # again for its detail alone (a new note, AWS's spot action turned `stop`) is news.
        # Not its CLOCK_AHEAD: the agent keeps a new skew for replays and sends nothing for
        # it, and after NTP's step a client joining had each drain printed again as news.
        detail = notice.get("detail")
        if isinstance(detail, dict):
            detail = {key: value for key, value in detail.items() if key != CLOCK_AHEAD}
        key = (notice["action"], notice.get("reason"), notice.get("deadline"), detail)
        known = self._shown.get(notice_id)
        self._shown[notice_id] = key
        self._notices[notice_id] = notice
        if known is None:
            return notice_id in self._active
        return known == key


__all__ = ["ReplayTracker", "describe"]
