"""A real S3-compatible server on loopback for tests and benchmarks: moto in server mode.

Needs `moto[server]` (in forewarn's `test` extra) for the server, imported only when one
starts. The package itself imports this module only for the demo's slow link
(`DelegatingBackend`), which needs nothing but the standard library.
"""

from __future__ import annotations

import copy
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from .backend import Backend, ObjectWriter, UnfinishedUpload


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def loopback_s3_env(endpoint: str) -> dict[str, str]:
    """Dummy credentials and the loopback endpoint, so nothing can reach real AWS."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "NO_PROXY": "*",
    }


# Run as `python -c _SERVE_MOTO PARENT_PID ARGV...`: the server ends with the process that
# started it (`exit_with_parent`).
_SERVE_MOTO = (
    "import sys; from forewarn.clients.checkpoint.testing import exit_with_parent, serve_moto; "
    "exit_with_parent(int(sys.argv.pop(1))); serve_moto()"
)
# How often the server looks whether the process that started it is still there.
PARENT_CHECK_SECONDS = 0.5


def exit_with_parent(parent: int, interval: float = PARENT_CHECK_SECONDS) -> None:
    """End this process (at once, exit 0) once `parent` is no longer its parent: that
    process died, by any means. A pytest run that ended in an INTERNALERROR never ran the
    session fixture's finalizer, and its moto server ran on, holding its port and memory,
    until found by hand. Watched by the parent pid, not PR_SET_PDEATHSIG, which fires when
    the starting *thread* ends, nor a pipe, which a fork of the parent keeps open."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os._exit(0)

    if os.getppid() != parent:  # gone already, before this process looked
        os._exit(0)
    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def serve_moto(argv: list[str] | None = None) -> None:
    """`moto_server ARGV`, with moto's list of its own services read once. Its server asked
    for that list twice a request, each time listing and stat-ing every entry of moto's
    package folder: a third of its CPU for a small S3 request (2.3 ms a request, 1.6 with the
    list read once). The list cannot change while the server runs.

    `--fd N` serves on the listening socket N handed over by the starting process (what
    `moto_server` does) and writes one line to stdout once it serves."""
    import moto.backends

    listed = getattr(moto.backends, "list_of_moto_modules", None)
    if listed is not None:  # a moto that has no such lookup serves as it is
        services = tuple(listed())
        setattr(moto.backends, "list_of_moto_modules", lambda: services)  # noqa: B010
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--fd"]:
        _serve_on(int(args[1]))
        return
    from moto.server import main

    main(args)


def _serve_on(fd: int) -> None:
    """moto's own server (`moto.server.main`'s application and request handler) on an
    inherited listening socket: it binds nothing, so no other process can hold its port."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    app = DomainDispatcherApplication(create_backend_app)
    server = make_server(
        "127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler, fd=fd
    )
    # moto builds some URLs from MOTO_PORT, as `moto_server -p PORT` sets it.
    os.environ.setdefault("MOTO_PORT", str(server.server_address[1]))
    print("serving", flush=True)
    server.serve_forever()


@contextmanager
def moto_server(timeout: float = 30.0) -> Iterator[str]:
    """Run moto's server on 127.0.0.1 and a port of its own (`serve_moto`); yields its
    endpoint URL. The server stops on leaving the block, and also when this process dies
    without leaving it (`exit_with_parent`).

    The listening socket is bound here, on port 0, and handed to the server: a port number
    picked and let go before the server bound it could be taken by another server in between,
    and that server was yielded as the endpoint (any connect counted as started)."""
    import selectors

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        port = int(listener.getsockname()[1])
        fd = listener.fileno()
        process = subprocess.Popen(
            [sys.executable, "-c", _SERVE_MOTO, str(os.getpid()), "--fd", str(fd)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            pass_fds=(fd,),
        )
    try:
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            ready = selector.select(timeout)
        if not ready or not process.stdout.readline():
            raise RuntimeError("moto_server did not start (is moto[server] installed?)")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


class DelegatingBackend(Backend):
    """Wraps another backend (the store's `backend=` seam): subclass it and override a call
    to inject a fault (a full disk, a slow or failing upload)."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.url = inner.url

    @property
    def identity(self) -> str:
        return self.inner.identity

    @property
    def written_despite_error(self) -> str:  # type: ignore[override]
        return self.inner.written_despite_error

    def writer(self, key: str, on_done: Any = None) -> ObjectWriter:
        return self.inner.writer(key, on_done)

    def put_small(self, key: str, data: bytes) -> None:
        self.inner.put_small(key, data)

    def get_small(self, key: str) -> bytes | None:
        return self.inner.get_small(key)

    def open_read(self, key: str) -> IO[bytes]:
        return self.inner.open_read(key)

    def list_children(self, prefix: str) -> list[str]:
        return self.inner.list_children(prefix)

    def list_sizes(self, prefix: str) -> dict[str, int]:
        return self.inner.list_sizes(prefix)

    def size_of(self, key: str) -> int | None:
        return self.inner.size_of(key)

    def sizes_of(self, prefix: str, names: list[str]) -> dict[str, int]:
        return self.inner.sizes_of(prefix, names)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def delete_tree(self, prefix: str) -> None:
        self.inner.delete_tree(prefix)

    def make_durable(self, prefix: str) -> None:
        self.inner.make_durable(prefix)

    def local_path(self, key: str) -> Path | None:
        return self.inner.local_path(key)

    def download(self, key: str, destination: Path, like: str, progress: Any) -> str:
        return self.inner.download(key, destination, like, progress)

    def abort_stale_uploads(
        self, keep_prefix: str | None, *, older_than: float = 0.0, dead_prefix: str | None = None
    ) -> int:
        return self.inner.abort_stale_uploads(
            keep_prefix, older_than=older_than, dead_prefix=dead_prefix
        )

    def abort_left_uploads(self) -> int:
        return self.inner.abort_left_uploads()

    def remove_stale_temps(self, key: str, *, older_than: float) -> int:
        return self.inner.remove_stale_temps(key, older_than=older_than)

    def remove_dead_temps(self, prefix: str, names: list[str]) -> int:
        return self.inner.remove_dead_temps(prefix, names)

    def note_writer(self) -> None:
        self.inner.note_writer()

    def claim(self, prefix: str, *, rank: int = 0) -> Callable[[], None]:
        return self.inner.claim(prefix, rank=rank)

    def claimed(self, prefix: str) -> bool:
        return self.inner.claimed(prefix)

    def delete_unclaimed(self, prefix: str) -> bool:
        return self.inner.delete_unclaimed(prefix)

    def writer_gone(self, prefix: str) -> bool:
        return self.inner.writer_gone(prefix)

    def usage(self, prefix: str) -> int:
        return self.inner.usage(prefix)

    def unfinished_uploads(self, *, sizes: bool = True) -> list[UnfinishedUpload]:
        return self.inner.unfinished_uploads(sizes=sizes)

    def remove_stale_claims(self) -> int:
        return self.inner.remove_stale_claims()

    def within(self, seconds: float) -> Backend:
        # The same faults, over the wrapped storage's bounded requests.
        bounded = copy.copy(self)
        bounded.inner = self.inner.within(seconds)
        return bounded

    def close(self) -> None:
        # The store closes the backend it was given: the wrapped one holds the threads and
        # connections.
        self.inner.close()
