"""One line that says what a transport error was.

httpx raises a reset connection as `ReadError('')`: its own message is empty and the reason
(`ConnectionResetError: [Errno 104] Connection reset by peer`) is down its chain of causes.
Logged as `f"{type(error).__name__}: {error}"`, Azure's watcher said `transport: ReadError: `
and nothing more.

Nor does httpx name the address in a connect error (`ConnectError: All connection attempts
failed`): a kubeconfig's server, or a `gcp.url` on a closed port, was not named in `status`.
The endpoint (scheme, host and port, never the userinfo, path or query) of the request an
error carries is added.
"""

from __future__ import annotations

# Causes followed at most: httpx wraps an OS error in two or three layers.
MAX_CAUSES = 8


def error_text(error: BaseException) -> str:
    """`Type: message` of `error`, the message being the first non-empty one along its chain
    of causes (`__cause__`, else `__context__`); the type's name alone when none has one;
    then ` (to scheme://host:port)` when the error carries the request it failed and its
    message does not name that already."""
    text = _message(error)
    endpoint = _endpoint(error)
    return f"{text} (to {endpoint})" if endpoint and endpoint not in text else text


def _endpoint(error: BaseException) -> str | None:
    """The scheme, host and port of the httpx request `error` carries, or None. Duck-typed:
    this module imports no HTTP library (httpx's `request` raises RuntimeError when unset)."""
    try:
        url = error.request.url  # type: ignore[attr-defined]
        # netloc is host[:port] without the userinfo (which may hold a password).
        return f"{url.scheme}://{url.netloc.decode('ascii')}"
    except (AttributeError, RuntimeError, UnicodeDecodeError):
        return None


def _message(error: BaseException) -> str:
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
