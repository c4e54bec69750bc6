"""A framework callback imported where its framework is not installed: one error naming the
extra that adds it, not `No module named 'pytorch_lightning'` (the older name the Lightning
callback falls back to, which sent users to install a package they do not use)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import pytest
from forewarn.clients.checkpoint import ExtraMissingError
from forewarn.protocol.install import extra_hint

HIDDEN = {
    "lightning": ("lightning", "pytorch_lightning"),
    "transformers": ("transformers",),
}


class NotInstalled:
    """A meta path finder that finds these packages nowhere, as where they are not installed:
    importing one raises ModuleNotFoundError naming it (None in sys.modules would say
    'import halted' instead, and name the submodule asked for)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = set(names)

    def find_spec(self, name: str, path: Any = None, target: ModuleType | None = None) -> None:
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


@pytest.mark.parametrize("framework", sorted(HIDDEN))
def test_a_callback_without_its_framework_names_the_extra(
    framework: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = f"forewarn.clients.frameworks.{framework}"
    for name in list(sys.modules):
        if name == module or name.split(".")[0] in HIDDEN[framework]:
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [NotInstalled(HIDDEN[framework]), *sys.meta_path])
    with pytest.raises(ExtraMissingError) as raised:
        importlib.import_module(module)
    message = str(raised.value)
    assert message.startswith(f"{module} needs {framework}: "), message
    assert extra_hint(framework) in message
    assert "pytorch_lightning" not in message
    assert isinstance(raised.value, ModuleNotFoundError)
