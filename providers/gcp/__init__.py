"""The gcp notice contract: `watch`, `simulate` and `drill`.

Only `Settings` loads at import (the agent's config needs it); the watcher, simulator and
drill load on first use, so importing this package pulls in neither httpx nor google-auth.
"""

from __future__ import annotations

import importlib
from typing import Any

from .settings import Settings

_LAZY = {
    "GcpWatcher": "watch",
    "build": "watch",
    "metadata_root": "watch",
    "GcpSimulator": "simulate",
    "make_simulator": "simulate",
    "drill_script": "simulate",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "GcpSimulator",
    "GcpWatcher",
    "Settings",
    "build",
    "drill_script",
    "make_simulator",
    "metadata_root",
]
