"""The Azure Scheduled Events contract: `watch`, `simulate` and `drill`.

Importing this package loads only the settings; the pure parser loads on first use, and the
watcher (httpx), the simulator and the drill (azure-identity, inside `run`) are modules of
their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forewarn.providers.lazy import lazy_exports
from forewarn.providers.spec import ProviderSpec

if TYPE_CHECKING:
    from .events import (
        EVENT_TYPES,
        MAPPING,
        EventsDocument,
        ScheduledEvent,
        parse_compute,
        parse_document,
        parse_not_before,
        reports_for,
        vm_names,
    )
    from .settings import Settings

# The parser loads on first use: an agent that does not run azure never needs it.
__getattr__ = lazy_exports(
    __name__,
    {
        "settings": ("Settings",),
        "events": (
            "EVENT_TYPES",
            "MAPPING",
            "EventsDocument",
            "ScheduledEvent",
            "parse_compute",
            "parse_document",
            "parse_not_before",
            "reports_for",
            "vm_names",
        ),
    },
)


SPEC: ProviderSpec[Settings] = ProviderSpec.of_package(
    __name__,
    name="azure",
    summary="Azure Scheduled Events (IMDS): Preempt, Terminate, Reboot, Redeploy, Freeze",
    reasons=("eviction", "host-maintenance"),
    approves=True,
)


__all__ = [
    "EVENT_TYPES",
    "MAPPING",
    "SPEC",
    "EventsDocument",
    "ScheduledEvent",
    "Settings",
    "parse_compute",
    "parse_document",
    "parse_not_before",
    "reports_for",
    "vm_names",
]
