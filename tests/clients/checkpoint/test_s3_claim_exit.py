"""A single-rank S3 save whose commit is still running on a daemon thread when the
interpreter exits: the exit waits (at most `RELEASE_WITHIN`) for that commit to end and let
go of its claim, rather than the thread dying mid-commit and leaving the step claimed for a
whole lease, or, on a service without conditional writes (no claim), uncommitted. Against
moto in server mode, behind a proxy that holds the commit's manifest."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from forewarn.clients.checkpoint import CheckpointStore, GenerationExistsError
from s3_proxy import Reply, Request, S3Proxy
from support import eventually
from test_s3_two_writers import CLAIM, NoConditionalWrites, root_keys

# Saves step 100 on a daemon thread (as a `flush(timeout=)` given up, or a caller's own
# thread, does) and exits once the proxy holds that save's manifest: its commit is under way.
COMMITTING = textwrap.dedent(
    """
    import sys, threading, time
    from pathlib import Path
    from forewarn.clients.checkpoint import CheckpointStore, S3Options, s3claim

    url, endpoint, holding = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    # A claim written in another container (another PID namespace) names no process the next
    # save can find gone: only its deletion, or its lease running out, frees the step.
    s3claim._this_process = lambda pid=None: {}
    store = CheckpointStore(url, s3=S3Options(endpoint_url=endpoint))

    def save():
        with store.save(100) as gen:
            gen.write_bytes("a.bin", b"first" * 1000)

    threading.Thread(target=save, daemon=True).start()
    while not holding.exists():
        time.sleep(0.01)
    print("exiting", flush=True)
    sys.exit(3)
    """
)


class HoldingProxy(S3Proxy):
    """Holds the PUT of step 100's manifest until `go` is set; touches `holding` when it
    arrives."""

    def __init__(self, upstream: str, holding: Path) -> None:
        super().__init__(upstream)
        self.holding = holding
        self.go = threading.Event()

    def answer(self, request: Request) -> Reply | None:
        path = request.path.split("?", 1)[0]
        if request.command == "PUT" and path.endswith("/step-000000000100/MANIFEST.json"):
            self.holding.touch()
            self.go.wait(60)
        return None


class UnclaimedHoldingProxy(HoldingProxy):
    """`HoldingProxy` before a service without conditional writes: the save holds no claim."""

    def __init__(self, upstream: str, holding: Path) -> None:
        super().__init__(upstream, holding)
        self.refusing = NoConditionalWrites(upstream)

    def answer(self, request: Request) -> Reply | None:
        return self.refusing.answer(request) or super().answer(request)


@pytest.fixture
def proxy(moto_endpoint: str, tmp_path: Path) -> Iterator[HoldingProxy]:
    with HoldingProxy(moto_endpoint, tmp_path / "holding") as server:
        try:
            yield server
        finally:
            server.go.set()


def exit_while_committing(proxy: HoldingProxy, url: str) -> str:
    """Runs `COMMITTING` against `proxy`, lets the manifest through once the exit is seen
    waiting for it (or the process is gone), checks the exit code; returns the child's stderr."""
    child = subprocess.Popen(
        [sys.executable, "-c", COMMITTING, url, proxy.url, str(proxy.holding)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    errors: list[str] = []
    assert child.stderr is not None and child.stdout is not None
    reader = threading.Thread(target=lambda: errors.extend(child.stderr or []), daemon=True)
    reader.start()
    try:
        assert child.stdout.readline().strip() == "exiting", "".join(errors)
        eventually(
            lambda: child.poll() is not None or "waiting" in "".join(errors),
            timeout=60,
            what="the exit to wait for the commit in flight, or the process to end",
        )
        proxy.go.set()
        assert child.wait(60) == 3
    finally:
        proxy.go.set()
        if child.poll() is None:
            child.kill()
            child.wait()
    reader.join(10)
    log = "".join(errors)
    assert re.search(
        r"step-000000000100 in s3://\S+ is being committed: waiting up to \d+ s", log
    ), log
    return log


def assert_step_100_committed(store: CheckpointStore, log: str) -> None:
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 100, log
    assert latest.read_bytes("a.bin") == b"first" * 1000
    # Refused as committed (generations are immutable), not as claimed by another writer.
    with pytest.raises(GenerationExistsError):
        store.save(100)


def test_an_exit_waits_for_a_commit_in_flight_to_end_and_let_go_of_its_claim(
    proxy: HoldingProxy, bucket: str
) -> None:
    """Before, the exit left a committing save to its daemon thread, which died with the
    process mid-commit: the step stayed uncommitted and claimed for the lease (60 s), so the
    job restarted at once in a new container was refused the step it had been saving."""
    url = f"s3://{bucket}/runs/job-1"
    log = exit_while_committing(proxy, url)
    store = CheckpointStore(url)
    assert CLAIM not in root_keys(store), log
    assert_step_100_committed(store, log)
    store.close()


def test_an_exit_waits_for_an_unclaimed_commit_in_flight_to_end(
    moto_endpoint: str, bucket: str, tmp_path: Path
) -> None:
    """On a service without conditional writes a save holds no claim, and the exit waited
    only for claimed saves: this one's thread died with the process mid-commit, and the step
    it was saving (a reclaim's last, after `flush(timeout=)` gave up) was lost."""
    url = f"s3://{bucket}/runs/job-1"
    with UnclaimedHoldingProxy(moto_endpoint, tmp_path / "holding") as proxy:
        log = exit_while_committing(proxy, url)
    assert proxy.refusing.refused == 1, log
    store = CheckpointStore(url)
    assert_step_100_committed(store, log)
    store.close()
