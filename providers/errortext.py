"""One line that says what a transport error was.

httpx raises a reset connection as `ReadError('')`: its own message is empty and the reason
(`ConnectionResetError: [Errno 104] Connection reset by peer`) is down its chain of causes.
Logged as `f"{type(error).__name__}: {error}"`, Azure's watcher said `transport: ReadError: `
and nothing more.
"""

from __future__ import annotations

# Causes followed at most: httpx wraps an OS error in two or three layers.
MAX_CAUSES = 8


def error_text(error: BaseException) -> str:
    """`Type: message` of `error`, the message being the first non-empty one along its chain
    of causes (`__cause__`, else `__context__`); the type's name alone when none has one."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen and len(seen) < MAX_CAUSES:
        seen.add(id(cause))
        message = str(cause).strip()
        if message:
            return f"{type(error).__name__}: {message}"
        cause = cause.__cause__ or cause.__context__
    return type(error).__name__


__all__ = ["MAX_CAUSES", "error_text"]
