"""Settings of the `[kubernetes]` section (environment `FOREWARN_KUBERNETES_<KEY>`)."""

from __future__ import annotations

from ..settings import ProviderSettings


class Settings(ProviderSettings):
    pass


__all__ = ["Settings"]
