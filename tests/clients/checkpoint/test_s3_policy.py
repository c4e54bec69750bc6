"""Credentials as a narrow bucket policy grants them: object reads, writes and deletes and
bucket listing, but not s3:ListBucketMultipartUploads. The store's clean-up of unfinished
uploads needs that permission; its saves must not.

moto enforces IAM policies once its first few (setup) requests are spent
(INITIAL_NO_AUTH_ACTION_COUNT), so this module runs its own server."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.checkpoint.testing import loopback_s3_env, moto_server

BUCKET = "ckpt-policy"
SETUP_REQUESTS = 4  # create_user, put_user_policy, create_access_key, create_bucket
POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": f"arn:aws:s3:::{BUCKET}"},
        {
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
            # moto checks DeleteObjects against the bucket, AWS against each key.
            "Resource": [f"arn:aws:s3:::{BUCKET}/*", f"arn:aws:s3:::{BUCKET}"],
        },
    ],
}


@pytest.fixture(scope="module")
def narrow_keys() -> Iterator[dict[str, str]]:
    import boto3

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", str(SETUP_REQUESTS))
        with moto_server() as endpoint:
            env = loopback_s3_env(endpoint)
            for key, value in env.items():
                patch.setenv(key, value)
            # Own sessions: boto3's default one keeps the credentials it first found.
            admin = boto3.session.Session()
            iam = admin.client("iam")
            iam.create_user(UserName="trainer")
            iam.put_user_policy(
                UserName="trainer", PolicyName="checkpoints", PolicyDocument=json.dumps(POLICY)
            )
            created = iam.create_access_key(UserName="trainer")["AccessKey"]
            admin.client("s3").create_bucket(Bucket=BUCKET)
            env["AWS_ACCESS_KEY_ID"] = created["AccessKeyId"]
            env["AWS_SECRET_ACCESS_KEY"] = created["SecretAccessKey"]
            del env["AWS_SESSION_TOKEN"]
            yield env


@pytest.fixture
def narrow_env(narrow_keys: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    for key, value in narrow_keys.items():
        monkeypatch.setenv(key, value)


@pytest.mark.usefixtures("narrow_env")
def test_saves_commit_without_permission_to_list_unfinished_uploads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import boto3

    with pytest.raises(Exception, match="AccessDenied"):
        boto3.session.Session().client("s3").list_multipart_uploads(Bucket=BUCKET)
    url = f"s3://{BUCKET}/run"
    store = CheckpointStore(url, keep=1)
    # A dead writer's leftover at the step the restarted job saves first.
    store.backend.put_small("step-000000000002/model.bin", b"half")
    caplog.set_level(logging.WARNING, logger="forewarn.checkpoint")

    def write(step: int) -> Any:
        return lambda gen: gen.write_bytes("model.bin", f"weights-{step}".encode())

    for step in (2, 3, 4):
        assert store.flush(step, write(step)).generation.step == step
    assert store.steps() == [4]  # retention deleted the older generations
    latest = CheckpointStore(url).latest(verify="checksums")
    assert latest is not None and latest.read_bytes("model.bin") == b"weights-4"
    warned = [r.getMessage() for r in caplog.records if "unfinished uploads" in r.getMessage()]
    assert warned and all("AccessDenied" in message for message in warned), warned
    store.close()


@pytest.mark.usefixtures("narrow_env")
def test_ls_verify_and_prune_read_the_store_without_permission_to_list_uploads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`ls` and `verify` list the steps held only in unfinished uploads too: under such a
    policy they still list the generations (exit 0), `ls` saying once on standard error that
    uploads could not be listed, and `prune` deletes as before."""
    from forewarn.agent.cli import main

    url = f"s3://{BUCKET}/narrow-cli"
    with CheckpointStore(url) as store:
        for step in (1, 2):
            store.flush(step, lambda gen: gen.write_bytes("model.bin", b"w" * 10))
    assert main(["checkpoint", "ls", url]) == 0
    listed = capsys.readouterr()
    assert [line.split()[0] for line in listed.out.splitlines()[1:]] == ["1", "2"], listed
    assert "cannot list the unfinished uploads" in listed.err and "AccessDenied" in listed.err
    assert main(["checkpoint", "verify", url]) == 0
    assert "2 of 2 generations verify" in capsys.readouterr().out
    assert main(["checkpoint", "prune", url, "--keep", "1"]) == 0
    assert capsys.readouterr().out == "deleted step-000000000001\n"
