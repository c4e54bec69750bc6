"""The root of every error forewarn raises on purpose.

Callers can catch `ForewarnError` to handle anything forewarn reports, and the command line
turns one into a single `forewarn: ...` line with the error's `exit_code`. The checkpoint
store's hierarchy (`forewarn.clients.checkpoint.errors`) is the model: one base per area,
one class per distinct thing a caller may want to catch, standard bases kept where callers
already rely on them (`ValueError` for bad input).
"""

from __future__ import annotations


class ForewarnError(Exception):
    """Base of every error forewarn raises on purpose."""

    #: The process exit code when this error ends a command: 1 for a failure.
    exit_code: int = 1


class UsageError(ForewarnError, ValueError):
    """Bad input from the user (a flag, an argument); the text names it. Exit code 2."""

    exit_code = 2


class ConfigError(UsageError):
    """Configuration that cannot be used; the text names the key and what was wrong."""


class DrillError(ForewarnError):
    """A drill could not run or did not finish (missing credentials, a refused request)."""


__all__ = ["ConfigError", "DrillError", "ForewarnError", "UsageError"]
