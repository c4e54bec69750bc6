"""The shell blocks of a Markdown page, as a user would paste them.

A ```sh block runs in tests unless the line before it is `<!-- not run in tests: REASON -->`:
a block is never skipped silently.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Anchored at a line's start: unanchored, `[^\n]*` was tried from every character of every
# line to its end (quadratic in a line's length), 0.3 CPU-s of every xdist worker's collection.
_BLOCK = re.compile(r"^(?P<before>[^\n]*)\n```sh\n(?P<body>.*?)\n```", re.DOTALL | re.MULTILINE)
_SKIP = re.compile(r"^<!-- not run in tests: (?P<reason>.+\S) -->$")


@dataclass(frozen=True)
class ShellBlock:
    source: str
    line: int
    body: str
    skip_reason: str | None


def doc_section(path: Path, section: str) -> str:
    """The text of `path`'s `## section`, up to the next `## ` heading."""
    text = path.read_text()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def shell_blocks(path: Path, section: str | None = None) -> list[ShellBlock]:
    """Every ```sh block of `path`, or of its `## section` only."""
    text = path.read_text()
    offset = 0
    if section is not None:
        offset = text.count("\n", 0, text.index(f"\n## {section}\n"))
        text = doc_section(path, section)
    blocks = []
    for match in _BLOCK.finditer(text):
        skip = _SKIP.match(match.group("before").strip())
        line = offset + text.count("\n", 0, match.start("body")) + 1
        blocks.append(
            ShellBlock(
                f"{path.name}:{line}",
                line,
                match.group("body"),
                skip.group("reason") if skip else None,
            )
        )
    return blocks


__all__ = ["ShellBlock", "doc_section", "shell_blocks"]


def run_script(
    script: str,
    *,
    cwd: Path,
    env: dict[str, str],
    timeout: float,
    private_mounts: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`script` under strict bash (-euo pipefail), output captured; with `private_mounts`, in
    a private mount namespace (root), so its mounts never reach the machine."""
    argv = ["bash", "-euo", "pipefail", "-c", script]
    if private_mounts:
        argv = ["unshare", "--mount", "--propagation", "private", *argv]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
