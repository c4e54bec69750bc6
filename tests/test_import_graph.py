"""The layering, checked on the code's own `import` statements (every one, at module level or
inside a function): clients → protocol ← providers ← agent, no provider imports another, no
cycles, and nothing imports the command line but its entry point."""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("protocol", "agent", "providers", "clients", "testing")


def _modules() -> dict[str, Path]:
    found = {}
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(["forewarn", *parts])] = path
    return found


MODULES = _modules()


# Each module parsed once per process: this file's graph and test_errors.py's exception
# classes walk the same ~230 trees (a parse of them all is about 0.5 CPU-s).
@functools.cache
def parsed(name: str) -> ast.Module:
    path = MODULES[name]
    return ast.parse(path.read_text(), str(path))


def _imports(name: str, path: Path) -> Iterator[str]:
    """Every module `name` imports, resolved to the longest known module name."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(parsed(name)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # `from package import module` imports the module itself.
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            targets = [target for target in targets if target in MODULES][:1] or [base]
        else:
            continue
        yield from targets


# Parsed on first use, not at import: every xdist worker imports this file to collect it.
@functools.cache
def graph() -> dict[str, set[str]]:
    return {
        name: {target for target in _imports(name, path) if target != name}
        for name, path in MODULES.items()
    }


def _internal(targets: set[str]) -> set[str]:
    return {target for target in targets if target.startswith("forewarn.")}


def _provider_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] == "providers":
        candidate = ".".join(parts[:3])
        if (ROOT / "providers" / parts[2] / "__init__.py").exists():
            return candidate
    return None


def test_the_graph_sees_the_code() -> None:
    assert len(MODULES) > 80
    assert "forewarn.protocol.wire" in graph()["forewarn.agent.runner"]
    # A lazy import (inside a function): `forewarn agent` loads the runner only when it runs.
    assert "forewarn.agent.runner" in graph()["forewarn.agent.cli"]


def test_clients_and_providers_do_not_import_the_agent() -> None:
    bad = {
        (name, target)
        for name, targets in graph().items()
        if name.startswith(
            ("forewarn.clients", "forewarn.providers", "forewarn.protocol", "forewarn.testing")
        )
        for target in targets
        if target.startswith("forewarn.agent")
    }
    assert not bad


def test_clients_import_only_the_protocol() -> None:
    bad = {
        (name, target)
        for name, targets in graph().items()
        if name.startswith("forewarn.clients")
        for target in _internal(targets)
        if not target.startswith(("forewarn.clients", "forewarn.protocol"))
    }
    assert not bad


def test_the_protocol_needs_only_the_standard_library() -> None:
    for name, targets in graph().items():
        if not name.startswith("forewarn.protocol"):
            continue
        for target in targets:
            top = target.split(".")[0]
            if target.startswith("forewarn.protocol"):
                continue
            # zmq is imported inside `request`, on first use, by design; tomli is tomllib on
            # Python 3.10 (the clients read the agent's config file).
            assert top in sys.stdlib_module_names or top in ("zmq", "tomli"), (name, target)


def test_no_provider_imports_another() -> None:
    bad = set()
    for name, targets in graph().items():
        own = _provider_of(name)
        if own is None:
            continue
        for target in targets:
            other = _provider_of(target)
            if other is not None and other != own:
                bad.add((name, target))
    assert not bad


def test_nothing_imports_the_command_line() -> None:
    importers = {name for name, targets in graph().items() if "forewarn.agent.cli" in targets}
    assert not importers


def test_no_import_cycles() -> None:
    internal = {name: _internal(targets) & graph().keys() for name, targets in graph().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in internal[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    # Raised for the walk only: left raised, it let Python's json read a notice nested 1,200
    # deep in every later test of the worker, and the C subscriber test, which compares the C
    # cap with what the Python client reads at the default limit, failed after this one.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for node in internal:
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    assert not cycles


def test_the_cycle_walk_leaves_the_recursion_limit_as_it_found_it() -> None:
    """Left at 10,000, every later test of the worker read JSON nested past the default limit:
    the C subscriber's nesting test failed whenever it ran after this file (check 26c)."""
    found = sys.getrecursionlimit()
    sys.setrecursionlimit(1_000)
    try:
        test_no_import_cycles()
        assert sys.getrecursionlimit() == 1_000
    finally:
        sys.setrecursionlimit(found)
