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


def test_the_readme_names_every_command_as_typed() -> None:
    """Every command and subcommand is in the README as it is typed, alone or in an
    alternation (`forewarn drill aws|gcp`): the check above let `forewarn drill digitalocean`
    pass on the bare word "digitalocean", and the README's table of commands left it out."""
    text = README.replace("\\|", "|")
    missing = []
    for path, option in _walk(build_parser()):
        if option is not None:
            continue
        *parent, name = path
        alternation = rf"(?:[\w-]+\|)*{re.escape(name)}(?![\w-])"
        if not re.search(rf"forewarn {re.escape(' '.join(parent))} ?{alternation}", text):
            missing.append(" ".join(path))
    assert not missing, f"not in the README as typed: {missing}"


def test_the_two_setup_commands_are_there_and_ci_runs_the_test_one() -> None:
    for marker in ("drill-command", "test-command"):
        block = re.search(rf"<!-- {marker} -->\n```\n(.+)\n```\n<!-- /{marker} -->", README)
        assert block, marker
        assert block.group(1).startswith("python3 -m venv .venv && ")
    assert "test-command" in (ROOT / ".ci" / "run").read_text()


def test_the_training_loop_lines_run_as_pasted(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The loop of "Add it to a training loop", run as written after a resume at step 1234:
    periodic saves count from the resume point. Without `guard.resumed(step)` the first step
    after every restart saved again (1235), and the saves after it left the every-600 grid."""
    import forewarn.clients
    from forewarn.clients import CheckpointGuard

    section = README.split("## Add it to a training loop", 1)[1]
    code = re.search(r"```python\n(.+?)```", section, re.S)
    assert code
    made: list[CheckpointGuard] = []

    class Quiet(CheckpointGuard):
        """The README's guard, without an agent, a flag file or signal handlers."""

        def __init__(self, *args: object, **options: object) -> None:
            options.update(notices=False, flag_file=None, handle_signals=False)
            super().__init__(*args, **options)  # type: ignore[arg-type]
            made.append(self)

    monkeypatch.setattr(forewarn.clients, "CheckpointGuard", Quiet)
    saves: list[int] = []
    loop = {
        "resume": lambda: 1234,
        "train_one_step": lambda: None,
        "save": lambda step: saves.append(step) or 0.01,
        "total_steps": 2500,
    }
    try:
        exec(code.group(1), loop)
    finally:
        for guard in made:
            guard.close()
    assert saves == [1834, 2434]
