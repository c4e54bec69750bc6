"""argparse `type=` converters that more than one command's parser uses, apart from the CLI
module so that the commands it loads need not import it back."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["path_arg"]


def path_arg(text: str) -> Path:
    """An argparse `type=` for a path flag: `~` is the home directory, as in the config file
    (`--dir=~/drill` and `"~/out"` reach us unexpanded; they made a directory named `~`)."""
    # Path("") is ".": `--runtime-dir "$DIR"` with DIR unset bound the agent's sockets in its
    # working directory, where no client looks.
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path (leave the flag out for the default)")
    return Path(text).expanduser()
