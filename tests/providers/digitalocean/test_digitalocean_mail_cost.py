"""What judging a mail costs: linear in its size, whatever its sentences (a mail is judged
before the next is read, so a slow one delays the reclaim mail behind it)."""

from __future__ import annotations

import time

import pytest
from do_support import verdict
from forewarn.providers.digitalocean import cancel
from hypothesis import given, settings
from hypothesis import strategies as st

# A digest line of cancellations and new times without a sentence's end.
STATEMENT = "the reclaim of droplet gpu-spot-1 has been cancelled, then rescheduled to "


def test_a_line_of_thousands_of_statements_is_judged_in_linear_time() -> None:
    """Each new-time statement's clause was read to the end of its line: a line of 1,600 of
    them without a full stop (120 KB) took 7 s to judge, a mail of 256 KiB (all that is
    fetched) 28 s, during which no later mail, the reclaim among them, was read. The clause
    is read within CLAUSE_REACH characters: 0.6 s here."""
    started = time.process_time()
    found = verdict(STATEMENT * 1600)
    took = time.process_time() - started
    assert found.report is not None and found.report.action == "drain"
    assert took < 2.5, took


_PHRASES = st.sampled_from(
    [
        "The reclaim of Droplet gpu-spot-1 has been rescheduled to 16:00 UTC",
        "the reclaim was postponed last week",
        "Your backups have been moved to 18:00 UTC",
        "The reclaim of gpu-spot-7 (ID 111111111) is cancelled",
        "it has been postponed before",
        "we have rescheduled the reclaim",
        "Droplet gpu-spot-1 will be reclaimed at 14:10 UTC",
        "Rescheduling is not possible",
        "the reclaim has been moved, then rescheduled to 15:00 UTC",
    ]
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_PHRASES, min_size=1, max_size=8), st.sampled_from([". ", ", ", "\n", " "]))
def test_the_reach_changes_no_verdict_on_a_mail_of_ordinary_clauses(
    phrases: list[str], joint: str
) -> None:
    # Clauses of a real mail are far shorter than the reach: reading them whole (a reach
    # past the mail's end) gives the same verdict.
    body = joint.join(phrases) + "."
    reached = verdict(body)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cancel, "CLAUSE_REACH", 10**9)
        whole = verdict(body)
    assert reached == whole
