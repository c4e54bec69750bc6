"""The forewarn agent: protocol, configuration, notice board, publisher, runner and CLI.

Names are loaded on first use (PEP 562), so that `forewarn agent --help` stays quick.
The endpoints and the runtime directory are in `forewarn.protocol`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "Notice": "protocol",
    "Heartbeat": "protocol",
    "Report": "protocol",
    "json_schema": "protocol",
    "Settings": "config",
    "ConfigError": "config",
    "load_settings": "config",
    "NoticeBoard": "board",
    "Agent": "runner",
    "run_agent": "runner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
