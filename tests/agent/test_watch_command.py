"""`forewarn watch` for people: a replay (an active notice sent again because someone
subscribed) reads differently from news, a `clear` shows no deadline, and a `--note` shows,
escaped onto its one line."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

import pytest
from forewarn.agent.cli import main
from forewarn.agent.eventlines import ReplayTracker, describe
from hypothesis import given
from hypothesis import strategies as st
from support import AgentProcess, Subscriber, forewarn_cmd, run_forewarn

NOTE = 'save first\n\x1b[2J "now"'


class Lines:
    """A watcher's stdout, a line at a time, without blocking the test forever."""

    def __init__(self, stream: IO[str]) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line.rstrip("\n"))

    def next(self, timeout: float = 20.0) -> str:
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line from the watcher within {timeout}s") from None


def _watch(agent: AgentProcess, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        forewarn_cmd("watch", *args), env=agent.env, stdout=subprocess.PIPE, text=True
    )


def test_watch_marks_replays_hides_clear_deadlines_and_shows_notes(tmp_path: Path) -> None:
    with AgentProcess(tmp_path) as agent:
        first = agent.control(
            {"op": "notify", "action": "drain", "note": NOTE, "deadline": _in_minutes(10)}
        )
        x = first["notice"]["id"]
        text = _watch(agent, "--count", "7")
        assert text.stdout is not None
        seen = Lines(text.stdout)
        # A late joiner: the drain was active before it subscribed.
        line = seen.next()
        assert x in line and line.endswith("[replay]") and "deadline " in line
        assert 'note "save first\\u000a\\u001b[2J \\"now\\""' in line
        as_json = _watch(agent, "--json", "--count", "6")
        assert as_json.stdout is not None
        seen_json = Lines(as_json.stdout)
        assert json.loads(seen_json.next())["replay"] is True
        # The second watcher's subscription replays the drain to the first one too.
        assert seen.next().endswith("[replay]")

        y = agent.control({"op": "notify", "action": "drain", "deadline": _in_minutes(5)})
        y_id = y["notice"]["id"]
        news = seen.next()
        assert y_id in news and "[replay]" not in news
        assert json.loads(seen_json.next())["replay"] is False

        with Subscriber(agent.events).ready():
            # A third subscriber: both active notices again, for everyone, marked.
            replayed = {seen.next(), seen.next()}
            assert all(line.endswith("[replay]") for line in replayed)
            assert all(any(i in line for line in replayed) for i in (x, y_id))
            assert [json.loads(seen_json.next())["replay"] for _ in range(2)] == [True, True]

        cleared = run_forewarn("notify", "clear", "--id", y_id, env=agent.env)
        assert cleared.returncode == 0, cleared.stderr
        clear = seen.next()
        assert clear.split()[1] == "clear" and y_id in clear
        assert "deadline" not in clear and "[replay]" not in clear
        assert json.loads(seen_json.next())["action"] == "clear"

        # The same id with another action is a change, news again.
        agent.control({"op": "notify", "action": "terminate", "id": x})
        changed = seen.next()
        assert changed.split()[1] == "terminate" and "[replay]" not in changed
        assert json.loads(seen_json.next())["replay"] is False
        assert text.wait(15) == 0 and as_json.wait(15) == 0


def _in_minutes(minutes: int) -> str:
    from datetime import datetime, timedelta, timezone

    from forewarn.protocol.timefmt import format_time

    return format_time(datetime.now(timezone.utc) + timedelta(minutes=minutes))


def _notice(action: str = "drain", **fields: object) -> dict[str, object]:
    return {
        "id": "local/manual/1",
        "action": action,
        "reason": "manual",
        "provider": "local",
        "deadline": "2026-11-30T03:12:00Z",
        "sent_at": "2026-11-30T03:10:00Z",
        "detail": {},
        **fields,
    }


def test_tracker_news_repeats_changes_and_reraises() -> None:
    tracker = ReplayTracker()
    assert tracker.is_replay(_notice()) is False  # news
    assert tracker.is_replay(_notice()) is True  # the same again: a replay
    assert tracker.is_replay(_notice("terminate")) is False  # escalated
    assert tracker.is_replay(_notice("terminate", deadline="2026-11-30T04:00:00Z")) is False
    assert tracker.is_replay(_notice("clear", deadline=None)) is False
    assert tracker.is_replay(_notice("terminate", deadline="2026-11-30T04:00:00Z")) is False
    late = ReplayTracker()
    late.heartbeat({"active": ["local/manual/1"]})
    assert late.is_replay(_notice()) is True  # active before this watcher saw it
    assert late.is_replay(_notice(id="local/manual/2")) is False


IDS = st.sampled_from(["local/a", "local/b", "local/c"])


@given(
    first=st.lists(IDS | st.integers() | st.none(), max_size=4),
    later=st.lists(
        st.tuples(st.lists(IDS | st.integers(), max_size=4), st.sets(IDS, max_size=3)),
        max_size=4,
    ),
)
def test_a_notice_in_force_since_the_join_is_a_replay_however_late_it_comes(
    first: list[object], later: list[tuple[list[object], set[str]]]
) -> None:
    """Heartbeats as read (any items), each maybe followed by ids taken as missed: a notice
    every heartbeat has listed since the first one read is a replay when it comes at last,
    one the heartbeats began to list later and that was missed is news."""
    tracker = ReplayTracker()
    tracker.heartbeat({"active": first})
    joined = {item for item in first if isinstance(item, str)}
    missed: set[str] = set()
    for active, ids in later:
        tracker.heartbeat({"active": active})
        listed = {item for item in active if isinstance(item, str)}
        joined &= listed
        missed &= listed
        tracker.missed(ids)
        missed |= ids - joined
    for notice_id in ("local/a", "local/b", "local/c"):
        replay = tracker.is_replay(_notice(id=notice_id))
        if notice_id in joined:
            assert replay is True, notice_id
        elif notice_id in missed:
            assert replay is False, notice_id


