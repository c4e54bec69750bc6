"""One subpackage per notice contract, each with the same three faces:

- `watch`: `build(settings, context) -> Watcher`, reading the contract on this machine;
- `simulate`: `add_arguments(parser)` and `run(args) -> int`, a faithful fake on loopback;
- `drill`: `add_arguments(parser)` and `run(args) -> int`, triggering the real test path.

Modules are imported by name when needed, so the agent loads only the providers it runs.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .base import (
    Closable,
    Emit,
    FlushAware,
    ParseError,
    PollHealth,
    Watcher,
    WatcherContext,
)
from .settings import EndpointSettings, ProviderSettings

PROVIDERS: tuple[str, ...] = ("local", "aws", "gcp", "azure", "digitalocean", "kubernetes")
CLOUD_PROVIDERS: tuple[str, ...] = ("aws", "gcp", "azure", "digitalocean", "kubernetes")


def face(provider: str, name: str) -> ModuleType:
    """The `watch`, `simulate` or `drill` module of a provider."""
    if provider not in PROVIDERS:
        raise ValueError(f"unknown provider {provider!r}; known: {', '.join(PROVIDERS)}")
    return importlib.import_module(f"{__name__}.{provider}.{name}")


__all__ = [
    "CLOUD_PROVIDERS",
    "PROVIDERS",
    "Closable",
    "Emit",
    "EndpointSettings",
    "FlushAware",
    "ParseError",
    "PollHealth",
    "ProviderSettings",
    "Watcher",
    "WatcherContext",
    "face",
]
