"""The boot clock's reading of a stop, saved with the notice in `gcp-notices.json`."""

from __future__ import annotations

import json
import math
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from forewarn.protocol.timefmt import utcnow
from forewarn.providers.boot import boot_id
from forewarn.providers.gcp.active import ACTIVE_FILE, BOOT_DEADLINE_KEY, ActiveNotices
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


@given(_JSON)
def test_any_saved_reading_loads_as_a_finite_number_or_nothing(reading: object) -> None:
    # Hand-edited or written by another version: the notice is restored either way.
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / ACTIVE_FILE
        _saved(path, reading, boot_id())
        notices = ActiveNotices(path)
    assert "preempted" in notices.notices
    kept = notices.boot_deadlines.get("preempted")
    assert kept is None or (isinstance(kept, float) and math.isfinite(kept))