@given(
    detail=st.dictionaries(st.sampled_from(("note", "taint")), st.text(max_size=5), max_size=2),
    skews=st.lists(st.one_of(st.none(), st.floats(-1e6, 1e6)), min_size=2, max_size=4),
    other_change=st.booleans(),
)
def test_a_notice_again_with_only_another_skew_is_a_replay(
    detail: dict[str, str], skews: list[float | None], other_change: bool
) -> None:
    """The same notice shown again with any `clock_ahead_seconds` (or none: the skew the
    agent keeps for replays and sends nothing for) is a replay; a change of any other detail
    is news."""
    tracker = ReplayTracker()
    tracker.heartbeat({"active": []})
    marks = []
    for index, skew in enumerate(skews):
        shown = dict(detail) if skew is None else {**detail, "clock_ahead_seconds": skew}
        if other_change and index == len(skews) - 1:
            shown["changed"] = "yes"
        marks.append(tracker.is_replay(_notice(detail=shown)))
    assert marks == [False, *[True] * (len(skews) - 2), not other_change]


def test_describe_clear_and_expiry() -> None:
    clear = describe(_notice("clear", detail={"expired": "overdue by 5m"}))
    assert "deadline" not in clear and 'expired: "overdue by 5m"' in clear
    overdue = describe(_notice(deadline="2000-01-01T00:00:00Z"))
    # Long past: in years and days, as an operator reads it (it was `(848...s ago)`).
    assert overdue.endswith("d ago)") and "y " in overdue.rpartition("(")[2], overdue


@given(note=st.text(max_size=400), expired=st.text(max_size=100))
def test_any_note_stays_on_one_printable_line(note: str, expired: str) -> None:
    for action in ("drain", "clear"):
        line = describe(_notice(action, detail={"note": note, "expired": expired}), replay=True)
        assert line.isprintable() and line.endswith("[replay]")


def test_watch_shows_a_notice_sent_again_with_another_detail_as_news(tmp_path: Path) -> None:
    """A replay is the same id, action, reason, deadline and detail (README). `watch` left
    the detail out: a notice the agent sent again for its detail alone (a new `--note`, AWS's
    spot action `terminate` turned `stop`) came out `[replay]`, `"replay": true` in --json,
    where the client library and the C subscriber take it for news."""
    with AgentProcess(tmp_path) as agent:
        watch = _watch(agent, "--json", "--heartbeats", "--count", "3")
        assert watch.stdout is not None
        seen = Lines(watch.stdout)

        def notice() -> dict[str, object]:
            while True:
                message: dict[str, object] = json.loads(seen.next())
                if message["topic"] == "notice":
                    return message

        # Its first heartbeat: from then on its subscription is in place.
        assert json.loads(seen.next())["topic"] == "heartbeat"
        first = agent.control({"op": "notify", "action": "drain", "id": "local/n", "note": "a"})
        assert first["ok"], first
        assert notice()["replay"] is False
        again = agent.control({"op": "notify", "action": "drain", "id": "local/n", "note": "b"})
        assert again["ok"], again
        changed = notice()
        assert changed["detail"] == {"note": "b"}
        assert changed["replay"] is False
        # Sent again unchanged (a subscriber joined): a replay.
        with Subscriber(agent.events).ready():
            assert notice()["replay"] is True
        assert watch.wait(15) == 0


def test_watch_says_why_it_exits_1_at_its_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`watch --timeout` exited 1 with nothing on stderr: a script's log named no failure."""
    with AgentProcess(tmp_path) as agent:
        monkeypatch.setenv("FOREWARN_RUNTIME_DIR", agent.env["FOREWARN_RUNTIME_DIR"])
        code = main(["watch", "--count", "2", "--timeout", "1.5s"])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err == "forewarn: watch: --timeout 1.5s reached; 0 notice(s) of --count 2 printed\n"


def test_a_watcher_stopped_across_an_agent_restart_prints_no_clear_for_a_notice_in_force(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The watcher read a restarted agent's first heartbeat, then was stopped for 6 s: the
    agent's heartbeats of its first 5 s (which leave out a notice published the instant before
    the kill) were read after the watcher's own 5 s, and it printed a clear for a notice in
    force. The settle counts on the agent's clock too (the heartbeats' `sent_at`)."""
    from forewarn.agent import eventlines

    now = [1_000.0]
    monkeypatch.setattr(eventlines.time, "monotonic", lambda: now[0])
    tracker = ReplayTracker()
    notice_id = _notice()["id"]

    def beat(agent: str, sent_at: str) -> list[dict[str, Any]]:
        return tracker.heartbeat({"agent": agent, "active": [], "sent_at": sent_at, "seq": 9})

    tracker.heartbeat({"agent": "h/1/a", "active": [notice_id], "sent_at": "2026-11-30T03:10:00Z"})
    assert tracker.is_replay(_notice()) is True
    assert beat("h/2/b", "2026-11-30T03:10:02Z") == []  # restarted: its first heartbeat
    now[0] += 6  # stopped; the queued heartbeats of its first seconds are read now
    assert beat("h/2/b", "2026-11-30T03:10:03Z") == []
    assert beat("h/2/b", "2026-11-30T03:10:06Z") == []
    withdrawn = beat("h/2/b", "2026-11-30T03:10:07Z")  # 5 s after its first, by its clock
    assert [(n["id"], n["action"]) for n in withdrawn] == [(notice_id, "clear")]
