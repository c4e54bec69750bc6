"""Settings of the `[aws]` section (environment `FOREWARN_AWS_<KEY>`)."""

from __future__ import annotations

from pydantic import Field

from ..settings import EndpointSettings, WholeSeconds
from .tokenttl import MAX_TOKEN_TTL, MIN_TOKEN_TTL

DEFAULT_URL = "http://169.254.169.254"


class Settings(EndpointSettings):
    """The EC2 instance metadata service (IMDS). `url` defaults to http://169.254.169.254.

    An interval of 0 turns that path off.
    """

    # The metadata service speaks plain http only.
    url_schemes = ("http",)
    url_bare_host = True

    spot_interval: float = Field(
        default=0.5,
        ge=0,
        le=3600,
        description="Seconds between polls of spot/instance-action (the 2-minute interruption "
        "notice); 0 turns it off.",
    )
    rebalance_interval: float = Field(
        default=0.5,
        ge=0,
        le=3600,
        description="Seconds between polls of events/recommendations/rebalance; 0 turns it off.",
    )
    scheduled_interval: float = Field(
        default=5.0,
        ge=0,
        le=3600,
        description="Seconds between polls of events/maintenance/scheduled; 0 turns it off.",
    )
    asg_interval: float = Field(
        default=5.0,
        ge=0,
        le=3600,
        description="Seconds between polls of autoscaling/target-lifecycle-state; 0 turns it off.",
    )
    heightened_interval: float = Field(
        default=0.1,
        ge=0,
        le=3600,
        description="Seconds between polls of spot/instance-action while a rebalance "
        "recommendation or a scheduled-maintenance drain of this watcher is active (AWS sends "
        "the rebalance recommendation minutes before most interruptions), and of any path "
        "whose new notice only one answer has shown, for up to 3 s (a stray answer's is "
        "withdrawn within a second), or whose notice the last answer lacked (a cancel is "
        "cleared within a second); 0 keeps each path's own interval throughout.",
    )
    timeout: float = Field(
        default=2.0,
        gt=0,
        le=60,
        description="Seconds to wait for one IMDS answer, the token PUT included.",
    )
    token_ttl: WholeSeconds = Field(
        default=21600,
        ge=MIN_TOKEN_TTL,
        le=MAX_TOKEN_TTL,
        description="Lifetime in seconds asked for each IMDSv2 token (IMDS allows 1-21600); "
        "the token is renewed before it expires.",
    )
    imdsv1: bool = Field(
        default=False,
        description="Fall back to tokenless IMDSv1 requests when no IMDSv2 token can be had. "
        "Off by default: most instances require IMDSv2.",
    )
    time_jitter: float = Field(
        default=5.0,
        ge=0,
        le=600,
        description="A notice time that has moved by less than this many seconds since it was "
        "last sent (or that moves along with the clock) is the same notice and is not re-sent.",
    )


__all__ = ["DEFAULT_URL", "MAX_TOKEN_TTL", "MIN_TOKEN_TTL", "Settings"]
