"""A single-rank S3 save's claim on its step ends with the store or the process that holds
it: closing the store, or the interpreter exiting with the save unfinished, aborts the save
and deletes its claim (a save being committed keeps its own), so the step is not blocked
elsewhere for a lease and no renewal timer outlives the store. Against moto in server mode."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from forewarn.clients.checkpoint import CheckpointStore, CommitError
from support import eventually
from test_s3_two_writers import CLAIM, root_keys, save_here


@pytest.fixture
def url(bucket: str) -> str:
    return f"s3://{bucket}/runs/job-1"


def renewers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("forewarn-claim-")]


def test_closing_the_store_lets_go_of_the_claim_of_a_save_in_flight(url: str) -> None:
    """Before, close() left the claim on S3 and its timer rewriting it every LEASE / 6 s for
    as long as the writer lived: a thread outliving the store, and the step refused to every
    other writer."""
    store = CheckpointStore(url)
    gen = store.save(100)
    gen.write_bytes("a.bin", b"first" * 1000)
    assert CLAIM in root_keys(store)
    store.close()
    assert CLAIM not in root_keys(store)
    eventually(lambda: not renewers(), timeout=10, what="the claim's renewal timer to stop")
    # Without its claim the save must not commit: another writer may hold the step now.
    with pytest.raises(CommitError, match=r"aborted \(the store was closed\)"):
        gen.commit()
    other = CheckpointStore(url)
    save_here(other)
    assert other.get(100, verify="checksums").read_bytes("a.bin") == b"second" * 1000
    other.close()


def test_closing_the_store_leaves_a_save_being_committed_its_claim(
    url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A commit already under way cannot be stopped: its claim is what keeps another writer
    from deleting its files under it, and the commit lets go of it when it ends. close()
    waits for that (see test_close_committing.py)."""
    caplog.set_level(logging.WARNING, logger="forewarn.checkpoint")
    store = CheckpointStore(url)
    gen = store.save(100)
    gen.write_bytes("a.bin", b"first" * 1000)
    protocol = gen._protocol
    real = protocol.commit
    inside, go = threading.Event(), threading.Event()

    def slow_commit(request: object) -> object:
        inside.set()
        assert go.wait(30)
        return real(request)  # type: ignore[arg-type]

    monkeypatch.setattr(protocol, "commit", slow_commit)
    committing = threading.Thread(target=gen.commit)
    committing.start()
    assert inside.wait(30)
    closing = threading.Thread(target=store.close)
    closing.start()
    eventually(
        lambda: "is being committed: waiting" in caplog.text,
        timeout=30,
        what="close() to wait for the commit under way",
    )
    assert CLAIM in root_keys(store), "a commit in progress keeps its claim"
    go.set()
    closing.join(30)
    assert not closing.is_alive()
    assert gen.committed is not None
    assert CLAIM not in root_keys(store)
    committing.join(30)
    assert store.get(100, verify="checksums").read_bytes("a.bin") == b"first" * 1000


EXITING = textwrap.dedent(
    """
    import sys, time
    from forewarn.clients.checkpoint import CheckpointStore, store as store_module

    url, how = sys.argv[1], sys.argv[2]
    store = CheckpointStore(url)
    gen = store.save(100)
    gen.write_bytes("a.bin", b"first" * 1000)
    if how == "hung":
        # An endpoint that stopped answering: the exit waits RELEASE_WITHIN, not the
        # client's timeouts times its retries.
        store_module.RELEASE_WITHIN = 1.0
        client = store.backend.client
        client.get_object = client.delete_object = lambda **_kw: time.sleep(3600)
    print("claimed", flush=True)
    if how == "raise":
        raise RuntimeError("the training loop failed")
    sys.exit(3)
    """
)


@pytest.mark.parametrize("how", ["exit", "raise"])
def test_a_claim_held_at_the_interpreters_exit_is_let_go_of(url: str, how: str) -> None:
    """Before, a save left unfinished at exit (a SystemExit, an exception escaping, outside
    its `with` block) kept its claim on S3 for the whole lease: the job restarted on another
    machine could not save that step for 60 s."""
    child = subprocess.run(
        [sys.executable, "-c", EXITING, url, how], capture_output=True, text=True, timeout=120
    )
    assert "claimed" in child.stdout, child.stderr
    assert child.returncode != 0
    store = CheckpointStore(url)
    assert CLAIM not in root_keys(store), child.stderr
    assert not [key for key in root_keys(store) if key.startswith("step-")]
    save_here(store)
    store.close()


def test_an_exit_is_not_held_by_an_endpoint_that_stopped_answering(url: str) -> None:
    started = time.monotonic()
    child = subprocess.run(
        [sys.executable, "-c", EXITING, url, "hung"], capture_output=True, text=True, timeout=120
    )
    assert "claimed" in child.stdout, child.stderr
    assert child.returncode == 3, child.stderr
    # The interpreter's start and the save take a few seconds here; the hung requests an hour.
    assert time.monotonic() - started < 60
    assert "did not let go of the claims on step-000000000100 within 1 s" in child.stderr


def test_a_forked_child_leaves_its_parents_claims_alone(url: str) -> None:
    import os

    store = CheckpointStore(url)
    gen = store.save(100)
    gen.write_bytes("a.bin", b"first" * 1000)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            store.close()
        except BaseException:
            code = 1
        os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert CLAIM in root_keys(store)
    gen.commit()
    assert CLAIM not in root_keys(store)
    store.close()


def test_commits_look_for_stale_claims_once_per_lease(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every commit listed the store's claims (~25 ms against moto); a claim goes stale only
    a lease after its last renewal, so once per lease per store finds the same ones."""
    from forewarn.clients.checkpoint import s3 as s3_backend
    from forewarn.clients.checkpoint import s3claim

    swept: list[str] = []
    real = s3_backend.remove_stale

    def counted(client: object, bucket: str, root: str) -> int:
        swept.append(root)
        return real(client, bucket, root)

    monkeypatch.setattr(s3_backend, "remove_stale", counted)
    store = CheckpointStore(url)
    for step in (1, 2, 3):
        save_here(store, step=step)
    assert len(swept) == 1, "the first commit looks, the next ones within the lease do not"
    monkeypatch.setattr(s3claim, "LEASE", 1.0)
    steps = iter(range(4, 1000))
    eventually(
        lambda: save_here(store, step=next(steps)) or len(swept) == 2,
        timeout=30,
        what="a commit a lease later to look again",
    )
    store.close()
