"""One root: every exception class forewarn defines derives from `ForewarnError`."""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import inspect

import pytest
from forewarn.protocol.errors import ConfigError, DrillError, ForewarnError, UsageError
from test_import_graph import MODULES, parsed


def _base_names(node: ast.ClassDef) -> set[str]:
    names = set()
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.add(base.id)
        elif isinstance(base, ast.Attribute):
            names.add(base.attr)
    return names


@functools.cache  # the same for both tests that ask
def _modules_defining_exceptions() -> frozenset[str]:
    """By the code alone (so that no framework's torch is imported): a class is an exception
    when a base is a builtin exception or, transitively, one of the project's."""
    classes = [
        (name, node)
        for name in MODULES
        for node in ast.walk(parsed(name))
        if isinstance(node, ast.ClassDef)
    ]
    known = {
        name
        for name, value in vars(builtins).items()
        if isinstance(value, type) and issubclass(value, BaseException)
    }
    while True:
        grown = known | {node.name for _, node in classes if _base_names(node) & known}
        if grown == known:
            break
        known = grown
    return frozenset(module for module, node in classes if _base_names(node) & known)


def _exception_classes() -> list[type[BaseException]]:
    found = []
    for name in sorted(_modules_defining_exceptions()):
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == name:
                found.append(value)
    return found


def test_every_exception_derives_from_the_root() -> None:
    classes = _exception_classes()
    assert len(classes) > 20
    strays = [
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in classes
        if not issubclass(cls, ForewarnError)
    ]
    assert not strays


def test_one_config_error_and_one_drill_error() -> None:
    names: dict[str, set[type[BaseException]]] = {}
    for cls in _exception_classes():
        names.setdefault(cls.__name__, set()).add(cls)
    for name in ("ConfigError", "DrillError", "UsageError"):
        assert len(names[name]) == 1, names[name]
    assert issubclass(ConfigError, UsageError) and UsageError.exit_code == 2
    assert DrillError.exit_code == 1


@pytest.mark.parametrize("cls", [ConfigError, UsageError])
def test_bad_input_is_still_a_value_error(cls: type[Exception]) -> None:
    assert issubclass(cls, ValueError)
