"""The gcp notice contract: the Compute Engine metadata server.

Only `Settings` loads at import (the agent's config needs it); `SPEC` loads the watcher,
simulator and drill on first use, so importing this package pulls in neither httpx nor
google-auth.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forewarn.providers.lazy import lazy_attributes
from forewarn.providers.spec import ProviderSpec

if TYPE_CHECKING:
    from .settings import Settings

# The settings model loads on first use (`SPEC.settings`, or `Settings` here): `forewarn
# simulate` and a drill's `--help` read the registry and never validate a configuration.
__getattr__ = lazy_attributes(__name__, "settings", ("Settings",))

SPEC: ProviderSpec[Settings] = ProviderSpec.of_package(
    __name__,
    name="gcp",
    summary="Compute Engine metadata server: preemption and host maintenance",
    reasons=("preemption", "host-maintenance", "scheduled-maintenance"),
)


__all__ = ["SPEC", "Settings"]
