"""NameCheck: when a configured azure.vm_name is said to be wrong, and when never."""

from __future__ import annotations

from forewarn.providers.azure.events import ScheduledEvent
from forewarn.providers.azure.namecheck import UNMATCHED_POLLS, NameCheck
from hypothesis import given
from hypothesis import strategies as st

NAMES = st.sampled_from(["s_3", "S_3", "s000003", "gpu-0", "other_1", ""])


def event(*resources: str) -> ScheduledEvent:
    return ScheduledEvent("E", "Preempt", "Scheduled", tuple(resources), None, {})


@given(
    configured=NAMES.filter(bool),
    polls=st.lists(st.lists(st.lists(NAMES, max_size=3), max_size=3), max_size=5),
    looked_up=st.frozensets(NAMES.filter(bool).map(str.lower), max_size=2),
)
def test_a_name_that_an_event_used_or_metadata_gives_is_never_called_wrong(
    configured: str, polls: list[list[list[str]]], looked_up: frozenset[str]
) -> None:
    check = NameCheck(configured.lower())
    for listed in polls:
        check.saw([event(*resources) for resources in listed])
    check.looked_up = looked_up
    said = check.mismatch()
    named = {r.lower() for listed in polls for resources in listed for r in resources}
    if configured.lower() in named or configured.lower() in looked_up:
        assert said is None
    if said is not None:
        assert repr(configured.lower()) in said and "azure.vm_name" in said
        assert check.others & looked_up


def test_metadata_is_asked_once_the_events_stayed_someone_elses() -> None:
    check = NameCheck("s000003")
    for _ in range(UNMATCHED_POLLS - 1):
        check.saw([event("s_3")])
        assert not check.lookup_due()
    check.saw([event("s_3")])
    assert check.lookup_due()
    check.asked()
    assert not check.lookup_due()  # not again for the same events
    check.looked_up = frozenset({"s_3"})
    assert check.mismatch() is not None
    check.saw([event("s_3"), event("s000003")])
    assert check.mismatch() is None and check.matched
