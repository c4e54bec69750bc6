"""What every provider's settings section has in common."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ProviderSettings(BaseModel):
    """The base of every `[<provider>]` section. `url` points the watcher at its endpoint
    (tests and simulators use loopback); None means the provider's real address."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(default=None, description="Base URL of the notice endpoint.")


__all__ = ["ProviderSettings"]
