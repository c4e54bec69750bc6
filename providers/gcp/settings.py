"""Settings of the `[gcp]` section (environment `FOREWARN_GCP_<KEY>`)."""

from __future__ import annotations

from ..settings import ProviderSettings


class Settings(ProviderSettings):
    pass


__all__ = ["Settings"]
