"""The digitalocean notice contract: `watch`, `simulate` and `drill`.

DigitalOcean announces a Spot droplet's reclaim by email only; the watcher reads that mailbox
over IMAP and uses droplet metadata to detect the platform and learn the droplet's id and
name. The agent imports `watch`, `simulate` and `drill` by name (they bring httpx); this
package exports the settings and the pure recognition of a reclaim mail.
"""

from .mail import MatchRules, Verdict, find_deadline, judge, read_mail, reclaim_verdict
from .settings import Settings

__all__ = [
    "MatchRules",
    "Settings",
    "Verdict",
    "find_deadline",
    "judge",
    "read_mail",
    "reclaim_verdict",
]
