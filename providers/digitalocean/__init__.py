"""The digitalocean notice contract: `watch`, `simulate` and `drill`.

DigitalOcean announces a Spot droplet's reclaim by email only; the watcher reads that mailbox
over IMAP and uses droplet metadata to detect the platform and learn the droplet's id and
name. `SPEC` loads `watch`, `simulate` and `drill` on first use (they bring httpx); this
package exports the settings and the pure recognition of a reclaim mail.
"""

from forewarn.providers.spec import ProviderSpec

from .mail import MatchRules, Verdict, find_deadline, judge, read_mail, reclaim_verdict
from .settings import Settings

SPEC = ProviderSpec.of_package(
    __name__,
    name="digitalocean",
    summary="DigitalOcean Spot reclaim email over IMAP, with droplet metadata",
    settings=Settings,
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
