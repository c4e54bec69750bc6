"""Later mails that withdraw this droplet from a reclaim ("is not affected", "has been
removed from the reclaim", "is no longer scheduled for reclaim"): read before as further
notices, the job drained for a reclaim that was not coming."""

from __future__ import annotations

import html

import pytest
from do_support import utc
from do_support import verdict as _verdict
from hypothesis import given
from hypothesis import strategies as st

_SPACE = st.sampled_from([" ", "  ", "\n", " \n "])


@pytest.mark.parametrize(
    "body",
    [
        "Droplet gpu-spot-1 is not affected by the reclaim.",
        "Your Droplet gpu-spot-1 (ID 424242424) is not affected.",
        "Droplet gpu-spot-1 has been removed from the reclaim.",
        "Droplet gpu-spot-1 was removed from the reclaim schedule.",
        "Droplet gpu-spot-1 is no longer scheduled for reclaim.",
    ],
)
def test_this_droplet_withdrawn_from_the_reclaim_clears_it(body: str) -> None:
    result = _verdict(body)
    assert result.report is None and result.replaces, result.why
    assert result.cancel_id is not None


@pytest.mark.parametrize(
    "body",
    [
        # Another droplet withdrawn, ours still reclaimed.
        "Droplet gpu-spot-7 is not affected by the reclaim. "
        "Droplet gpu-spot-1 will be reclaimed at 14:10 UTC.",
        "Droplet gpu-spot-7 has been removed from the reclaim.\n"
        "Droplet gpu-spot-1 will be reclaimed at 14:10 UTC.",
        # Something else is not affected, or the droplet by something else.
        "Droplet gpu-spot-1 will be reclaimed at 14:10 UTC. Your volumes are not affected.",
        "Droplet gpu-spot-1 will be reclaimed at 14:10 UTC. It is not affected by the "
        "billing change.",
        "Droplet gpu-spot-1 will be reclaimed at 14:10 UTC; the reclaim is not affected by "
        "today's maintenance.",
        "Droplet gpu-spot-1 will be reclaimed at 14:10 UTC. It has been removed from the "
        "load balancer.",
        "Droplet gpu-spot-1 will be reclaimed at 14:10 UTC. It is no longer scheduled for backups.",
        "Droplet gpu-spot-1 will be reclaimed at 14:10 UTC. Droplet gpu-spot-1 is not "
        "affected, however, by the price change.",
        # Others, in general.
        "Droplet gpu-spot-1 will be reclaimed at 14:10 UTC. Droplets with reserved capacity "
        "are not affected.",
        "Droplet gpu-spot-1 will be reclaimed at 14:10 UTC. Other Droplets in your account "
        "are not affected by the reclaim.",
        # No longer at another time: moved, not withdrawn, and the earlier time stands.
        "Droplet gpu-spot-1 will be reclaimed at 14:10 UTC. Droplet gpu-spot-1 is no longer "
        "scheduled for 16:00 UTC.",
        # In general, or under a condition.
        "Droplet gpu-spot-1 will be reclaimed at 14:10 UTC. If a droplet is removed from "
        "the reclaim, you will be told.",
    ],
)
def test_a_withdrawal_of_another_or_of_something_else_keeps_the_reclaim(body: str) -> None:
    result = _verdict(body)
    assert result.report is not None, result.why
    assert result.report.deadline == utc(14, 10), result.why


@given(
    ours=st.booleans(),
    form=st.sampled_from(
        [
            "is not affected by the reclaim",
            "is not affected",
            "has been removed from the reclaim",
            "was removed from the reclaim list",
            "is no longer scheduled for reclaim",
        ]
    ),
    first=st.booleans(),
    space=_SPACE,
    as_html=st.booleans(),
)
def test_a_withdrawal_clears_only_the_droplet_it_names(
    ours: bool, form: str, first: bool, space: str, as_html: bool
) -> None:
    named = "gpu-spot-1" if ours else "gpu-spot-7"
    withdrawal = f"Droplet {named}{space}{form}."
    notice = "Droplet gpu-spot-1 will be reclaimed at 14:10 UTC."
    if ours:
        # Alone, or after the notice it withdraws.
        body = withdrawal if first else f"{notice}\n\n{withdrawal}"
    else:
        body = f"{withdrawal}\n\n{notice}" if first else f"{notice}\n\n{withdrawal}"
    if as_html:
        body = "<html><body>" + "".join(
            f"<p>{html.escape(part)}</p>" for part in body.split("\n\n")
        )
        body += "</body></html>"
    result = _verdict(body, "html" if as_html else "plain")
    if ours:
        assert result.report is None and result.replaces, result.why
    else:
        assert result.report is not None and result.report.deadline == utc(14, 10), result.why
