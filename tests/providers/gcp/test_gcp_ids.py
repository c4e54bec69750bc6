"""The ids of GCP notices: made from the provider's own data (the kind, this boot, the ETag
and the value or window), so an agent that restarts without its saved notices (killed
between the publish and the write of `gcp-notices.json`) makes the same id again."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from forewarn.agent.limits import id_problem
from forewarn.agent.protocol import Report
from forewarn.protocol.fields import CLOCK_AHEAD, stable_id
from forewarn.protocol.timefmt import format_time, utcnow
from forewarn.providers.boot import boot_id
from forewarn.providers.gcp.active import ACTIVE_FILE, ActiveNotices
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.gcp.watch import NoticeTrack
from forewarn.providers.simulator import SimServer
from gcp_support import watching
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

NOW = datetime(2026, 12, 6, 21, 0, tzinfo=timezone.utc)
WINDOW = {
    "can_reschedule": True,
    "latest_window_start_time": "2026-12-13T22:00:00Z",
    "maintenance_reasons": ["PLANNED_UPDATE"],
    "maintenance_status": "PENDING",
    "type": "SCHEDULED",
    "window_end_time": "2026-12-07T02:00:00Z",
    "window_start_time": "2026-12-06T22:00:00Z",
}


def _report(kind: str, detail: dict[str, Any], seen: datetime) -> Report:
    action = "terminate" if kind == "preempted" else "drain"
    reason = {
        "preempted": "preemption",
        "maintenance-event": "host-maintenance",
        "upcoming-maintenance": "scheduled-maintenance",
    }[kind]
    return Report(
        id="gcp/pending",
        action=action,
        reason=reason,
        provider="gcp",
        deadline=seen + timedelta(seconds=30),
        noticed_at=seen,
        detail=detail,
    )


KINDS = {
    "preempted": ({"preempted": "TRUE"}, "etag-p"),
    "maintenance-event": ({"maintenance-event": "TERMINATE_ON_HOST_MAINTENANCE"}, "etag-m"),
    "upcoming-maintenance": (WINDOW, None),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_restarted_track_without_its_saved_notice_makes_the_same_id(kind: str) -> None:
    """Before, the id hashed the time the notice was first seen: an agent killed between the
    publish and the write raised the same maintenance under a second id."""
    detail, etag = KINDS[kind]
    first = NoticeTrack(kind).observe(_report(kind, detail, NOW), detail, etag)
    later = NOW + timedelta(seconds=1.4)
    again = NoticeTrack(kind).observe(_report(kind, detail, later), detail, etag)
    assert first is not None and again is not None
    assert again.id == first.id


def test_an_upcoming_window_begun_while_the_agent_was_down_keeps_its_id() -> None:
    """PENDING -> ONGOING (or a skew taken afresh) says nothing of which window it is."""
    first = NoticeTrack("upcoming-maintenance").observe(
        _report("upcoming-maintenance", WINDOW, NOW), WINDOW
    )
    ongoing = {**WINDOW, "maintenance_status": "ONGOING", CLOCK_AHEAD: 1.0}
    again = NoticeTrack("upcoming-maintenance").observe(
        _report("upcoming-maintenance", ongoing, NOW + timedelta(seconds=3)), ongoing
    )
    assert first is not None and again is not None and again.id == first.id


def test_another_window_or_another_value_gets_another_id() -> None:
    track = NoticeTrack("upcoming-maintenance")
    first = track.observe(_report("upcoming-maintenance", WINDOW, NOW), WINDOW)
    moved = {**WINDOW, "window_start_time": "2026-12-08T22:00:00Z"}
    other = NoticeTrack("upcoming-maintenance").observe(
        _report("upcoming-maintenance", moved, NOW), moved
    )
    assert first is not None and other is not None and other.id != first.id
    migrate = {"maintenance-event": "MIGRATE_ON_HOST_MAINTENANCE"}
    stop = {"maintenance-event": "TERMINATE_ON_HOST_MAINTENANCE"}
    a = NoticeTrack("maintenance-event").observe(
        _report("maintenance-event", migrate, NOW), migrate, "e"
    )
    b = NoticeTrack("maintenance-event").observe(_report("maintenance-event", stop, NOW), stop, "e")
    assert a is not None and b is not None and a.id != b.id


def test_the_same_answer_after_its_clear_in_one_run_is_a_new_notice() -> None:
    """A server whose ETag is the value's (the same for each MIGRATE) shows a second live
    migration exactly as the first: it still gets a new id, a notice of its own."""
    detail = {"maintenance-event": "MIGRATE_ON_HOST_MAINTENANCE"}
    track = NoticeTrack("maintenance-event")
    first = track.observe(_report("maintenance-event", detail, NOW), detail, "same")
    assert track.observe(None, {"maintenance-event": "NONE"}, "none") is not None
    later = NOW + timedelta(minutes=5)
    again = track.observe(_report("maintenance-event", detail, later), detail, "same")
    assert first is not None and again is not None and again.id != first.id
    assert track.observe(None, {"maintenance-event": "NONE"}, "none") is not None
    third = track.observe(
        _report("maintenance-event", detail, later + timedelta(1)), detail, "same"
    )
    assert third is not None and third.id not in (first.id, again.id)


def test_another_boot_makes_another_id(monkeypatch: pytest.MonkeyPatch) -> None:
    detail = {"preempted": "TRUE"}
    first = NoticeTrack("preempted").observe(_report("preempted", detail, NOW), detail, "x")
    monkeypatch.setattr(
        "forewarn.providers.gcp.watch.boot_id", lambda: "00000000-0000-4000-8000-000000000001"
    )
    again = NoticeTrack("preempted").observe(_report("preempted", detail, NOW), detail, "x")
    assert first is not None and again is not None and again.id != first.id


@settings(max_examples=examples(200))
@given(
    kind=st.sampled_from(list(KINDS)),
    detail=st.dictionaries(st.text(max_size=20), st.text(max_size=20) | st.integers(), max_size=5),
    etag=st.none() | st.text(max_size=40),
    gap=st.floats(min_value=0, max_value=86400),
)
def test_the_id_is_a_function_of_the_provider_s_data(
    kind: str, detail: dict[str, Any], etag: str | None, gap: float
) -> None:
    """Whatever the answer holds, the id is a valid notice id and the same for two agents
    that see it at different times (one restarted without its file)."""
    first = NoticeTrack(kind).observe(_report(kind, detail, NOW), detail, etag)
    again = NoticeTrack(kind).observe(
        _report(kind, detail, NOW + timedelta(seconds=gap)), detail, etag
    )
    assert first is not None and again is not None
    assert again.id == first.id
    assert id_problem(first.id, "gcp") is None
    assert first.id.startswith(f"gcp/{kind}/")


async def test_an_old_state_file_written_by_main_keeps_its_ids(
    server: SimServer, sim: GcpSimulator, tmp_path: Path
) -> None:
    """A `gcp-notices.json` as the agent before this change wrote it (ids from the ETag and
    the first-seen time): restored, each notice keeps that id, first-seen time and deadline,
    and is cleared under it."""
    sim.raise_notice("maintenance", {"type": "TERMINATE"})
    seen = utcnow().replace(microsecond=0) - timedelta(minutes=5)  # as the file holds it
    detail = {"maintenance-event": "TERMINATE_ON_HOST_MAINTENANCE"}
    etag = sim.etag("instance/maintenance-event")
    old_id = stable_id(
        "gcp", "maintenance-event", {"token": etag, "seen": format_time(seen), "detail": detail}
    )
    deadline = seen + timedelta(hours=1)
    (tmp_path / ACTIVE_FILE).write_text(
        json.dumps(
            {
                "maintenance-event": {
                    "id": old_id,
                    "action": "drain",
                    "reason": "host-maintenance",
                    "provider": "gcp",
                    "deadline": format_time(deadline),
                    "noticed_at": format_time(seen),
                    "detail": detail,
                    "boot_id": boot_id(),
                }
            }
        )
    )
    assert ActiveNotices(tmp_path / ACTIVE_FILE).get("maintenance-event") is not None
    async with watching(server.url, tmp_path, maintenance_notice=3600) as run:
        [again] = await run.count(1)
        assert (again.id, again.deadline, again.noticed_at) == (old_id, deadline, seen)
        sim.withdraw("maintenance-event")
        _, cleared = await run.count(2)
    assert (cleared.action, cleared.id) == ("clear", old_id)


def test_a_preemption_s_id_does_not_take_the_etag() -> None:
    """A preemption comes once in a boot and is never withdrawn: the boot says which it is.
    A server that gives the same value a new ETag at every answer (one the watcher paces,
    tests/providers/gcp/test_gcp_faults.py) made a restarted agent's first answer another
    preemption under another id."""
    detail = {"preempted": "TRUE"}
    first = NoticeTrack("preempted").observe(_report("preempted", detail, NOW), detail, "etag-1")
    again = NoticeTrack("preempted").observe(_report("preempted", detail, NOW), detail, "etag-2")
    assert first is not None and again is not None and again.id == first.id


@pytest.mark.parametrize(
    ("kind", "etag", "kept"),
    [
        ("maintenance-event", "etag-1", True),  # the same answer: still in force
        ("maintenance-event", "etag-2", False),  # ended and came back while the agent was down
        ("preempted", "etag-2", True),  # comes once in a boot, whatever the ETag
    ],
)
def test_a_saved_notice_shown_under_another_etag_is_another_event(
    tmp_path: Path, kind: str, etag: str, kept: bool
) -> None:
    """Before, a TERMINATE_ON_HOST_MAINTENANCE that ended and came again while the agent was
    down came back as the saved one, with its first-seen time and deadline (past, by then)."""
    path = tmp_path / ACTIVE_FILE
    detail = {"preempted": "TRUE"} if kind == "preempted" else KINDS["maintenance-event"][0]
    notices = ActiveNotices(path)
    first = NoticeTrack(kind, notices).observe(_report(kind, detail, NOW), detail, "etag-1")
    notices.save()
    later = NOW + timedelta(hours=2)
    again = NoticeTrack(kind, ActiveNotices(path)).observe(
        _report(kind, detail, later), detail, etag
    )
    assert first is not None and again is not None
    assert again.id == first.id  # the same notice, as when a value changes while down
    assert again.noticed_at == (NOW if kept else later)
    assert again.deadline == (first.deadline if kept else later + timedelta(seconds=30))
    assert json.loads(path.read_text())[kind]["etag"] == "etag-1"


def test_a_retired_notice_shown_again_under_another_etag_keeps_its_deadline(
    tmp_path: Path,
) -> None:
    """The ETag is asked only at the first answer after a start: a notice the agent retired
    past its deadline and raised again was watched throughout (a server giving the same value
    a new ETag at every answer), and took a fresh deadline at each retirement."""
    detail = KINDS["maintenance-event"][0]
    track = NoticeTrack("maintenance-event", ActiveNotices(tmp_path / ACTIVE_FILE))
    first = track.observe(_report("maintenance-event", detail, NOW), detail, "etag-1")
    assert first is not None and track.forget(first.id)
    later = NOW + timedelta(hours=2)
    again = track.observe(_report("maintenance-event", detail, later), detail, "etag-2")
    assert again is not None and (again.id, again.deadline) == (first.id, first.deadline)


def test_a_replaced_stop_that_keeps_the_saved_deadline_is_the_saved_notice(
    tmp_path: Path,
) -> None:
    """Shown under another ETag after a restart while the saved stop is still ahead, the
    deadline stays the saved one (`keep_stop`): with a new first-seen time only, the notice
    went out again to every job, at each restart against a server giving the same value a
    new ETag at every answer."""
    detail = KINDS["maintenance-event"][0]
    notices = ActiveNotices(tmp_path / ACTIVE_FILE)
    first = NoticeTrack("maintenance-event", notices).observe(
        _report("maintenance-event", detail, NOW), detail, "etag-1"
    )
    notices.save()
    assert first is not None
    later = _report("maintenance-event", detail, NOW + timedelta(seconds=5))
    kept = later.model_copy(update={"deadline": first.deadline})  # as keep_stop gives it
    track = NoticeTrack("maintenance-event", ActiveNotices(tmp_path / ACTIVE_FILE))
    again = track.observe(kept, detail, "etag-2")
    assert again == first
