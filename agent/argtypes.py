"""argparse `type=` converters that more than one command's parser uses, apart from the CLI
module so that the commands it loads need not import it back."""

from __future__ import annotations

import argparse
import string
from pathlib import Path

__all__ = ["WrittenWord", "choice_as_written", "path_arg", "word_as_written"]


def path_arg(text: str) -> Path:
    """An argparse `type=` for a path flag: `~` is the home directory, as in the config file
    (`--dir=~/drill` and `"~/out"` reach us unexpanded; they made a directory named `~`)."""
    # Path("") is ".": `--runtime-dir "$DIR"` with DIR unset bound the agent's sockets in its
    # working directory, where no client looks.
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path (leave the flag out for the default)")
    return Path(text).expanduser()


class WrittenWord(str):
    """A flag's word lowered, as its choices are compared, that shows as it was written in
    its repr: argparse names a refused choice by repr, and `notify DRAINN` was refused as
    "invalid choice 'drainn'", a word the user never typed."""

    written: str

    def __new__(cls, word: str, written: str) -> WrittenWord:
        made = super().__new__(cls, word)
        made.written = written
        return made

    def __repr__(self) -> str:
        return repr(self.written)


def choice_as_written(value: str) -> str:
    """A log level or format as people write it: `INFO`, `Warning`, `WARN` (Python's own
    alias), `json` with a ConfigMap block's newline. `FOREWARN_LOG_LEVEL=INFO` stopped the
    agent with exit 2 at every start, for its case alone."""
    word = value.strip(string.whitespace).lower()
    return WrittenWord("warning" if word == "warn" else word, value)


def word_as_written(value: str) -> str:
    """A word among a flag's choices in any case, without the space around it (`notify
    DRAIN`, `wait --for Terminate`, `--scenario CI`), as provider names and log levels are
    read: each was 'invalid choice'. A word not among them is still refused, named as
    written (`WrittenWord`)."""
    return WrittenWord(value.strip(string.whitespace).lower(), value)
