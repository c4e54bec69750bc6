"""The gcp notice contract: the Compute Engine metadata server.

Only `Settings` loads at import (the agent's config needs it); `SPEC` loads the watcher,
simulator and drill on first use, so importing this package pulls in neither httpx nor
google-auth.
"""

from __future__ import annotations

from forewarn.providers.base import Watcher, WatcherContext
from forewarn.providers.spec import CommandFace, ProviderSpec, SimulateFace

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
    name="gcp",
    summary="Compute Engine metadata server: preemption and host maintenance",
    settings=Settings,
    watcher=_watcher,
    simulate=_simulate,
    drill=_drill,
)


__all__ = ["SPEC", "Settings"]
