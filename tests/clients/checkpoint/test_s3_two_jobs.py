"""Two jobs on one prefix: the next job (a replacement pod, a restarted unit) starts while the
one before it is still writing its final save. The new job's first save aborts dead uploads,
and must leave that one alone. moto stamps every upload `Initiated` 2010-11-10; a loopback
proxy in front of it plays AWS, answering ListMultipartUploads with the time each upload was
really created (the test backdates one to play a writer killed long ago)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options
from s3_proxy import Reply, Request, S3Proxy
from support import eventually


class InitiatedProxy(S3Proxy):
    """Records when each multipart upload was created and reports that time (or the one set
    in `initiated`) as the upload's `Initiated`, with this proxy's own Date."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.initiated: dict[str, datetime] = {}

    def forwarded(self, request: Request, reply: Reply) -> Reply | None:
        if "uploads" not in request.query:
            return reply
        if request.command == "POST":
            found = re.search(rb"<UploadId>(.*?)</UploadId>", reply.data)
            if found:
                self.initiated[found.group(1).decode()] = datetime.now(timezone.utc)
        elif request.command == "GET":
            data = re.sub(rb"<Upload>.*?</Upload>", self._stamp, reply.data, flags=re.DOTALL)
            return Reply(reply.status, reply.headers, data)
        return reply

    def _stamp(self, match: re.Match[bytes]) -> bytes:
        upload = match.group(0)
        found = re.search(rb"<UploadId>(.*?)</UploadId>", upload)
        when = self.initiated.get(found.group(1).decode()) if found else None
        if when is None:
            return upload
        stamp = when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        return re.sub(
            rb"<Initiated>.*?</Initiated>", f"<Initiated>{stamp}</Initiated>".encode(), upload
        )


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[InitiatedProxy]:
    with InitiatedProxy(moto_endpoint) as server:
        yield server


def uploads(client: Any, bucket: str) -> list[str]:
    reply = client.list_multipart_uploads(Bucket=bucket)
    return sorted(upload["Key"] for upload in reply.get("Uploads", []))


def test_the_next_jobs_first_save_spares_the_previous_jobs_final_save(
    proxy: InitiatedProxy, bucket: str
) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=proxy.url)
    url = f"s3://{bucket}/run"
    options = S3Options(endpoint_url=proxy.url, part_size=5 << 20)
    old_job = CheckpointStore(url, s3=options)
    old_job.flush(90, lambda gen: gen.write_bytes("model.bin", b"weights-90"))
    # Left two hours ago by a writer killed mid-upload: dead.
    dead = client.create_multipart_upload(Bucket=bucket, Key="run/step-000000000050/model.bin")
    proxy.initiated[dead["UploadId"]] -= timedelta(hours=2)
    # The old job's final save, still uploading (one part sent) when the next job starts.
    final = old_job.save(100)
    stream = final.open("model.bin")
    data = os.urandom(6 << 20)
    stream.write(data)
    assert uploads(client, bucket) == [
        "run/step-000000000050/model.bin",
        "run/step-000000000100/model.bin",
    ]

    new_job = CheckpointStore(url, s3=options)
    new_job.flush(95, lambda gen: gen.write_bytes("model.bin", b"weights-95"))
    assert uploads(client, bucket) == ["run/step-000000000100/model.bin"]

    stream.write(b"the end")
    stream.close()
    final.__exit__(None, None, None)
    assert final.committed is not None
    got = new_job.get(100, verify="checksums").read_bytes("model.bin")
    assert got == data + b"the end"


def test_a_single_rank_save_aborts_its_own_steps_upload_however_recent(
    proxy: InitiatedProxy, bucket: str
) -> None:
    """A job killed while uploading step 7 and resumed at once saves 7 again: that upload is
    a minute old, and dead (a single rank is the step's only writer)."""
    import boto3

    client = boto3.client("s3", endpoint_url=proxy.url)
    client.create_multipart_upload(Bucket=bucket, Key="run/step-000000000007/model.bin")
    store = CheckpointStore(f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url))
    store.flush(7, lambda gen: gen.write_bytes("model.bin", b"weights-7"))
    assert uploads(client, bucket) == []
    assert store.get(7, verify="checksums").read_bytes("model.bin") == b"weights-7"


def test_a_live_writers_upload_older_than_the_bound_is_not_aborted(
    proxy: InitiatedProxy, bucket: str
) -> None:
    """A save on another machine uploading a large step for more than an hour (a terabyte
    at 200 MB/s) still renews its claim: the next job's first save aborted its upload as a
    killed writer's by its age alone, and that save failed at its next part. An upload as
    old under no live claim is still aborted."""
    import json

    import boto3

    client = boto3.client("s3", endpoint_url=proxy.url)
    live = client.create_multipart_upload(Bucket=bucket, Key="run/step-000000000100/model.bin")
    dead = client.create_multipart_upload(Bucket=bucket, Key="run/step-000000000050/model.bin")
    for upload in (live, dead):
        proxy.initiated[upload["UploadId"]] -= timedelta(hours=2)
    claim = {"holder": "pid 4242 on another-host", "lease": 60.0, "token": "elsewhere"}
    client.put_object(
        Bucket=bucket, Key="run/.step-000000000100.claim", Body=json.dumps(claim).encode()
    )
    new_job = CheckpointStore(f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url))
    new_job.flush(200, lambda gen: gen.write_bytes("model.bin", b"weights-200"))
    assert uploads(client, bucket) == ["run/step-000000000100/model.bin"]


