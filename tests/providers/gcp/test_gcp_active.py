"""The boot clock's reading of a stop, saved with the notice in `gcp-notices.json`; the
notices published and not yet saved there, in `gcp-notices.pending.json`."""

from __future__ import annotations

import json
import math
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from forewarn.protocol.timefmt import utcnow
from forewarn.providers.boot import boot_id
from forewarn.providers.gcp.active import (
    ACTIVE_FILE,
    BOOT_DEADLINE_KEY,
    NONE_BY_503_KEY,
    PENDING_FILE,
    ActiveNotices,
)
from forewarn.providers.report import Report
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.skipif(boot_id() is None, reason="the kernel gives no boot id here")


def _saved(path: Path, reading: object, boot: str | None) -> None:
    now = utcnow()
    notice = Report(
        id="gcp/preempted/1",
        action="terminate",
        reason="preemption",
        provider="gcp",
        deadline=now + timedelta(seconds=30),
        noticed_at=now,
        detail={"preempted": "TRUE"},
    )
    item = {**json.loads(notice.model_dump_json()), "boot_id": boot, BOOT_DEADLINE_KEY: reading}
    path.write_text(json.dumps({"preempted": item}))


def test_a_reading_is_kept_across_a_save_and_a_load(tmp_path: Path) -> None:
    path = tmp_path / ACTIVE_FILE
    _saved(path, 1.0, boot_id())
    notices = ActiveNotices(path)
    assert notices.boot_deadlines == {"preempted": 1.0}
    notices.keep_boot_deadline("preempted", 1234.5)
    notices.save()
    assert ActiveNotices(path).boot_deadlines == {"preempted": 1234.5}
    notices.keep("preempted", None)
    notices.save()
    assert ActiveNotices(path).boot_deadlines == {}


def test_another_boots_reading_says_nothing(tmp_path: Path) -> None:
    # Another boot's clock started elsewhere; its reading would move the deadline anywhere.
    path = tmp_path / ACTIVE_FILE
    _saved(path, 1234.5, None)
    assert ActiveNotices(path).boot_deadlines == {}


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)


@given(_JSON | st.integers(min_value=-(10**500), max_value=10**500))
def test_any_saved_reading_loads_as_a_finite_number_or_nothing(reading: object) -> None:
    # Hand-edited or written by another version: the notice is restored either way.
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / ACTIVE_FILE
        _saved(path, reading, boot_id())
        notices = ActiveNotices(path)
    assert "preempted" in notices.notices
    kept = notices.boot_deadlines.get("preempted")
    assert kept is None or (isinstance(kept, float) and math.isfinite(kept))


@pytest.mark.parametrize("reading", [10**400, -(10**400)])
def test_a_reading_past_a_float_loads_as_nothing(tmp_path: Path, reading: int) -> None:
    # math.isfinite raised OverflowError for it: the watcher was not built, at every start
    # (found: adversarial pass H235).
    path = tmp_path / ACTIVE_FILE
    _saved(path, reading, boot_id())
    notices = ActiveNotices(path)
    assert "preempted" in notices.notices
    assert notices.boot_deadlines == {}


