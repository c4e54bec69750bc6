"""Settings of the `[aws]` section (environment `FOREWARN_AWS_<KEY>`)."""

from __future__ import annotations

from ..settings import ProviderSettings


class Settings(ProviderSettings):
    pass


__all__ = ["Settings"]
