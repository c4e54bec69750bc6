"""Later mails that give a reclaim's new time beside the old ("New reclaim time: 17:00 UTC
(was 14:30 UTC)", "will now be reclaimed at 17:00 UTC instead of 14:30 UTC"): read before as
further notices at the old time, the job told to exit hours early."""

from __future__ import annotations

import html

import pytest
from do_support import utc
from do_support import verdict as _verdict
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    "body",
    [
        # Read as a further notice at the old time: the job was told to exit 2.5 h early.
        "Droplet gpu-spot-1 (ID 424242424): New reclaim time: 17:00 UTC (was 14:30 UTC)",
        "New reclaim time for gpu-spot-1: 17:00 UTC (was 15:30 UTC).",
        "Droplet gpu-spot-1 will now be reclaimed at 17:00 UTC instead of 15:30 UTC.",
        "Your Droplet gpu-spot-1 will now be reclaimed at 17:00 instead of 15:30 UTC.",
        "Droplet gpu-spot-1: the new reclaim time is 17:00 UTC, previously 15:30 UTC.",
        # The old time first: read as the deadline, 1.5 h early.
        "Droplet gpu-spot-1: old reclaim time: 15:30 UTC, new reclaim time: 17:00 UTC.",
        # Below a label ("Update:"), read as words of something else: a further notice at
        # the old time.
        "Droplet gpu-spot-1 will be reclaimed at 15:30 UTC.\n\n"
        "Update: New reclaim time for gpu-spot-1: 17:00 UTC (was 15:30 UTC).",
    ],
)
def test_a_new_time_with_the_old_beside_it_replaces_the_old(body: str) -> None:
    result = _verdict(body)
    assert result.report is not None and result.replaces, result.why
    assert result.report.deadline == utc(17, 0), result.why


@pytest.mark.parametrize(
    "body",
    [
        # A first notice says "now" too: no time is replaced.
        "Droplet gpu-spot-1 will now be reclaimed at 14:10 UTC.",
        # A new time for something else.
        "Droplet gpu-spot-1 will be reclaimed at 14:10 UTC. Please pick a new time for your "
        "maintenance window (was 18:00 UTC).",
        "Droplet gpu-spot-1 will be reclaimed at 14:10 UTC. Backups: new time 19:00 UTC.",
    ],
)
def test_now_or_a_new_time_of_something_else_is_no_new_reclaim_time(body: str) -> None:
    result = _verdict(body)
    assert result.report is not None and not result.replaces, result.why
    assert result.report.deadline == utc(14, 10), result.why


_SPACE = st.sampled_from([" ", "  ", "\n", " \n "])
_CLOCK = st.tuples(st.integers(13, 23), st.sampled_from([0, 10, 15, 30, 45]))


def _hhmm(clock: tuple[int, int]) -> str:
    return f"{clock[0]:02d}:{clock[1]:02d}"


@given(
    new=_CLOCK,
    old=_CLOCK,
    form=st.sampled_from(["was", "instead", "previously", "old first"]),
    space=_SPACE,
    gap=st.sampled_from(["", " ", "\t"]),
    label=st.sampled_from(
        [
            "",
            "Update: ",
            "Note:\n",
            "Droplet gpu-spot-1 will be reclaimed at 13:00 UTC.\n\nUpdate: ",
        ]
    ),
    as_html=st.booleans(),
)
def test_any_new_time_beside_its_old_one_is_the_deadline(
    new: tuple[int, int],
    old: tuple[int, int],
    form: str,
    space: str,
    gap: str,
    label: str,
    as_html: bool,
) -> None:
    n, o = _hhmm(new), _hhmm(old)
    body = {
        # A label's value on the line below it is read by no form yet (nor is "Reclaim
        # time:" then "17:00 UTC"): the label and its time share a line.
        "was": f"Droplet gpu-spot-1:{space}New reclaim time:{gap} {n} UTC{space}(was {o} UTC)",
        "instead": f"Droplet gpu-spot-1 will{space}now be reclaimed at {n} UTC{space}"
        f"instead of {o} UTC.",
        "previously": f"New reclaim time for gpu-spot-1: {n} UTC,{space}previously {o} UTC.",
        "old first": f"Droplet gpu-spot-1: old reclaim time: {o} UTC,{space}new reclaim time:"
        f"{gap} {n} UTC.",
    }[form]
    body = label + body
    if as_html:
        body = "<html><body>" + "".join(
            f"<p>{html.escape(part)}</p>" for part in body.split("\n\n")
        )
        body += "</body></html>"
    result = _verdict(body, "html" if as_html else "plain")
    assert result.report is not None and result.replaces, result.why
    assert result.report.deadline == utc(*new), result.why


