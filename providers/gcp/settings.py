"""Settings of the `[gcp]` section (environment `FOREWARN_GCP_<KEY>`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..settings import EndpointSettings, WholeSeconds


class Settings(EndpointSettings):
    # The metadata service speaks plain http only.
    url_schemes = ("http",)
    url_bare_host = True

    timeout_sec: WholeSeconds = Field(
        default=15,
        ge=1,
        le=3600,
        description="`timeout_sec` of each metadata long-poll: the server answers after this "
        "many seconds even when nothing changed.",
    )
    read_timeout_margin: float = Field(
        default=5.0,
        gt=0,
        le=600,
        description="Seconds a long-poll's whole answer may take beyond `timeout_sec`; a "
        "hung or dribbling long-poll is abandoned then. With the defaults (15 + 5 s) a "
        "long-poll stuck when the server heals is freed inside the 30 s preemption window.",
    )
    retry_delay: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="Seconds before retrying after a 503, a transport error or a bad answer.",
    )
    preemption_notice: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="Seconds from `preempted=TRUE` to the deadline on a VM without a "
        "preemption notice duration (Spot shutdown is best effort within 30 s).",
    )
    preemption_notice_duration: float | None = Field(
        default=None,
        ge=0,
        le=3600,
        description="The VM's `scheduling.preemptionNoticeDuration` in seconds (120 on VMs "
        "created with `--preemption-notice-duration=120s`): the deadline after "
        "`preempted=TRUE` when above 0. A duration the metadata server reports in "
        "`instance/scheduling/` wins; with neither, `preemption_notice` applies.",
    )
    maintenance_notice: float | None = Field(
        default=None,
        gt=0,
        le=86400,
        description="Seconds from `TERMINATE_ON_HOST_MAINTENANCE` to the deadline. Unset: "
        "3600 on a VM with GPUs (an accelerator-optimized machine type, or an NVIDIA device "
        "on this host), 60 otherwise, as Compute Engine gives (an hour for GPU VMs, 60 s for "
        "the others).",
    )
    migrate: Literal["drain", "ignore"] = Field(
        default="drain",
        description="What `MIGRATE_ON_HOST_MAINTENANCE` (a live migration, a brief freeze) "
        "becomes, and an upcoming maintenance window on a VM that live-migrates: a drain "
        "without deadline, or nothing.",
    )
    upcoming_interval: float = Field(
        default=60.0,
        ge=0,
        le=86400,
        description="Seconds between reads of `instance/upcoming-maintenance`; 0 turns them off.",
    )
    stop_listen: float = Field(
        default=2.0,
        ge=0,
        le=10,
        description="Seconds the agent keeps watching, and publishing, after SIGTERM before it "
        "stops: a preemption's ACPI soft-off starts the shutdown as `preempted` turns TRUE, "
        "and an agent that stopped at once lost the terminate. 0 stops at once.",
    )


__all__ = ["Settings"]
