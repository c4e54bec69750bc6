"""Credentials as a narrow bucket policy grants them: object reads, writes and deletes and
bucket listing, but not s3:ListBucketMultipartUploads. The store's clean-up of unfinished
uploads needs that permission; its saves must not.

moto enforces IAM policies once its first few (setup) requests are spent
(INITIAL_NO_AUTH_ACTION_COUNT), so this module runs its own server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
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


# Run in a process of its own: in the suite's workers (checks 26a-26c) the ListObjectsV2 of
# the first save was refused right after an allowed PutObject, against this module's own
# server, though it passed alone, under load and beside all of tests/clients; what a worker
# had left behind from earlier tests was never found. A job is a process of its own too.
SAVES = """
import json, logging, sys
import boto3
from forewarn.clients.checkpoint import CheckpointStore

bucket = sys.argv[1]
warned = []
class Keep(logging.Handler):
    def emit(self, record):
        if "unfinished uploads" in record.getMessage():
            warned.append(record.getMessage())
logging.getLogger("forewarn.checkpoint").addHandler(Keep(logging.WARNING))
try:
    boto3.session.Session().client("s3").list_multipart_uploads(Bucket=bucket)
    listed = "allowed"
except Exception as error:
    listed = str(error)
url = f"s3://{bucket}/run"
store = CheckpointStore(url, keep=1)
# A dead writer's leftover at the step the restarted job saves first.
store.backend.put_small("step-000000000002/model.bin", b"half")
def write(step):
    return lambda gen: gen.write_bytes("model.bin", f"weights-{step}".encode())
saved = [store.flush(step, write(step)).generation.step for step in (2, 3, 4)]
steps = store.steps()
latest = CheckpointStore(url).latest(verify="checksums")
store.close()
print(json.dumps({
    "listed": listed, "saved": saved, "steps": steps, "warned": warned,
    "latest": latest.read_bytes("model.bin").decode() if latest is not None else None,
}))
"""


def test_saves_commit_without_permission_to_list_unfinished_uploads(
    narrow_keys: dict[str, str],
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FOREWARN_"))}
    env.update(narrow_keys)
    done = subprocess.run(
        [sys.executable, "-c", SAVES, BUCKET], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert "AccessDenied" in result["listed"]  # the credentials are the narrow ones
    assert result["saved"] == [2, 3, 4]
    assert result["steps"] == [4]  # retention deleted the older generations
    assert result["latest"] == "weights-4"
    warned = result["warned"]
    assert warned and all("AccessDenied" in message for message in warned), warned