@pytest.mark.parametrize(
    ("body", "replaces"),
    [
        # Label and time on two lines, as HTML turned to text leaves them: the time's line
        # was another sentence than the reclaim's, and Date + lead (14:30) stood in.
        ("Droplet gpu-spot-1 (ID 424242424)\nNew reclaim time:\n17:00 UTC\n", True),
        ("Droplet gpu-spot-1 (ID 424242424)\r\nNew reclaim time:  \r\n   17:00 UTC\r\n", True),
        ("Droplet gpu-spot-1 will be reclaimed at:\n17:00 UTC\n", False),
        ("Droplet gpu-spot-1 has been rescheduled.\nNew time:\n2026-12-01 17:00 UTC\n", True),
    ],
)
def test_a_label_and_its_time_on_two_lines_are_read_together(body: str, replaces: bool) -> None:
    result = _verdict(body)
    assert result.report is not None, result.why
    assert result.report.deadline == utc(17, 0), result.why
    assert result.replaces == replaces, result.why


@given(
    label=st.sampled_from(["New reclaim time:", "New time:", "Reclaim time:", "Rescheduled to:"]),
    hour=st.integers(15, 23),
    minute=st.integers(0, 59),
    blank=st.sampled_from(["", " ", "\t", "  "]),
    eol=st.sampled_from(["\n", "\r\n"]),
)
def test_any_time_on_the_line_after_its_label_is_the_deadline(
    label: str, hour: int, minute: int, blank: str, eol: str
) -> None:
    time = f"{hour}:{minute:02d} UTC"
    body = f"Droplet gpu-spot-1 (ID 424242424){eol}{label}{blank}{eol}{blank}{time}{eol}"
    result = _verdict(body)
    assert result.report is not None, result.why
    assert result.report.deadline == utc(hour, minute), (body, result.why)


@given(
    label=st.sampled_from(
        ["New reclaim time:", "New time:", "Reclaim time:", "Rescheduled to:", "Start time:"]
    ),
    reclaimed=st.booleans(),
    hour=st.integers(15, 23),
    minute=st.integers(0, 59),
    dated=st.booleans(),
    blank=st.sampled_from(["", " ", "\t", "  "]),
    eol=st.sampled_from(["\n", "\r\n"]),
)
def test_a_time_one_blank_line_below_its_label_is_the_deadline(
    label: str, reclaimed: bool, hour: int, minute: int, dated: bool, blank: str, eol: str
) -> None:
    """found: "New reclaim time:", a blank line, then "17:00 UTC" (as a mail written with a
    paragraph per line, or HTML turned to text with a `<br><br>`, leaves them) was read as
    two sentences, the time's not the reclaim's, and Date + lead (14:30) stood in. One blank
    line reads as none: the same deadline as label and time on two lines, the label's time
    for a reclaim's label ("Start time:" alone, with no reclaim word, is read as no
    reclaim's time either way)."""
    head = "Droplet gpu-spot-1 (ID 424242424)" + (" will be reclaimed." if reclaimed else "")
    time = f"{'2026-12-01 ' if dated else ''}{hour}:{minute:02d} UTC"
    body = f"{head}{eol}{label}{blank}{eol}{blank}{eol}{blank}{time}{eol}"
    result = _verdict(body)
    assert result.report is not None, result.why
    together = _verdict(f"{head}{eol}{label}{blank}{eol}{blank}{time}{eol}")
    assert together.report is not None, together.why
    assert result.report.deadline == together.report.deadline, (body, result.why)
    if label != "Start time:" or dated:
        assert result.report.deadline == utc(hour, minute), (body, result.why)


@pytest.mark.parametrize(
    "body",
    [
        # Two blank lines: the label's time is not there, whatever comes after.
        "Droplet gpu-spot-1 (ID 424242424)\nNew reclaim time:\n\n\n17:00 UTC\n",
        # One blank line, then words: a later time in the mail is not the label's.
        "Droplet gpu-spot-1 (ID 424242424)\nNew reclaim time:\n\nSee the dashboard.\n\n"
        "Our office opens at 17:00 UTC.\n",
        "Droplet gpu-spot-1 (ID 424242424)\nNew reclaim time:\n\nTBD\n17:00 UTC\n",
    ],
)
def test_a_time_further_below_its_label_is_not_the_labels(body: str) -> None:
    result = _verdict(body)
    assert result.report is not None, result.why
    assert result.report.deadline == utc(14, 30), result.why