def _stop(seconds: float, notice_id: str = "gcp/maintenance-event/1") -> Report:
    now = utcnow()
    now = now.replace(microsecond=now.microsecond // 1000 * 1000)  # as the file keeps it
    return Report(
        id=notice_id,
        action="drain",
        reason="host-maintenance",
        provider="gcp",
        deadline=now + timedelta(seconds=seconds),
        noticed_at=now,
        detail={"maintenance-event": "TERMINATE_ON_HOST_MAINTENANCE"},
    )


def _notices(directory: Path) -> ActiveNotices:
    return ActiveNotices(directory / "state" / ACTIVE_FILE, None, directory / PENDING_FILE)


def test_a_notice_published_and_not_saved_is_restored_from_the_pending_file(
    tmp_path: Path,
) -> None:
    # The publish comes between the two writes: an agent killed there had saved nothing,
    # and its successor counted the stop's deadline again from its own first answer.
    notices = _notices(tmp_path)
    stop = _stop(3600)
    notices.keep("maintenance-event", stop)
    notices.keep_boot_deadline("maintenance-event", 99.5)
    notices.save_pending()  # before the publish; the kill comes before `save`
    assert not (tmp_path / "state" / ACTIVE_FILE).exists()
    again = _notices(tmp_path)
    assert again.get("maintenance-event") == stop
    assert again.boot_deadlines == {"maintenance-event": 99.5}
    notices.save()  # written: the pending file says nothing newer, and goes
    assert not (tmp_path / PENDING_FILE).exists()
    assert _notices(tmp_path).get("maintenance-event") == stop


def test_a_pending_file_not_written_leaves_none_behind(tmp_path: Path) -> None:
    # A stale one would win over the state file at the next start.
    notices = _notices(tmp_path)
    first = _stop(3600)
    notices.keep("maintenance-event", first)
    notices.save_pending()
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / ACTIVE_FILE).mkdir()  # the state file cannot be written
    notices.save()
    assert (tmp_path / PENDING_FILE).exists()  # newer than the state file: it stays
    (tmp_path / "state" / ACTIVE_FILE).rmdir()
    notices.keep("maintenance-event", None)
    (tmp_path / PENDING_FILE).unlink()
    (tmp_path / PENDING_FILE).mkdir()  # the pending file cannot be written either
    notices.save_pending()
    (tmp_path / PENDING_FILE).rmdir()
    notices.save()
    assert _notices(tmp_path).get("maintenance-event") is None


@given(_JSON)
def test_any_saved_nothing_scheduled_form_loads_as_a_bool_or_nothing(form: object) -> None:
    # Hand-edited or written by another version: the window is restored either way, and a
    # value that is no bool says nothing of how the VM answers "nothing scheduled".
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / ACTIVE_FILE
        _saved(path, None, boot_id())
        payload = json.loads(path.read_text())
        payload["preempted"][NONE_BY_503_KEY] = form
        path.write_text(json.dumps(payload))
        notices = ActiveNotices(path)
        assert "preempted" in notices.notices
        kept = notices.none_by_503.get("preempted")
        assert kept is None or kept is form
        notices.keep_none_form("preempted", True)
        notices.save()
        assert ActiveNotices(path).none_by_503 == {"preempted": True}
        notices.keep("preempted", None)
        notices.save()
        assert ActiveNotices(path).none_by_503 == {}


@given(_JSON)
def test_any_pending_file_loads_or_is_ignored(payload: object) -> None:
    # Left by another version, or hand-edited: the start goes on, with the state file's
    # notices when the pending file gives none that reads.
    with tempfile.TemporaryDirectory() as directory:
        base = Path(directory)
        (base / PENDING_FILE).write_text(json.dumps(payload))
        notices = _notices(base)
    assert all(isinstance(item, Report) for item in notices.notices.values())


# What happens at one answer of the watcher: a notice changed or cleared, then its publish
# (the pending file written first) followed by the state file's write, a failed write, or a
# kill of the agent; or a kill before the publish.
_STEP = st.sampled_from(["change", "clear", "saved", "not-saved", "killed", "kill"])


@given(st.lists(_STEP, max_size=12))
def test_a_restart_anywhere_restores_what_was_published(steps: list[str]) -> None:
    # Whatever happened before a kill, the restarted agent holds the notice as last published.
    with tempfile.TemporaryDirectory() as directory:
        base = Path(directory)
        (base / "state").mkdir()
        notices = _notices(base)
        published = None
        for index, step in enumerate(steps):
            if step == "change":
                notices.keep("maintenance-event", _stop(3600 + index))
                continue
            if step == "clear":
                notices.keep("maintenance-event", None)
                continue
            if step != "kill":
                notices.save_pending()
                published = notices.get("maintenance-event")  # the publish
            if step == "saved":
                notices.save()
            elif step == "not-saved":  # the write fails; the file keeps what it had
                kept = base / "kept.json"
                state = base / "state" / ACTIVE_FILE
                if state.exists():
                    state.rename(kept)
                state.mkdir()
                notices.save()
                state.rmdir()
                if kept.exists():
                    kept.rename(state)
            else:  # a kill; what was kept and never published is no more
                notices = _notices(base)
                assert notices.get("maintenance-event") == published
        assert _notices(base).get("maintenance-event") == published
