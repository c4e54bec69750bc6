"""Settings of the `[digitalocean]` section (environment `FOREWARN_DIGITALOCEAN_<KEY>`)."""

from __future__ import annotations

from ..settings import ProviderSettings


class Settings(ProviderSettings):
    pass


__all__ = ["Settings"]
