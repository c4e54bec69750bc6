"""The aws notice contract: `watch`, `simulate` and `drill`."""

from .settings import Settings

__all__ = ["Settings"]
