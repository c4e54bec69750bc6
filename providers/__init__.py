"""One subpackage per notice contract, each exporting one typed `SPEC` (`ProviderSpec`):
its settings section, its watcher factory, and its simulator and drill faces.

`REGISTRY` (in `registry.py`) lists them; the runner, the command line, the configuration
and the generated docs iterate over it. Each spec loads its faces on first use, so the agent
imports only the providers it runs. `REGISTRY` and the other exports load on first access:
the shared helpers here (the state files, the poll health, the backoff) stay cheap to
import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from .registry import REGISTRY, Registry, UnknownProvider
    from .settings import EndpointSettings, ProviderSettings
    from .spec import CommandFace, ProviderSpec, SimulateFace

# Every export loads on first use: the helper modules here (persist, health, backoff) are
# imported where no provider runs, and these exports bring pydantic. `forewarn status` with
# no agent, naming the lock's holder through forewarn.providers.persist, loaded pydantic, the
# report model and the settings base for a one-line answer (about 0.1 CPU-s).
_LAZY = {
    **dict.fromkeys(
        (
            "Closable",
            "Emit",
            "FlushAware",
            "ParseError",
            "PollHealth",
            "ProgressBounded",
            "RestoreAware",
            "Watcher",
            "WatcherContext",
        ),
        "base",
    ),
    **dict.fromkeys(("REGISTRY", "Registry", "UnknownProvider"), "registry"),
    **dict.fromkeys(("EndpointSettings", "ProviderSettings"), "settings"),
    **dict.fromkeys(("CommandFace", "ProviderSpec", "SimulateFace"), "spec"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next look finds it without this hook
    return value


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
