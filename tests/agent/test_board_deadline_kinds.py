"""What a provider notice's deadline held on the boot clock is (a duration, or one its watcher
keeps on the boot clock), saved per notice in the state file beside `deadline_clock`, and
told by the provider for files written before it was."""

from __future__ import annotations

import json
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from forewarn.agent.board import (
    DEADLINE_BOOT_CLOCK,
    DEADLINE_DURATION,
    DEADLINE_KINDS,
    NoticeBoard,
    Sequencer,
)
from forewarn.agent.protocol import Report
from forewarn.agent.state import AgentState, encode_state, load_state
from hypothesis import given
from hypothesis import strategies as st

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=timezone.utc)

# A state file as the release before `deadline_kind` wrote it (same boot): a flag file's `5m`
# and a Kubernetes deadline moved by a skew, both held on the boot clock.
PREVIOUS_RELEASE = """{"version": 1, "seq": 1796516634216, "manual": [], "acked": [],
"provider": [{"v": 1, "id": "local/flag/1", "seq": 1796516634215, "action": "drain",
"reason": "manual", "provider": "local", "deadline": "2026-11-30T03:05:00Z",
"noticed_at": "2026-11-30T03:00:00Z", "sent_at": "2026-11-30T03:00:00Z", "detail": {}},
{"v": 1, "id": "kubernetes/n/deleting", "seq": 1796516634216, "action": "drain",
"reason": "node-drain", "provider": "kubernetes", "deadline": "2026-11-30T03:30:00Z",
"noticed_at": "2026-11-30T03:00:00Z", "sent_at": "2026-11-30T03:00:00Z",
"detail": {"clock_ahead_seconds": -7200.0}}], "flushes": [], "escalated": [], "boot_id": "b1",
"booted": null, "windows": {}, "raised": {}, "acked_by": {}, "expected_by": {}, "held_by": {},
"held_pids": {}, "raised_clock": {"local/flag/1": 1000.0, "kubernetes/n/deleting": 1000.0},
"deadline_clock": {"local/flag/1": 1300.0, "kubernetes/n/deleting": 2800.0},
"reported_clock": {}}"""


def _board(steady: list[float]) -> NoticeBoard:
    return NoticeBoard(Sequencer(0), 30.0, now=lambda: T0, clock=lambda: steady[0])


def _restored(state: AgentState, steady: list[float]) -> NoticeBoard:
    board = _board(steady)
    board.restore(
        state.manual,
        provider=state.provider,
        raised_clock=state.raised_clock,
        deadline_clock=state.deadline_clock,
        reported_clock=state.reported_clock,
        deadline_kind=state.deadline_kind,
    )
    return board


def _flags(board: NoticeBoard, provider: str) -> list[tuple[bool, bool]]:
    return [
        (r.deadline_is_duration, r.deadline_on_boot_clock) for r in board.provider_reports(provider)
    ]


def test_a_file_of_the_previous_release_is_read_and_its_kinds_told_by_provider(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.json"
    path.write_text(PREVIOUS_RELEASE)
    state = load_state(path)
    assert state.deadline_kind == {}
    assert set(state.deadline_clock) == {"local/flag/1", "kubernetes/n/deleting"}
    board = _restored(state, [1000.0])
    assert _flags(board, "local") == [(True, False)]
    assert _flags(board, "kubernetes") == [(False, True)]
    # Saved again with the kinds: the next restart reads them, not the provider.
    assert board.deadline_kinds() == {
        "local/flag/1": DEADLINE_DURATION,
        "kubernetes/n/deleting": DEADLINE_BOOT_CLOCK,
    }


def test_each_notices_kind_is_saved_and_restored_over_what_its_provider_tells(
    tmp_path: Path,
) -> None:
    """The kind is the notice's own: a local notice its watcher keeps on the boot clock comes
    back so, where the provider alone made it a duration (reported again from a file that is
    no longer there)."""
    steady = [1000.0]
    first = _board(steady)
    first.report(
        Report(
            id="local/other/1",
            action="drain",
            reason="manual",
            provider="local",
            deadline=T0 + timedelta(minutes=5),
            noticed_at=T0,
            deadline_on_boot_clock=True,
        )
    )
    first.report(
        Report(
            id="gcp/maintenance-event/1",
            action="drain",
            reason="host-maintenance",
            provider="gcp",
            deadline=T0 + timedelta(hours=1),
            noticed_at=T0,
            deadline_on_boot_clock=True,
        )
    )
    kinds = first.deadline_kinds()
    assert kinds == {
        "local/other/1": DEADLINE_BOOT_CLOCK,
        "gcp/maintenance-event/1": DEADLINE_BOOT_CLOCK,
    }
    path = tmp_path / "state.json"
    saved = AgentState(
        provider=first.provider_notices(),
        deadline_clock=first.deadline_clocks(),
        deadline_kind=kinds,
    )
    path.write_bytes(encode_state(saved))
    state = load_state(path)
    assert state.deadline_kind == kinds
    board = _restored(state, steady)
    assert _flags(board, "local") == [(False, True)]
    assert _flags(board, "gcp") == [(False, True)]


_VALUES: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(DEADLINE_KINDS),
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.lists(st.text(max_size=3), max_size=2),
)


@given(
    st.one_of(
        st.dictionaries(st.text(max_size=20), _VALUES, max_size=6),
        st.lists(st.text(max_size=5), max_size=3),
        st.text(max_size=10),
        st.none(),
        st.integers(),
    )
)
def test_any_saved_kinds_read_without_raising_and_keep_only_known_ones(raw: object) -> None:
    payload = json.loads(encode_state(AgentState()))
    payload["deadline_kind"] = raw
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "state.json"
        path.write_text(json.dumps(payload))
        kinds = load_state(path).deadline_kind
    expected = (
        {key: value for key, value in raw.items() if value in DEADLINE_KINDS}
        if isinstance(raw, dict)
        else {}
    )
    assert kinds == expected
