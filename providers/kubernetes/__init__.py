"""The kubernetes notice contract: `watch`, `simulate` and `drill`.

Only the settings are imported here (the agent's config needs them); `SPEC` loads the faces
(and httpx) on first use.
"""

from forewarn.providers.base import Watcher, WatcherContext
from forewarn.providers.spec import CommandFace, ProviderSpec, SimulateFace

from .settings import DEFAULT_DRAIN_TAINTS, Settings


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
    name="kubernetes",
    summary="the Kubernetes node object: cordon, deletion taints, node shutdown",
    settings=Settings,
    watcher=_watcher,
    simulate=_simulate,
    drill=_drill,
)


__all__ = ["DEFAULT_DRAIN_TAINTS", "SPEC", "Settings"]
