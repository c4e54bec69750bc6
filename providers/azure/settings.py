"""Settings of the `[azure]` section (environment `FOREWARN_AZURE_<KEY>`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from ..settings import EndpointSettings

DEFAULT_URL = "http://169.254.169.254"
# IMDS answers about five requests a second per VM and rejects the rest with 429; four a
# second leaves room for the instance-metadata lookup and the StartRequests POSTs.
MIN_INTERVAL = 0.25

ApproveMode = Literal["off", "after-ack", "immediately"]


class Settings(EndpointSettings):
    interval: float = Field(
        default=1.0,
        ge=MIN_INTERVAL,
        le=60,
        description="Seconds between polls of Scheduled Events (Microsoft recommends 1; "
        "at least 0.25, so never more than four requests a second).",
    )
    api_version: str = Field(
        default="2020-07-01",
        pattern=r"^\d{4}-\d{2}-\d{2}$",
        description="api-version of the Scheduled Events endpoint.",
    )
    vm_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="This VM's name as it appears in an event's Resources (a scale-set "
        "instance is `<vmss>_<instanceId>`); default: read from IMDS instance metadata.",
    )
    approve: ApproveMode = Field(
        default="after-ack",
        description="When to POST StartRequests for an event: `after-ack` (once every client "
        "that received the notice has acked its flush; only for notices sent as terminate, "
        "since a drain's clients keep working), `immediately`, or `off`.",
    )
    approve_shared: bool = Field(
        default=False,
        description="Also approve events that name other VMs besides this one. Off by "
        "default: an approval releases the event for every VM in Resources, including "
        "neighbours whose own clients may not have flushed yet.",
    )
    freeze: bool = Field(
        default=False,
        description="Publish Freeze events (pauses of a few seconds) as drains.",
    )
    first_call_timeout: float = Field(
        default=130.0,
        gt=0,
        le=600,
        description="Read timeout, in seconds, until Scheduled Events has answered once: "
        "the first request turns the feature on and may take up to two minutes.",
    )
    request_timeout: float = Field(
        default=5.0, gt=0, le=120, description="Read timeout, in seconds, of later requests."
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"azure.url must start with http:// or https://, got {value!r}")
        return value

    @property
    def base_url(self) -> str:
        return (self.url or DEFAULT_URL).rstrip("/")


__all__ = ["DEFAULT_URL", "MIN_INTERVAL", "ApproveMode", "Settings"]
