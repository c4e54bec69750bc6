"""The control token: written by the agent into its runtime directory when control listens on
tcp:// or ipc://@abstract (which any local uid can reach), and checked on every request there.

Reading the file is the proof of being allowed to ask: it is the agent user's own (0600), in a
directory whose owner and mode the agent has already checked."""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
from pathlib import Path

from forewarn.protocol.wire import TOKEN_FILE

TOKEN_MODE = 0o600


def write_token(runtime: Path) -> str:
    """A fresh random token, written atomically to `runtime/control-token`: a new file (never
    through a link someone planted) renamed over the old one."""
    token = secrets.token_hex(32)
    final = runtime / TOKEN_FILE
    temp = runtime / f".{TOKEN_FILE}.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        temp.unlink()  # left by a killed agent with the same pid
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, TOKEN_MODE)
    try:
        os.fchmod(fd, TOKEN_MODE)  # whatever the umask
        os.write(fd, f"{token}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, final)  # replaces a link at `final` itself, never its target
    return token


def remove_token(runtime: Path, token: str) -> None:
    """Remove the token file if it still holds `token` (not a later agent's)."""
    path = runtime / TOKEN_FILE
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            found = os.read(fd, 256).decode("ascii", errors="replace").strip()
        finally:
            os.close(fd)
        if found == token:
            path.unlink()


# The file ends with a newline: a client in another language that sends what it read (Node's
# readFileSync, C's fread) sent the newline too, and was refused as having a wrong token.
TOKEN_PADDING = " \t\r\n"


def token_matches(expected: str, given: object) -> bool:
    """Whether a request's `token` field is the agent's token (the file's line, with or
    without the whitespace around it), in constant time. Anything else a JSON request can
    hold (a number, a list, a string with lone surrogates) is just wrong."""
    if not isinstance(given, str):
        return False
    return hmac.compare_digest(
        given.strip(TOKEN_PADDING).encode("utf-8", "surrogatepass"),
        expected.encode("utf-8", "surrogatepass"),
    )


__all__ = ["TOKEN_MODE", "remove_token", "token_matches", "write_token"]
