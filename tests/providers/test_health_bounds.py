"""What a watcher's health holds of an endpoint's words stays small, whatever it sends: one
bound in `PollHealth` for the error message, the standing conditions and the reason a
detection said no, which `forewarn status`, `/healthz` and the log show. Each source was
bounded by hand, and one that was not (Azure's skipped events, joined) grew with its
document."""

from __future__ import annotations

import logging

import pytest
from forewarn.providers.health import ERROR_CHARS, LOGGED_CHARS, SHOWN_CHARS, PollHealth
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from support import examples

# Any text, long ones and line breaks and escapes among it.
_TEXT = st.one_of(
    st.text(max_size=50),
    st.text(max_size=5000),
    st.text(alphabet=st.sampled_from("a\n\r\x1b\u202e\x00 "), min_size=400, max_size=5000),
)


def _small(shown: str | None, limit: int) -> None:
    assert shown is not None
    assert len(shown) <= limit, len(shown)
    assert shown.isprintable(), repr(shown[:80])


@hypothesis_settings(max_examples=examples(150))
@given(_TEXT, st.one_of(st.none(), _TEXT))
def test_an_error_shown_by_status_is_one_short_line(message: str, shown: str | None) -> None:
    health = PollHealth("azure")
    health.error("bad-answer", message, shown=shown)
    _small(health.last_message, ERROR_CHARS)


@hypothesis_settings(max_examples=examples(150))
@given(_TEXT)
def test_a_condition_is_one_short_line(message: str) -> None:
    health = PollHealth("azure")
    health.condition("bad-event", message)
    _small(health.conditions["bad-event"], SHOWN_CHARS)
    health.condition("bad-event", None)
    assert health.conditions == {}


@hypothesis_settings(max_examples=examples(100))
@given(_TEXT)
def test_why_a_detection_said_no_is_one_short_line(message: str) -> None:
    health = PollHealth("aws")
    health.not_detected = message
    _small(health.not_detected, SHOWN_CHARS)


def test_no_detection_reason_is_none() -> None:
    assert PollHealth("aws").not_detected is None


@pytest.mark.parametrize("size", [10, 100_000])
def test_an_error_logged_is_one_bounded_line(caplog: pytest.LogCaptureFixture, size: int) -> None:
    health = PollHealth("gcp")
    with caplog.at_level(logging.WARNING, logger="forewarn.providers"):
        health.error("bad-answer", "x\n" * size)
    (record,) = caplog.records
    logged = record.getMessage()
    assert "\n" not in logged
    assert len(logged) <= LOGGED_CHARS + 200, len(logged)
