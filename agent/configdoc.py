"""The configuration reference, generated from the settings model so docs cannot drift.

`python -m forewarn.agent.configdoc` prints the Markdown table of every key (TOML name,
environment name, default, meaning); `--write FILE` replaces the table between the
`<!-- config-keys -->` markers of FILE, and `--check FILE` exits 1 when it is out of date.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from .config import settings_model

BEGIN = "<!-- config-keys -->"
END = "<!-- /config-keys -->"


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value: Any = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "(required)"
    else:
        value = field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(str(item) for item in value) or "none"
    return str(value)


def _describe(field: FieldInfo) -> str:
    text = field.description or ""
    annotation = getattr(field.annotation, "__args__", None)
    if not text and annotation and all(isinstance(arg, str) for arg in annotation):
        text = "One of " + ", ".join(f"`{arg}`" for arg in annotation) + "."
    return " ".join(text.split()).replace("|", "\\|")


def settings_keys(model: type[BaseModel] | None = None) -> Iterator[tuple[str, str, str, str]]:
    """(TOML key, environment variable, default, description) of every setting of `model`
    (default: the agent's, with a section per registered provider)."""
    if model is None:
        model = settings_model()
    sections = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            sections.append((name, annotation))
            continue
        yield name, f"FOREWARN_{name.upper()}", _default(field), _describe(field)
    for section, section_model in sections:
        for name, field in section_model.model_fields.items():
            env = f"FOREWARN_{section.upper()}_{name.upper()}"
            yield f"{section}.{name}", env, _default(field), _describe(field)


def table(model: type[BaseModel] | None = None) -> str:
    lines = [
        "| key (TOML) | environment | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for key, env, default, description in settings_keys(model):
        shown = default.replace("|", "\\|")  # a pipe would end the table cell
        lines.append(f"| `{key}` | `{env}` | `{shown}` | {description} |")
    return "\n".join(lines) + "\n"


def replace_table(document: str, path: Path) -> str:
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{path}: no {BEGIN} ... {END} markers to put the table between")
    return document[: start + len(BEGIN)] + "\n" + table() + document[end:]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m forewarn.agent.configdoc")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", type=Path, metavar="FILE", help="update the table in FILE")
    group.add_argument("--check", type=Path, metavar="FILE", help="exit 1 if FILE is stale")
    args = parser.parse_args(argv)
    target = args.write or args.check
    if target is None:
        sys.stdout.write(table())
        return 0
    try:
        current = target.read_text()
        updated = replace_table(current, target)
    except (OSError, ValueError) as error:
        print(f"configdoc: {error}", file=sys.stderr)
        return 2
    if args.check:
        if updated != current:
            print(
                f"{target}: the configuration table is out of date; run "
                f"python -m forewarn.agent.configdoc --write {target}",
                file=sys.stderr,
            )
            return 1
        return 0
    target.write_text(updated)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["main", "settings_keys", "table"]
