"""Collecting the suite imports no heavy library: every xdist worker imports every test module
(and the helpers they import at module level) to collect it, so a module-level `import numpy`
cost each of the eight workers its import whether or not it ran a test that used it. Read
from the files' own `import` statements (module level only), not by importing them."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# What each costs a worker to import, measured on the 2-core machine (CPU-s): torch ~2.4,
# lightning and transformers ~3 more, boto3 with botocore ~0.35, numpy ~0.2,
# kubernetes_validate ~0.2, moto ~1. A test imports them inside itself, or through
# `support.LazyModule` (a module-level name imported at its first use).
HEAVY = (
    "torch",
    "lightning",
    "transformers",
    "numpy",
    "boto3",
    "botocore",
    "kubernetes_validate",
    "moto",
)

# An `import` or `from ... import` line, at any depth: a cheap first look (parsing the suite's
# 4.7 MB of tests took 1.7 CPU-s); a file that names a heavy library is then parsed to learn
# whether the import runs at module level.
_IMPORT_LINE = re.compile(r"^[ \t]*(?:import|from)[ \t]+(\w+)", re.MULTILINE)


def _module_level_imports(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """The modules `tree` imports as it is imported: at module level, in a class body, or
    under a module-level `if`/`try`/`with` (not under `if TYPE_CHECKING:`), never inside a
    function."""
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module
        elif isinstance(node, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                pending += node.body
            pending += node.orelse
        elif isinstance(node, ast.Try):
            pending += node.body + node.orelse + node.finalbody
            for handler in node.handlers:
                pending += handler.body
        elif isinstance(node, (ast.ClassDef, ast.With)):
            pending += node.body


def _collected_files() -> Iterator[tuple[Path, str]]:
    """The test modules and conftest files, and the helper modules of tests/ they import
    (found beside the importing file, or in tests/ itself), each with its text."""
    seen: set[Path] = set()
    pending = [
        path
        for path in sorted(TESTS.rglob("*.py"))
        if path.name.startswith("test_") or path.name == "conftest.py"
    ]
    while pending:
        path = pending.pop()
        if path in seen or "__pycache__" in path.parts:
            continue
        seen.add(path)
        text = path.read_text()
        yield path, text
        for top in set(_IMPORT_LINE.findall(text)):
            for folder in (path.parent, TESTS):
                helper = folder / f"{top}.py"
                if helper.is_file():
                    pending.append(helper)
                    break


def test_collecting_the_suite_imports_no_heavy_library() -> None:
    found = [
        f"{path.relative_to(TESTS)}:{line}: imports {name}"
        for path, text in _collected_files()
        if set(_IMPORT_LINE.findall(text)) & set(HEAVY)
        for line, name in _module_level_imports(ast.parse(text, str(path)))
        if name.split(".")[0] in HEAVY
    ]
    assert not found, "imported while collecting (import it in the test):\n" + "\n".join(
        sorted(found)
    )


def test_the_check_sees_imports_under_if_and_try_but_not_in_functions() -> None:
    tree = ast.parse(
        "import numpy\n"
        "from boto3 import session\n"
        "try:\n    import torch\nexcept ImportError:\n    torch = None\n"
        "if TYPE_CHECKING:\n    import moto\n"
        "class A:\n    import lightning\n"
        "def f():\n    import transformers\n"
    )
    assert sorted(name for _, name in _module_level_imports(tree)) == [
        "boto3",
        "lightning",
        "numpy",
        "torch",
    ]
