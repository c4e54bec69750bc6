"""What every provider's settings section has in common."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ProviderSettings(BaseModel):
    """The base of every `[<provider>]` section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


class EndpointSettings(ProviderSettings):
    """A section whose watcher talks to an endpoint. `url` points it there (tests and
    simulators use loopback); None means the provider's real address."""

    url: str | None = Field(default=None, description="Base URL of the notice endpoint.")


__all__ = ["EndpointSettings", "ProviderSettings"]
