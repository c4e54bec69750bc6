"""The digitalocean notice contract: `watch`, `simulate` and `drill`.

DigitalOcean announces a Spot droplet's reclaim by email only; the watcher reads that mailbox
over IMAP and uses droplet metadata to detect the platform and learn the droplet's id and
name. `SPEC` loads `watch`, `simulate` and `drill` on first use (they bring httpx); this
package exports the settings and the pure recognition of a reclaim mail.
"""

import importlib
from typing import TYPE_CHECKING, Any

from forewarn.providers.spec import ProviderSpec

from .settings import Settings

if TYPE_CHECKING:
    from .mail import (
        MatchRules,
        Verdict,
        find_deadline,
        judge,
        read_mail,
        reclaim_verdict,
    )

# Recognising a mail loads on first use (it brings the email package's parsers and many
# patterns): an agent that does not run digitalocean never needs it.
_LAZY = frozenset(
    (
        "MatchRules",
        "Verdict",
        "find_deadline",
        "judge",
        "read_mail",
        "reclaim_verdict",
    )
)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.mail"), name)


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
