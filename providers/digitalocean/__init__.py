"""The digitalocean notice contract: `watch`, `simulate` and `drill`.

DigitalOcean announces a Spot droplet's reclaim by email only; the watcher reads that mailbox
over IMAP and uses droplet metadata to detect the platform and learn the droplet's id and
name. `SPEC` loads `watch`, `simulate` and `drill` on first use (they bring httpx); this
package exports the settings and the pure recognition of a reclaim mail.
"""

from forewarn.providers.base import Watcher, WatcherContext
from forewarn.providers.spec import CommandFace, ProviderSpec, SimulateFace

from .mail import MatchRules, Verdict, find_deadline, judge, read_mail, reclaim_verdict
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
    name="digitalocean",
    summary="DigitalOcean Spot reclaim email over IMAP, with droplet metadata",
    settings=Settings,
    watcher=_watcher,
    simulate=_simulate,
    drill=_drill,
)


__all__ = [
    "SPEC",
    "MatchRules",
    "Settings",
    "Verdict",
    "find_deadline",
    "judge",
    "read_mail",
    "reclaim_verdict",
]
