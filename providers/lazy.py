"""Names a provider package exports but loads only on first use.

The agent imports every provider package to build its registry and configuration, yet runs
only some of them: a provider's parsers (regexes, the email package) are loaded when someone
asks for them, not at start-up, which the start-up benchmark measures.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any


def lazy_attributes(package: str, module: str, names: Iterable[str]) -> Callable[[str], Any]:
    """A module `__getattr__` that serves `names` from `package.module`, imported on first use."""
    served = frozenset(names)

    def __getattr__(name: str) -> Any:
        if name not in served:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__


__all__ = ["lazy_attributes"]
