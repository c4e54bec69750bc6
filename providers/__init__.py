"""One subpackage per notice contract, each exporting one typed `SPEC` (`ProviderSpec`):
its settings section, its watcher factory, and its simulator and drill faces.

`REGISTRY` (in `registry.py`) lists them; the runner, the command line, the configuration
and the generated docs iterate over it. Each spec loads its faces on first use, so the agent
imports only the providers it runs. `REGISTRY` itself loads on first access: the shared
helpers here (the simulator base, the watcher protocol) stay cheap to import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import (
    Closable,
    Emit,
    FlushAware,
    ParseError,
    PollHealth,
    ProgressBounded,
    RestoreAware,
    Watcher,
    WatcherContext,
)
from .settings import EndpointSettings, ProviderSettings
from .spec import CommandFace, ProviderSpec, SimulateFace

if TYPE_CHECKING:
    from .registry import REGISTRY, Registry, UnknownProvider

_LAZY = {"REGISTRY": "registry", "Registry": "registry", "UnknownProvider": "registry"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "REGISTRY",
    "Closable",
    "CommandFace",
    "Emit",
    "EndpointSettings",
    "FlushAware",
    "ParseError",
    "PollHealth",
    "ProgressBounded",
    "ProviderSettings",
    "ProviderSpec",
    "Registry",
    "RestoreAware",
    "SimulateFace",
    "UnknownProvider",
    "Watcher",
    "WatcherContext",
]
