"""The README stays true: its commands exist, and every command and option of the CLI is
documented in the README or in a page under docs/."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from forewarn.agent.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = README + "".join(page.read_text() for page in sorted((ROOT / "docs").glob("*.md")))


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), None
                yield from _walk(sub, (*path, name))
        elif action.option_strings and "--help" not in action.option_strings:
            yield path, max(action.option_strings, key=len)


def test_every_command_and_option_is_documented() -> None:
    missing = []
    for path, option in _walk(build_parser()):
        if option is None:
            if f"forewarn {' '.join(path)}" not in DOCS and path[-1] not in DOCS:
                missing.append(" ".join(path))
        elif option not in DOCS:
            missing.append(f"{' '.join(path)} {option}")
    assert not missing, f"undocumented: {missing}"


def test_the_two_setup_commands_are_there_and_ci_runs_the_test_one() -> None:
    for marker in ("drill-command", "test-command"):
        block = re.search(rf"<!-- {marker} -->\n```\n(.+)\n```\n<!-- /{marker} -->", README)
        assert block, marker
        assert block.group(1).startswith("python3 -m venv .venv && ")
    assert "test-command" in (ROOT / ".ci" / "run").read_text()
