"""Test modules have unique basenames: the tests are not packages (pytest's rootdir import
mode), so two `test_watch.py` in different folders fail collection in a clean checkout."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).parent


def test_every_test_module_name_is_unique() -> None:
    names = Counter(path.name for path in TESTS.rglob("*.py") if path.name != "conftest.py")
    twice = sorted(name for name, count in names.items() if count > 1)
    assert not twice, f"test modules share a basename (rename one): {twice}"
