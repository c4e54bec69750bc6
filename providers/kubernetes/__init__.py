"""The kubernetes notice contract: `watch`, `simulate` and `drill`.

Only the settings are imported here (the agent's config needs them); `SPEC` loads the faces
(and httpx) on first use.
"""

from forewarn.providers.spec import ProviderSpec

from .settings import DEFAULT_DRAIN_TAINTS, Settings

SPEC = ProviderSpec.of_package(
    __name__,
    name="kubernetes",
    summary="the Kubernetes node object: cordon, deletion taints, node shutdown",
    settings=Settings,
    reasons=("node-drain",),
)


__all__ = ["DEFAULT_DRAIN_TAINTS", "SPEC", "Settings"]
