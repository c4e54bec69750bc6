"""The kubernetes notice contract: `watch`, `simulate` and `drill`.

Only the settings are imported here (the agent's config needs them); `SPEC` loads the faces
(and httpx) on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forewarn.providers.lazy import lazy_attributes
from forewarn.providers.spec import ProviderSpec

if TYPE_CHECKING:
    from .settings import DEFAULT_DRAIN_TAINTS, Settings

# The settings model loads on first use (`SPEC.settings`, or `Settings` here): `forewarn
# simulate` and a drill's `--help` read the registry and never validate a configuration.
__getattr__ = lazy_attributes(__name__, "settings", ("DEFAULT_DRAIN_TAINTS", "Settings"))

SPEC: ProviderSpec[Settings] = ProviderSpec.of_package(
    __name__,
    name="kubernetes",
    summary="the Kubernetes node object: cordon, deletion taints, node shutdown",
    reasons=("node-drain",),
)


__all__ = ["DEFAULT_DRAIN_TAINTS", "SPEC", "Settings"]
