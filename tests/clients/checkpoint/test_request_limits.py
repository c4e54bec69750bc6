"""The limits an exit's save of several ranks puts on each storage request (`request_limits`),
and the S3 clients a bounded save (`Backend.within`) makes from them."""

from __future__ import annotations

import time

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options
from forewarn.clients.checkpoint.requestlimits import (
    DEFAULT_ATTEMPTS,
    DEFAULT_READ,
    MIN_SECONDS,
    PREFERRED_READ,
    RequestLimits,
    request_limits,
)
from forewarn.clients.checkpoint.testing import DelegatingBackend
from hypothesis import given
from hypothesis import strategies as st


@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False))
def test_a_request_never_answered_fails_within_the_time_given(seconds: float) -> None:
    limits = request_limits(seconds)
    assert limits.worst_seconds <= max(seconds, MIN_SECONDS) + 1e-9
    assert 1 <= limits.attempts <= DEFAULT_ATTEMPTS
    assert 0 < limits.connect_timeout <= limits.read_timeout <= DEFAULT_READ
    # More attempts only where each still gets the time a live service may take to answer.
    assert limits.attempts == 1 or limits.read_timeout >= PREFERRED_READ


@given(st.floats(min_value=0, max_value=1e4), st.floats(min_value=0, max_value=1e4))
def test_more_time_never_gives_a_request_less(shorter: float, longer: float) -> None:
    shorter, longer = sorted((shorter, longer))
    assert request_limits(shorter).worst_seconds <= request_limits(longer).worst_seconds + 1e-9


def test_botocores_defaults_where_they_fit_and_two_short_attempts_for_a_reclaim() -> None:
    assert (request_limits(3600).read_timeout, request_limits(3600).attempts) == (60.0, 6)
    reclaim = request_limits(0.8 * 20)  # a 30 s notice, 25 s left at the save, less 5
    assert (reclaim.attempts, reclaim.read_timeout) == (2, 7.5)


def test_a_bounded_save_s3_client_fits_the_time_left_and_the_store_keeps_its_own(
    bucket: str,
) -> None:
    store = CheckpointStore(f"s3://{bucket}/run")
    began = time.monotonic()
    bounded = store.backend.within(20.0)
    config = bounded.client.meta.config  # type: ignore[attr-defined]
    assert config.read_timeout <= 0.8 * 20 / 2 and config.retries["total_max_attempts"] == 2
    completer = bounded.completer.meta.config  # type: ignore[attr-defined]
    # The completer is made for the time left then, less what making the first client took
    # (boto3, CPU-bound): measured, as over a second went there on a loaded machine.
    spent = time.monotonic() - began
    assert completer.retries["total_max_attempts"] == 1  # a commit in progress is not retried
    assert 0.8 * (20 - spent) <= completer.read_timeout <= 0.8 * 20, spent
    own = store.backend.client.meta.config  # type: ignore[attr-defined]
    assert (own.read_timeout, own.retries["total_max_attempts"]) == (60.0, 6)


@given(
    st.floats(min_value=-10, max_value=1e4),
    st.floats(min_value=0.01, max_value=100),
    st.floats(min_value=0.01, max_value=300),
    st.integers(min_value=1, max_value=10),
)
def test_a_bounded_request_never_gets_more_than_the_stores_own_limits(
    seconds: float, connect: float, read: float, attempts: int
) -> None:
    base = RequestLimits(connect, read, attempts)
    limits = request_limits(seconds, base)
    assert limits.read_timeout <= read and limits.attempts <= attempts
    assert limits.connect_timeout <= connect
    assert limits.worst_seconds <= max(seconds, MIN_SECONDS, base.worst_seconds) + 1e-9
    if base.worst_seconds <= max(seconds, MIN_SECONDS):
        assert limits == base


def test_a_bounded_save_keeps_the_stores_shorter_s3_options(bucket: str) -> None:
    """A store given `read_timeout=`/`attempts=` keeps them in an exit's bounded save (its
    time long enough for botocore's defaults): before, the save went back to 60 s, 6 tries."""
    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(read_timeout=7.0, attempts=2, connect_timeout=1.0)
    )
    config = store.backend.within(3600.0).client.meta.config  # type: ignore[attr-defined]
    assert (config.read_timeout, config.retries["total_max_attempts"]) == (7.0, 2)
    assert config.connect_timeout == 1.0
    own = store.backend.client.meta.config  # type: ignore[attr-defined]
    assert (own.read_timeout, own.retries["total_max_attempts"]) == (7.0, 2)
    completer = store.backend.completer.meta.config  # type: ignore[attr-defined]
    assert completer.read_timeout == 900.0  # a commit may take minutes to answer
    store.close()


def test_a_bounded_save_past_its_time_still_gives_a_live_service_seconds(
    bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bounded = CheckpointStore(f"s3://{bucket}/run").backend.within(20.0)
    first = bounded.client  # type: ignore[attr-defined]
    later = time.monotonic() + 60  # the deadline passed: the machine stayed up past it
    monkeypatch.setattr(time, "monotonic", lambda: later)
    config = bounded.client.meta.config  # type: ignore[attr-defined]
    assert bounded.client is not first  # made again for the time left
    assert config.read_timeout == MIN_SECONDS and config.retries["total_max_attempts"] == 1
    assert bounded.client is bounded.client  # and then kept


def test_a_wrapped_backend_keeps_its_faults_over_bounded_requests(bucket: str) -> None:
    class Wrapped(DelegatingBackend):
        pass

    wrapped = Wrapped(CheckpointStore(f"s3://{bucket}/run").backend)
    bounded = wrapped.within(20.0)
    assert isinstance(bounded, Wrapped) and bounded.inner is not wrapped.inner
    assert bounded.inner.client.meta.config.read_timeout < 60  # type: ignore[attr-defined]
