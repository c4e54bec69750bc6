"""How long one storage request of a save may take, retries included, when the save must end
within a given time (an exit's save of several ranks, which cannot be left behind on a
thread: the storage's own timeouts are its only bound).

Botocore's defaults (a 60 s read timeout, 6 attempts) let one request the storage stopped
answering run 365 s: two gloo ranks saving through DCP for a terminate failed only then,
long past the notice's deadline. A read timeout is the time a socket waits with nothing
moving, so a short one fails a stalled request and never a slow link whose bytes move.
"""

from __future__ import annotations

from dataclasses import dataclass

# botocore's own (see s3.py): what a request gets when the time allows them.
DEFAULT_CONNECT = 3.0
DEFAULT_READ = 60.0
DEFAULT_ATTEMPTS = 6
# Under this a live service may not have answered a request whose body it took (S3 answers
# a part in well under a second; a busy S3-compatible service in a few): fewer attempts
# each of this long at least are better than more that fail a live one.
PREFERRED_READ = 5.0
# No request gets less: past the deadline (a machine that stays up past it) a live service
# still saves, and one that stopped answering still fails within seconds.
MIN_SECONDS = 5.0
# botocore's standard retry mode waits up to 2^(n-1) s (at most 20) before attempt n + 1.
_MAX_BACKOFF = 20.0


@dataclass(frozen=True)
class RequestLimits:
    """botocore's `connect_timeout`, `read_timeout` and `retries={"total_max_attempts"}`."""

    connect_timeout: float
    read_timeout: float
    attempts: int

    @property
    def worst_seconds(self) -> float:
        """The longest one request the storage never answers can take, retries included."""
        return self.attempts * self.read_timeout + backoff_seconds(self.attempts)


def backoff_seconds(attempts: int) -> float:
    """The longest botocore's standard mode waits in all between `attempts` attempts."""
    return sum(min(2.0 ** (attempt - 1), _MAX_BACKOFF) for attempt in range(1, attempts))


DEFAULTS = RequestLimits(DEFAULT_CONNECT, DEFAULT_READ, DEFAULT_ATTEMPTS)


def request_limits(seconds: float, base: RequestLimits = DEFAULTS) -> RequestLimits:
    """Limits under which one request that is never answered fails within `seconds` (at
    least MIN_SECONDS): `base` (the store's S3 options; botocore's defaults) when they fit,
    else as many attempts (up to 3, and up to base's) as each get PREFERRED_READ, sharing
    the time, each no longer than base's."""
    seconds = max(seconds, MIN_SECONDS)
    if base.worst_seconds <= seconds:
        return base
    attempts = 1
    for tried in (3, 2):
        if tried <= base.attempts and (seconds - backoff_seconds(tried)) / tried >= PREFERRED_READ:
            attempts = tried
            break
    read = min(base.read_timeout, (seconds - backoff_seconds(attempts)) / attempts)
    # A dead endpoint costs the connect timeout per attempt instead: never more than a read.
    return RequestLimits(min(base.connect_timeout, read), read, attempts)
