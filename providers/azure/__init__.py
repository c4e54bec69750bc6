"""The Azure Scheduled Events contract: `watch`, `simulate` and `drill`.

Importing this package loads only the settings and the pure parser; the watcher (httpx), the
simulator and the drill (azure-identity, inside `run`) are modules of their own.
"""

from forewarn.providers.spec import ProviderSpec

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

SPEC = ProviderSpec.of_package(
    __name__,
    name="azure",
    summary="Azure Scheduled Events (IMDS): Preempt, Terminate, Reboot, Redeploy, Freeze",
    settings=Settings,
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