def test_aborting_uploads_by_hand_spares_a_live_writers(
    bucket: str, s3_env: dict[str, str]
) -> None:
    """`store.abort_stale_uploads()` (`forewarn checkpoint prune --abort-uploads`) aborted
    every upload whatever its age, a job's save in progress on another machine too, run
    while it saved: that save failed at its next part. A live writer's claim spares it."""
    import json

    import boto3

    client = boto3.client("s3")
    client.create_multipart_upload(Bucket=bucket, Key="run/step-000000000100/model.bin")
    client.create_multipart_upload(Bucket=bucket, Key="run/step-000000000050/model.bin")
    claim = {"holder": "pid 4242 on another-host", "lease": 60.0, "token": "elsewhere"}
    client.put_object(
        Bucket=bucket, Key="run/.step-000000000100.claim", Body=json.dumps(claim).encode()
    )
    assert CheckpointStore(f"s3://{bucket}/run").abort_stale_uploads() == 1
    assert uploads(client, bucket) == ["run/step-000000000100/model.bin"]


# One rank of another job's two-rank save of step 100 (the ranks meet through the store):
# its file's upload under way (one part sent) until the go file appears.
UPLOADING_RANK = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from forewarn.clients.checkpoint import CheckpointStore, S3Options

    url, rank, ready, go = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    options = S3Options(part_size=5 << 20)
    with CheckpointStore(url, s3=options, poll_interval=0.02) as store:
        with store.save(100, rank=rank, world_size=2) as gen:
            with gen.open(f"model-{rank}.bin") as stream:
                stream.write(os.urandom(6 << 20))
                ready.touch()
                while not go.exists():
                    time.sleep(0.01)
                stream.write(b"the end")
    print("committed", flush=True)
    """
)


def test_aborting_uploads_by_hand_spares_another_jobs_save_of_several_ranks(
    bucket: str, s3_env: dict[str, str], tmp_path: Path
) -> None:
    """A save of several ranks held no claim: `abort_stale_uploads()` run while another job
    saved that way aborted its ranks' uploads, and its commit failed. Its rank 0's claim now
    spares them."""
    import boto3

    client = boto3.client("s3")
    url = f"s3://{bucket}/run"
    go = tmp_path / "go"
    readies = [tmp_path / f"ready{rank}" for rank in (0, 1)]
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", UPLOADING_RANK, url, str(rank), str(readies[rank]), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )
        for rank in (0, 1)
    ]
    try:
        eventually(lambda: all(ready.exists() for ready in readies) or any_ended(ranks), timeout=60)
        for rank in ranks:
            assert rank.poll() is None, rank.communicate()
        assert CheckpointStore(url).abort_stale_uploads() == 0
        assert uploads(client, bucket) == [
            "run/step-000000000100/model-0.bin",
            "run/step-000000000100/model-1.bin",
        ]
        go.touch()
        for rank in ranks:
            out, err = rank.communicate(timeout=60)
            assert rank.returncode == 0, err
            assert "committed" in out
        assert CheckpointStore(url).get(100, verify="checksums").world_size == 2
    finally:
        for rank in ranks:
            rank.kill()
            rank.wait()


def any_ended(processes: list[subprocess.Popen[str]]) -> bool:
    return any(process.poll() is not None for process in processes)


def test_a_later_save_aborts_an_upload_the_first_one_spared_once_it_is_stale(
    proxy: InitiatedProxy, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first save of a job spares an upload younger than STALE_UPLOAD_AGE (the job
    before it may still be uploading its final save). When that job was then killed
    mid-upload, its upload (its parts billed) stayed for as long as this job ran: only a
    process's first save looked, and retention never lists a generation with no object. A
    later save looks again once UPLOAD_SWEEP_INTERVAL has passed since."""
    import boto3
    from forewarn.clients.checkpoint import store as store_module

    client = boto3.client("s3", endpoint_url=proxy.url)
    # The job before this one, its final save of step 8 still uploading when this one starts.
    orphan = client.create_multipart_upload(Bucket=bucket, Key="run/step-000000000008/state.pt")
    store = CheckpointStore(f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url))
    store.flush(1, lambda gen: gen.write_bytes("state.pt", b"one"))
    assert uploads(client, bucket) == ["run/step-000000000008/state.pt"]  # young: spared
    # That job was killed mid-upload; this one trains on, and the upload grows old.
    proxy.initiated[orphan["UploadId"]] -= timedelta(hours=2)
    store.flush(2, lambda gen: gen.write_bytes("state.pt", b"two"))
    assert uploads(client, bucket) == ["run/step-000000000008/state.pt"]  # not due yet
    monkeypatch.setattr(store_module, "UPLOAD_SWEEP_INTERVAL", 0.0)  # the interval passed
    store.flush(3, lambda gen: gen.write_bytes("state.pt", b"three"))
    assert uploads(client, bucket) == []
    store.close()


