"""Settings of the `[azure]` section (environment `FOREWARN_AZURE_<KEY>`)."""

from __future__ import annotations

from ..settings import ProviderSettings


class Settings(ProviderSettings):
    pass


__all__ = ["Settings"]
