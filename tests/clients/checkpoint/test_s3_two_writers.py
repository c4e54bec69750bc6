"""Two processes saving the same step into one S3 store (a job restarted while the old one
still flushes its final save, two jobs given one prefix), against moto in server mode: the
second is refused while the first's claim is alive and touches nothing of its save; a killed
writer's claim is taken over at once when it ran on this machine, else once its lease ran
out, and removed by a later commit when nobody saves its step again. The lease is cut to
seconds here, in both processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore, CommitError, S3Options, s3claim
from s3_proxy import XML, Reply, Request, S3Proxy
from support import eventually

LEASE = 4.0
CLAIM = ".step-000000000100.claim"

# Writes a.bin, says so, waits for the go file, writes b.bin and commits (or is killed first).
WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from forewarn.clients.checkpoint import CheckpointStore, s3claim

    url, ready, go, lease = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    s3claim.LEASE = float(lease)
    with CheckpointStore(url).save(100) as gen:
        gen.write_bytes("a.bin", b"first" * 1000)
        ready.touch()
        while not go.exists():
            time.sleep(0.01)
        gen.write_bytes("b.bin", b"first" * 1000)
    print("committed", flush=True)
    """
)


@pytest.fixture
def url(bucket: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(s3claim, "LEASE", LEASE)
    return f"s3://{bucket}/runs/job-1"


def start_writer(tmp_path: Path, url: str) -> tuple[subprocess.Popen[str], Path]:
    ready, go = tmp_path / "ready", tmp_path / "go"
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, url, str(ready), str(go), str(LEASE)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    eventually(lambda: ready.exists() or child.poll() is not None, timeout=60)
    assert child.poll() is None, child.communicate()
    return child, go


def save_here(store: CheckpointStore, step: int = 100) -> None:
    with store.save(step) as gen:
        gen.write_bytes("a.bin", b"second" * 1000)
        gen.write_bytes("b.bin", b"second" * 1000)


def root_keys(store: CheckpointStore) -> list[str]:
    import boto3

    bucket, prefix = store.url[len("s3://") :].split("/", 1)
    listed = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/", Delimiter="/")
    return sorted(item["Key"][len(prefix) + 1 :] for item in listed.get("Contents", []))


def claim_written(store: CheckpointStore) -> Any:
    import boto3

    bucket, prefix = store.url[len("s3://") :].split("/", 1)
    return boto3.client("s3").head_object(Bucket=bucket, Key=f"{prefix}/{CLAIM}")["LastModified"]


def test_a_second_writer_of_a_step_another_process_is_saving_is_refused(
    tmp_path: Path, url: str
) -> None:
    """Before, the second writer deleted the first's a.bin as a dead writer's leftover and
    wrote its own beside the first's: the first failed, or committed bytes not its own."""
    child, go = start_writer(tmp_path, url)
    try:
        store = CheckpointStore(url)
        refused = rf"another process \(pid {child.pid} on .*\) is saving step-0+100 in {url}"
        with pytest.raises(CommitError, match=refused):
            save_here(store)
        # Its holder renews the claim: a save long past one lease is still refused.
        created = claim_written(store)
        eventually(
            lambda: (claim_written(store) - created).total_seconds() >= LEASE,
            timeout=60,
            what="the claim to be renewed past one lease",
        )
        with pytest.raises(CommitError, match=refused):
            save_here(store)
        go.touch()
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        assert "committed" in out
    finally:
        child.kill()
        child.wait()
    generation = store.latest(verify="checksums")
    assert generation is not None and generation.step == 100
    assert generation.read_bytes("a.bin") == b"first" * 1000
    assert generation.read_bytes("b.bin") == b"first" * 1000
    assert CLAIM not in root_keys(store), "the writer let go of its claim"


def test_a_step_whose_writer_was_killed_on_this_machine_is_saved_at_once(
    tmp_path: Path, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Its claim names a process of this boot and PID namespace that is gone: the job
    restarted there (`test_kill.py` restarts one after every kill) need not wait out the lease."""
    child, _go = start_writer(tmp_path, url)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    store = CheckpointStore(url)
    assert CLAIM in root_keys(store), "a killed writer cannot let go of its claim"
    save_here(store)
    assert f"from pid {child.pid} on " in caplog.text and "whose process is gone" in caplog.text
    generation = store.get(100, verify="checksums")
    assert generation.read_bytes("a.bin") == b"second" * 1000
    assert CLAIM not in root_keys(store)


def claim_from_elsewhere(store: CheckpointStore) -> None:
    """The claim a writer killed on another machine (or in another container) left."""
    import boto3

    bucket, prefix = store.url[len("s3://") :].split("/", 1)
    body = {
        "holder": "pid 4242 on another-node",
        "started": "2026-12-03T06:00:00+00:00",
        "lease": LEASE,
        "token": "0" * 32,
        "pid": 4242,
        "pid_started": 1,
        "boot": "another-boot",
        "pid_namespace": 1,
    }
    boto3.client("s3").put_object(
        Bucket=bucket, Key=f"{prefix}/{CLAIM}", Body=json.dumps(body).encode()
    )


def test_a_step_whose_writer_was_killed_elsewhere_is_saved_once_its_claim_expires(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(url)
    claim_from_elsewhere(store)
    # Within its lease the claim may be a live writer's that stopped answering for a moment.
    monkeypatch.setattr(s3claim, "LEASE", 600.0)
    with pytest.raises(CommitError, match=r"another process \(pid 4242 on another-node\)"):
        save_here(store)
    monkeypatch.setattr(s3claim, "LEASE", LEASE)

    def saved() -> bool:
        try:
            save_here(store)
        except CommitError as exc:
            assert "pid 4242 on another-node" in str(exc), exc
            return False
        return True

    eventually(saved, timeout=60, interval=0.2, what="the killed writer's claim to expire")
    generation = store.get(100, verify="checksums")
    assert generation.read_bytes("a.bin") == b"second" * 1000
    assert CLAIM not in root_keys(store)


def test_a_killed_writers_claim_on_a_step_never_saved_again_is_removed_by_a_commit(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(url)
    claim_from_elsewhere(store)
    # A commit within the lease leaves it: it may be a live writer's.
    monkeypatch.setattr(s3claim, "LEASE", 600.0)
    save_here(store, step=101)
    assert CLAIM in root_keys(store)
    monkeypatch.setattr(s3claim, "LEASE", LEASE)

    def swept() -> bool:
        step = max(store.steps()) + 1
        save_here(store, step=step)
        return CLAIM not in root_keys(store)

    eventually(swept, timeout=60, interval=0.5, what="a commit to remove the expired claim")
    assert [key for key in root_keys(store) if key.endswith(".claim")] == []


class NoConditionalWrites(S3Proxy):
    """A service without conditional writes that refuses the headers (501 NotImplemented)."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.refused = 0

    def answer(self, request: Request) -> Reply | None:
        names = {name.lower() for name in request.headers}
        if "if-none-match" not in names and "if-match" not in names:
            return None
        self.refused += 1
        return Reply(501, XML, NOT_IMPLEMENTED)


NOT_IMPLEMENTED = (
    b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>NotImplemented</Code><Message>A header "
    b"you provided implies functionality that is not implemented.</Message></Error>"
)


def test_a_service_without_conditional_writes_still_saves_and_says_so_once(
    moto_endpoint: str, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with NoConditionalWrites(moto_endpoint) as proxy:
        store = CheckpointStore(url, s3=S3Options(endpoint_url=proxy.url))
        for step in (1, 2):
            save_here(store, step=step)
        assert store.steps() == [1, 2]
        assert proxy.refused == 1, "asked once, then saves go unclaimed"
        said = [record.getMessage() for record in caplog.records]
        assert sum("refuses conditional writes (NotImplemented)" in line for line in said) == 1
        assert [key for key in root_keys(store) if key.endswith(".claim")] == []
        store.close()


def test_a_botocore_without_conditional_writes_still_saves_and_says_so_once(
    url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """boto3 1.28, which the aws extra allows, refuses IfNoneMatch as an unknown parameter:
    passing it failed every save."""
    store = CheckpointStore(url)
    model = store.backend.client.meta.service_model
    real = model.operation_model

    class Old:
        """The operation as an older botocore has it: none of the If* parameters (botocore
        then refuses them itself, as the old one does)."""

        def __init__(self, operation: Any) -> None:
            self._operation = operation
            members = operation.input_shape.members
            self.input_shape = type(
                "Shape",
                (),
                {
                    "members": {k: v for k, v in members.items() if not k.startswith("If")},
                    "__getattr__": lambda _self, name: getattr(operation.input_shape, name),
                },
            )()

        def __getattr__(self, name: str) -> Any:
            return getattr(self._operation, name)

    monkeypatch.setattr(model, "operation_model", lambda name: Old(real(name)))
    for step in (1, 2):
        save_here(store, step=step)
    assert store.steps() == [1, 2]
    said = [record.getMessage() for record in caplog.records]
    assert sum("cannot make conditional writes" in line for line in said) == 1
    assert [key for key in root_keys(store) if key.endswith(".claim")] == []
