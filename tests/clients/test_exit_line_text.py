"""The line a job logs when it exits on a notice names the notice as received: any text a
publisher that is not the agent sends stays on that one line."""

from __future__ import annotations

from datetime import datetime, timezone

from forewarn.clients.event import Event
from forewarn.clients.guard_report import exit_line
from hypothesis import given
from hypothesis import strategies as st

NOW = datetime(2026, 12, 6, tzinfo=timezone.utc)


@given(
    notice_id=st.text(max_size=40),
    action=st.text(max_size=12),
    reason=st.text(max_size=40),
    provider=st.text(max_size=20),
)
def test_any_text_in_a_notice_gives_one_printable_exit_line(
    notice_id: str, action: str, reason: str, provider: str
) -> None:
    """A newline in a notice's id or reason split the job's exit line in its log, and an
    escape sequence in one acted on the terminal that followed the log."""
    event = Event(
        id=notice_id,
        seq=1,
        action=action,
        reason=reason,
        provider=provider,
        deadline=None,
        noticed_at=NOW,
        sent_at=NOW,
    )
    line = exit_line(7, {"notice": None}, [event], "/ckpt/7")
    assert line.isprintable(), repr(line)
    assert line.startswith("exiting at step 7 on ") and line.endswith("; checkpoint /ckpt/7")
