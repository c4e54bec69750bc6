"""The local notice contract: a flag file and manual notices (`forewarn notify`).

It has no simulator or drill of its own: `forewarn drill local` is the agent's.
"""

from forewarn.providers.base import Watcher, WatcherContext
from forewarn.providers.spec import ProviderSpec

from .settings import Settings


def _watcher(settings: Settings, context: WatcherContext) -> Watcher:
    from .watch import build  # loads httpx: only for a provider the agent runs

    return build(settings, context)


SPEC = ProviderSpec(
    name="local",
    summary="a flag file and `forewarn notify` on this machine",
    settings=Settings,
    watcher=_watcher,
    detect=False,
)


__all__ = ["SPEC", "Settings"]
