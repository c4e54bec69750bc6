"""argparse `type=` converters that more than one command's parser uses, apart from the CLI
module so that the commands it loads need not import it back."""

from __future__ import annotations

import argparse
import string
from pathlib import Path

__all__ = ["choice_as_written", "path_arg", "word_as_written"]


def path_arg(text: str) -> Path:
    """An argparse `type=` for a path flag: `~` is the home directory, as in the config file
    (`--dir=~/drill` and `"~/out"` reach us unexpanded; they made a directory named `~`)."""
    # Path("") is ".": `--runtime-dir "$DIR"` with DIR unset bound the agent's sockets in its
    # working directory, where no client looks.
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path (leave the flag out for the default)")
    return Path(text).expanduser()


def choice_as_written(value: str) -> str:
    """A log level or format as people write it: `INFO`, `Warning`, `WARN` (Python's own
    alias), `json` with a ConfigMap block's newline. `FOREWARN_LOG_LEVEL=INFO` stopped the
    agent with exit 2 at every start, for its case alone."""
    value = value.strip(string.whitespace).lower()
    return "warning" if value == "warn" else value


def word_as_written(value: str) -> str:
    """A word among a flag's choices in any case, without the space around it (`notify
    DRAIN`, `wait --for Terminate`, `--scenario CI`), as provider names and log levels are
    read: each was 'invalid choice'. A word not among them is still refused, named lowered."""
    return value.strip(string.whitespace).lower()
