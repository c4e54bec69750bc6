"""The digitalocean notice contract: `watch`, `simulate` and `drill`.

DigitalOcean announces a Spot droplet's reclaim by email only; the watcher reads that mailbox
over IMAP and uses droplet metadata to detect the platform and learn the droplet's id and
name. `SPEC` loads `watch`, `simulate` and `drill` on first use (they bring httpx); this
package exports the settings and the pure recognition of a reclaim mail.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forewarn.providers.lazy import lazy_exports
from forewarn.providers.spec import ProviderSpec

if TYPE_CHECKING:
    from .mail import (
        MatchRules,
        Verdict,
        find_deadline,
        judge,
        read_mail,
        reclaim_verdict,
    )
    from .settings import Settings

# Recognising a mail loads on first use (it brings the email package's parsers and many
# patterns): an agent that does not run digitalocean never needs it.
__getattr__ = lazy_exports(
    __name__,
    {
        "settings": ("Settings",),
        "mail": (
            "MatchRules",
            "Verdict",
            "find_deadline",
            "judge",
            "read_mail",
            "reclaim_verdict",
        ),
    },
)


SPEC: ProviderSpec[Settings] = ProviderSpec.of_package(
    __name__,
    name="digitalocean",
    summary="DigitalOcean Spot reclaim email over IMAP, with droplet metadata",
    reasons=("reclaim", "drill"),
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
