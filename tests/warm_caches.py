"""Rewrites the test modules' asserts once, in the process that starts the xdist workers.

Every xdist worker imports every test module to collect it, through pytest's assertion
rewriter, which keeps the rewritten code in `__pycache__/*.cpython-3X-pytest-V.pyc` and uses it
whenever the source is unchanged. In a clean clone (the README's test command, CI) there is no
such cache yet, and the eight workers, started together, each rewrote all of the suite's
modules before any had written one: about 9 CPU-s a worker on the 2-core machine (collecting
with the caches in place took 5.5 CPU-s, without them 15), some 65 CPU-s of a run. Written once
here, before the workers start, each worker reads them.

The rewriting is pytest's own (`_pytest.assertion.rewrite`: the functions its import hook
calls), so the workers find exactly what they would have written. Those names are private: on a
pytest without them nothing is written here and each worker rewrites as before, slower but
the same run. `tests/test_warm_caches.py` pins that they work with the installed pytest.
"""

from __future__ import annotations

import fnmatch
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest


def wants_warm_caches(config: Any) -> bool:
    """Only the xdist controller of a run with workers rewrites ahead: a worker, or a run
    without workers, rewrites each module as it imports it, once."""
    if hasattr(config, "workerinput"):
        return False
    workers = getattr(config.option, "numprocesses", None)
    if not isinstance(workers, int) or workers < 1:
        return False
    if getattr(config.option, "dist", "load") == "no":
        return False
    return getattr(config.option, "assertmode", "rewrite") == "rewrite" and not (
        sys.dont_write_bytecode
    )


def modules_to_rewrite(config: pytest.Config) -> Iterator[Path]:
    """The test modules and conftest files under the run's arguments, as pytest would find
    them (its `python_files` patterns; not into `norecursedirs` nor a virtual environment)."""
    patterns = [pattern for pattern in config.getini("python_files") if os.sep not in pattern]
    skipped_dirs = list(config.getini("norecursedirs"))
    start = config.invocation_params.dir
    seen: set[Path] = set()
    for arg in config.args:
        path = (start / arg.split("::")[0]).resolve()
        for found in _python_files(path, skipped_dirs):
            if found in seen:
                continue
            seen.add(found)
            if found.name == "conftest.py" or any(
                fnmatch.fnmatch(found.name, pattern) for pattern in patterns
            ):
                yield found


def _python_files(path: Path, skipped_dirs: list[str]) -> Iterable[Path]:
    if path.is_file():
        return [path] if path.suffix == ".py" else []
    found = []
    for folder, dirs, files in os.walk(path):
        dirs[:] = sorted(
            name
            for name in dirs
            if not any(fnmatch.fnmatch(name, pattern) for pattern in skipped_dirs)
            and not (Path(folder, name) / "pyvenv.cfg").exists()
        )
        found += [Path(folder, name) for name in sorted(files) if name.endswith(".py")]
    return found


def warm_caches(config: pytest.Config, modules: Iterable[Path]) -> int:
    """Write pytest's rewritten-module cache for each of `modules` that has none for its
    current source; how many were written."""
    try:
        from _pytest.assertion.rewrite import (
            PYC_TAIL,
            _read_pyc,
            _rewrite_test,
            _write_pyc,
            assertstate_key,
            get_cache_dir,
            try_makedirs,
        )

        state = config.stash[assertstate_key]
    except (ImportError, KeyError):  # another pytest: each worker rewrites for itself
        return 0
    written = 0
    for module in modules:
        cache_dir = get_cache_dir(module)
        pyc = cache_dir / (module.name[:-3] + PYC_TAIL)
        if _read_pyc(module, pyc) is not None or not try_makedirs(cache_dir):
            continue
        try:
            source_key, code = _rewrite_test(module, config)
        except SyntaxError:  # the worker reports it where the module is collected
            continue
        written += bool(_write_pyc(state, code, source_key, pyc))
    return written
