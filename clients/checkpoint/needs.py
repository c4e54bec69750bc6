"""Importing an optional dependency (torch, a framework) for the code that needs it, with an
error that says which extra adds it.

A bare `ModuleNotFoundError: No module named 'torch'` from inside `save_training_state` names
neither the extra nor the command: forewarn is on no package index, so `pip install torch` next
to it is a guess, and `extra_hint` gives the install this forewarn came from.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import ExtraMissingError


def needs(module: str, what: str, *, extra: str = "torch") -> ModuleType:
    """`module`, imported; `ExtraMissingError` naming `what` and the pip command that adds
    `extra` when the package it belongs to is not installed. A module missing inside that
    package's own imports (a broken install) keeps its own error."""
    top = module.split(".", 1)[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name != top:
            raise
        raise extra_missing(top, what, extra) from None


def extra_missing(package: str, what: str, extra: str) -> ExtraMissingError:
    """The error for `what` needing `package`, which forewarn's `extra` installs."""
    from forewarn.protocol.install import extra_hint

    return ExtraMissingError(f"{what} needs {package}: {extra_hint(extra)}", name=package)


__all__ = ["extra_missing", "needs"]
