"""The kubernetes notice contract: `watch`, `simulate` and `drill`.

Only the settings are imported here (the agent's config needs them); the faces load httpx
when they are imported by name.
"""

from .settings import DEFAULT_DRAIN_TAINTS, Settings

__all__ = ["DEFAULT_DRAIN_TAINTS", "Settings"]
