"""Names a provider package exports but loads only on first use.

The agent imports every provider package to build its registry and configuration, yet runs
only some of them: a provider's parsers (regexes, the email package) are loaded when someone
asks for them, not at start-up, which the start-up benchmark measures.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_attributes(package: str, module: str, names: Iterable[str]) -> Callable[[str], Any]:
    """A module `__getattr__` that serves `names` from `package.module`, imported on first use."""
    return lazy_exports(package, {module: names})


def lazy_exports(package: str, modules: Mapping[str, Iterable[str]]) -> Callable[[str], Any]:
    """A module `__getattr__` that serves each module's names from `package.<module>`,
    imported on first use (a provider's `Settings` and its parsers)."""
    served = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = served.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__


__all__ = ["lazy_attributes", "lazy_exports"]
