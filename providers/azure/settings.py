"""Settings of the `[azure]` section (environment `FOREWARN_AZURE_<KEY>`)."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
)
from pydantic_settings import NoDecode

from ..settings import EndpointSettings, split_list
from .kinds import EVENT_TYPES

DEFAULT_URL = "http://169.254.169.254"
# IMDS answers about five requests a second per VM and rejects the rest with 429; four a
# second leaves room for the instance-metadata lookup and the StartRequests POSTs.
MIN_INTERVAL = 0.25
# A Preempt (Spot eviction) is announced only 30 s ahead, best effort. A poll every 30 s or
# more can miss it entirely; at most half of it keeps at least 15 s for the flush.
PREEMPT_NOTICE = 30.0
MAX_INTERVAL = PREEMPT_NOTICE / 2

ApproveMode = Literal["off", "after-ack", "immediately"]
# The events whose clients exit: approving them early loses nothing. A Reboot or Redeploy
# approved early starts within seconds under clients that flushed a drain and kept training.
DEFAULT_APPROVE_TYPES = ("Preempt", "Terminate")


class Settings(EndpointSettings):
    interval: float = Field(
        default=1.0,
        ge=MIN_INTERVAL,
        le=MAX_INTERVAL,
        description="Seconds between polls of Scheduled Events (Microsoft recommends 1; "
        "at least 0.25, so never more than four requests a second; at most 15, half of a "
        "Preempt's 30 s notice).",
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
    # NoDecode: the environment gives a comma-separated list, not JSON.
    approve_types: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_APPROVE_TYPES),
        description="EventTypes that may be approved, in any mode (separated by commas or "
        "space in the environment). An approved Reboot or Redeploy starts at once, under "
        "clients that flushed a drain and kept training; list them only when nothing runs that "
        "a reboot would cost (`after-ack` never approves a drain anyway).",
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

    @field_validator("interval", mode="wrap")
    @classmethod
    def _sees_a_preempt(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> float:
        # The bound is `le=` on the field, so the configuration's tests and docs see it like
        # every other bound; this only says why, in place of pydantic's bare "less than".
        try:
            seconds: float = handler(value)
        except ValidationError as error:
            # The input of a bound's error is the value already read as seconds ("2m": 120).
            over = [item["input"] for item in error.errors() if item["type"] == "less_than_equal"]
            if not over or math.isnan(float(over[0])):
                raise  # NaN is no interval too long: said as "not a number" (describe_error)
            seconds = float(over[0])
            raise ValueError(
                f"at most {MAX_INTERVAL:g} s: a Preempt (Spot eviction) is "
                f"announced only {PREEMPT_NOTICE:g} s ahead, and a poll every {seconds:g} s "
                + (
                    "could miss it entirely"
                    if seconds >= PREEMPT_NOTICE
                    else f"could see it with {PREEMPT_NOTICE - seconds:g} s left for the flush"
                )
            ) from None
        return seconds

    @field_validator("vm_name", mode="before")
    @classmethod
    def _strip_name(cls, value: Any) -> Any:
        # A ConfigMap block (`vm_name: |`) leaves a newline: kept, the name matched no
        # event's Resources and every notice was ignored. Blank is unset (read from IMDS).
        if isinstance(value, str):
            return value.strip() or None
        return value

    @field_validator("approve_types", mode="before")
    @classmethod
    def _split_types(cls, value: Any, info: ValidationInfo) -> Any:
        # Blank is the defaults (`approve = "off"` approves nothing).
        return split_list(value, cls.model_fields.get(info.field_name or ""))

    @field_validator("approve_types")
    @classmethod
    def _known_types(cls, value: list[str]) -> list[str]:
        canonical = {name.lower(): name for name in EVENT_TYPES}
        types: list[str] = []
        for name in value:
            known = canonical.get(name.strip().lower())
            if known is None:
                raise ValueError(
                    f"{name!r} is not an EventType; use any of " + ", ".join(EVENT_TYPES)
                )
            types.append(known)
        return list(dict.fromkeys(types))

    @property
    def base_url(self) -> str:
        return (self.url or DEFAULT_URL).rstrip("/")


__all__ = [
    "DEFAULT_APPROVE_TYPES",
    "DEFAULT_URL",
    "MAX_INTERVAL",
    "MIN_INTERVAL",
    "PREEMPT_NOTICE",
    "ApproveMode",
    "Settings",
]
