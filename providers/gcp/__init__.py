"""The gcp notice contract: the Compute Engine metadata server.

Only `Settings` loads at import (the agent's config needs it); `SPEC` loads the watcher,
simulator and drill on first use, so importing this package pulls in neither httpx nor
google-auth.
"""

from __future__ import annotations

from forewarn.providers.spec import ProviderSpec

from .settings import Settings

SPEC = ProviderSpec.of_package(
    __name__,
    name="gcp",
    summary="Compute Engine metadata server: preemption and host maintenance",
    settings=Settings,
    reasons=("preemption", "host-maintenance", "scheduled-maintenance"),
)


__all__ = ["SPEC", "Settings"]
