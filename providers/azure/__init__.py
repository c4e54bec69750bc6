"""The Azure Scheduled Events contract: `watch`, `simulate` and `drill`.

Importing this package loads only the settings and the pure parser; the watcher (httpx), the
simulator and the drill (azure-identity, inside `run`) are modules of their own.
"""

from forewarn.providers.base import Watcher, WatcherContext
from forewarn.providers.spec import CommandFace, ProviderSpec, SimulateFace

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


def _watcher(settings: Settings, context: WatcherContext) -> Watcher:
    from .watch import build  # loads httpx: only for a provider the agent runs

    return build(settings, context)


def _simulate() -> SimulateFace:
    from . import simulate

    return simulate


def _drill() -> CommandFace:
    from . import drill

    return drill


SPEC = ProviderSpec(
    name="azure",
    summary="Azure Scheduled Events (IMDS): Preempt, Terminate, Reboot, Redeploy, Freeze",
    settings=Settings,
    watcher=_watcher,
    simulate=_simulate,
    drill=_drill,
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