# A save of step 40 killed while its only file is a multipart upload: one 8 MiB part sent,
# the rest of the file still being written.
KILLED_IN_AN_UPLOAD = textwrap.dedent(
    """
    import os, sys, time
    from forewarn.clients.checkpoint import CheckpointStore, S3Options

    store = CheckpointStore(sys.argv[1], s3=S3Options(endpoint_url=sys.argv[2]))
    store.flush(30, lambda gen: gen.write_bytes("model.bin", b"x" * 1000))
    with store.save(40) as gen:
        with gen.open("model.bin") as stream:
            stream.write(os.urandom(9 << 20))  # one part and a bit: a multipart upload
            print("writing", flush=True)
            time.sleep(300)  # the scenario: a save under way until the test kills it
    """
)


def test_ls_shows_a_save_whose_bytes_are_only_in_an_upload_with_its_age(
    proxy: InitiatedProxy, bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A save SIGKILLed while its only file was a multipart upload left no object under its
    generation: `ls` listed step 30 alone, `verify` and `prune --dry-run` said nothing of it,
    and only `prune --abort-uploads` found (and aborted) it, 8 MiB held in the bucket. Found:
    a 9 MiB model.bin killed after its first part, `ls` printed only `30  1000 B ... LATEST`.
    `ls` now lists the step as partial, with its uploads, their age and bytes."""
    import boto3
    from forewarn.agent.cli import main

    url = f"s3://{bucket}/run"
    client = boto3.client("s3", endpoint_url=proxy.url)
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_IN_AN_UPLOAD, url, proxy.url],
        stdout=subprocess.PIPE,
        text=True,
    )

    def part_sent() -> bool:
        listed = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        return bool(listed) and bool(
            client.list_parts(
                Bucket=bucket, Key=listed[0]["Key"], UploadId=listed[0]["UploadId"]
            ).get("Parts")
        )

    try:
        assert writer.stdout is not None and writer.stdout.readline() == "writing\n"
        eventually(part_sent, timeout=60)
        assert main(["checkpoint", "ls", url, "--endpoint-url", proxy.url]) == 0
        live = capsys.readouterr().out.splitlines()
    finally:
        writer.kill()  # the platform's SIGKILL
        writer.wait(30)
    assert len(live) == 3, live
    assert live[2].split()[:3] == ["40", "8.0", "MiB"], live
    assert "partial (being saved; 1 upload in flight, started " in live[2], live
    for upload in proxy.initiated:
        proxy.initiated[upload] -= timedelta(minutes=3)  # the kill, 3 minutes ago
    assert main(["checkpoint", "ls", url, "--endpoint-url", proxy.url]) == 0
    dead = capsys.readouterr().out.splitlines()
    assert "partial (writer gone; 1 upload abandoned, started 3m ago)" in dead[2], dead
    assert main(["checkpoint", "ls", url, "--endpoint-url", proxy.url, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["step"], r["state"], r["writer"], r["size"]) for r in rows] == [
        (30, "ok", None, 1000),
        (40, "partial", "gone", 8 << 20),
    ]
    assert [(u["file"], u["size"], round(u["age_seconds"] / 60)) for u in rows[1]["uploads"]] == [
        ("model.bin", 8 << 20, 3)
    ]
    assert rows[0]["uploads"] == []


def test_prune_removes_a_killed_save_whose_bytes_are_only_in_an_upload(
    proxy: InitiatedProxy, bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ls` lists such a save `partial (writer gone; 1 upload abandoned, ...)`, which for a
    save with objects means `prune` removes it; `prune --keep 1` listed generations by their
    objects alone and said `deleted nothing`, the 8 MiB part left for `--abort-uploads`."""
    import boto3
    from forewarn.agent.cli import main

    url = f"s3://{bucket}/run"
    client = boto3.client("s3", endpoint_url=proxy.url)
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_IN_AN_UPLOAD, url, proxy.url],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "writing\n"
        eventually(lambda: bool(uploads(client, bucket)), timeout=60)
    finally:
        writer.kill()  # the platform's SIGKILL
        writer.wait(30)
    assert main(["checkpoint", "prune", url, "--endpoint-url", proxy.url, "--keep", "1"]) == 0
    assert capsys.readouterr().out == "deleted step-000000000040\n"
    assert uploads(client, bucket) == []
    assert main(["checkpoint", "ls", url, "--endpoint-url", proxy.url, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["step"], r["state"]) for r in rows] == [(30, "ok")]
