"""Credentials that expire while a save uploads (a session token's hour ran out): the save
fails, nothing of it is committed, and what it could not remove without credentials (its
upload, its claim) is taken over by the next save of the step once they are renewed."""

from __future__ import annotations

import logging
import os

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options
from forewarn.clients.checkpoint.s3 import MIN_PART
from s3_proxy import XML, Reply, Request, S3Proxy
from support import LazyModule

boto3 = LazyModule("boto3")

_EXPIRED = (
    b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>ExpiredToken</Code>"
    b"<Message>The provided token has expired.</Message></Error>"
)


class Expiring(S3Proxy):
    """Answers every request ExpiredToken while `expired` is set."""

    expired = False

    def answer(self, request: Request) -> Reply | None:
        return Reply(400, XML, _EXPIRED) if self.expired else None


def _failed_save_of_step_2(proxy: Expiring, bucket: str) -> CheckpointStore:
    """A store through `proxy` that saved step 1, then failed to save step 2: the token's
    hour ended mid-file, after its first part (the proxy is left answering ExpiredToken)."""
    store = CheckpointStore(
        f"s3://{bucket}/run",
        s3=S3Options(endpoint_url=proxy.url, part_size=MIN_PART, concurrency=1),
    )
    store.flush(1, lambda gen: gen.write_bytes("model.bin", b"weights-1"))

    def write(gen: object) -> None:
        with gen.open("model.bin") as stream:  # type: ignore[attr-defined]
            stream.write(os.urandom(MIN_PART))
            proxy.expired = True  # the token's hour ends mid-file
            stream.write(os.urandom(MIN_PART + 1000))

    with pytest.raises(Exception, match="ExpiredToken"):
        store.flush(2, write)
    return store


def test_a_save_whose_credentials_expire_is_taken_over_by_the_next_one(
    moto_endpoint: str, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The failed save's upload, which it could not abort, went unsaid. The next save's
    warning said the claim was `left by an earlier failed save of this
    process (a writer that was killed)`: no writer was killed (found: a fault proxy in front
    of moto answering ExpiredToken from a save's second part on)."""
    caplog.set_level(logging.WARNING, "forewarn.checkpoint")
    with Expiring(moto_endpoint) as proxy:
        store = _failed_save_of_step_2(proxy, bucket)
        # Its upload could not be aborted: said, not suppressed (its parts stay billed).
        assert (
            f"could not abort the upload of run/step-000000000002/model.bin in s3://{bucket}/run"
            in caplog.text
        )
        proxy.expired = False  # renewed
        latest = store.latest(verify="checksums")
        assert latest is not None and latest.step == 1
        caplog.clear()
        store.flush(2, lambda gen: gen.write_bytes("model.bin", b"weights-2"))
        store.close()
    said = [record.getMessage() for record in caplog.records if "took over" in record.getMessage()]
    assert len(said) == 1, caplog.text
    assert "left by an earlier failed save of this process" in said[0]
    assert "killed" not in said[0]
    # The failed save's upload could not be aborted without credentials; the next save
    # aborted it (before, it stood until this store's next sweep, UPLOAD_SWEEP_INTERVAL).
    s3 = boto3.client("s3", endpoint_url=moto_endpoint)
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    latest = CheckpointStore(f"s3://{bucket}/run").latest(verify="checksums")
    assert latest is not None and latest.read_bytes("model.bin") == b"weights-2"


@pytest.mark.parametrize("next_step", [2, 3])
def test_a_failed_saves_upload_it_could_not_abort_is_aborted_by_the_next_save(
    moto_endpoint: str, bucket: str, caplog: pytest.LogCaptureFixture, next_step: int
) -> None:
    """Its parts stood stored and billed until this store's next sweep of unfinished uploads
    (UPLOAD_SWEEP_INTERVAL, 600 s) or `prune --abort-uploads`, though the store knew its
    upload: the next save (a retry of the step, or the next step) aborts it by its upload ID,
    which no other writer uses (found: a fault proxy answering ExpiredToken mid-file, then
    renewed; list_multipart_uploads still showed run/step-000000000002/model.bin after the
    next save committed)."""
    caplog.set_level(logging.INFO, "forewarn.checkpoint")
    s3 = boto3.client("s3", endpoint_url=moto_endpoint)
    with Expiring(moto_endpoint) as proxy:
        store = _failed_save_of_step_2(proxy, bucket)
        proxy.expired = False  # renewed
        left = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        assert [upload["Key"] for upload in left] == ["run/step-000000000002/model.bin"]
        store.flush(next_step, lambda gen: gen.write_bytes("model.bin", b"weights-next"))
        assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
        store.close()
    assert (
        "aborted the upload of run/step-000000000002/model.bin in "
        f"s3://{bucket}/run that a failed save could not abort" in caplog.text
    )


@pytest.mark.parametrize("renewed", [True, False])
def test_closing_the_store_aborts_a_failed_saves_upload_or_says_it_is_left(
    moto_endpoint: str, bucket: str, caplog: pytest.LogCaptureFixture, renewed: bool
) -> None:
    """The upload a failed save could not abort waited for the next save's commit: a script
    whose last save failed so and then closed the store (its last line) left the parts
    stored and billed with nothing said at close (found: the ExpiredToken proxy, renewed,
    then `store.close()`: list_multipart_uploads still showed run/step-000000000002/
    model.bin). Close aborts it; one it still cannot abort is a WARNING naming it."""
    caplog.set_level(logging.INFO, "forewarn.checkpoint")
    s3 = boto3.client("s3", endpoint_url=moto_endpoint)
    with Expiring(moto_endpoint) as proxy:
        store = CheckpointStore(
            f"s3://{bucket}/run",
            s3=S3Options(endpoint_url=proxy.url, part_size=MIN_PART, concurrency=1),
        )

        def write(gen: object) -> None:
            with gen.open("model.bin") as stream:  # type: ignore[attr-defined]
                stream.write(os.urandom(MIN_PART))
                proxy.expired = True  # the token's hour ends mid-file
                stream.write(os.urandom(MIN_PART + 1000))

        with pytest.raises(Exception, match="ExpiredToken"):
            store.flush(2, write)
        caplog.clear()
        proxy.expired = not renewed
        store.close()
    left = [upload["Key"] for upload in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]
    if renewed:
        assert left == []
        assert "aborted the upload of run/step-000000000002/model.bin" in caplog.text
    else:
        assert left == ["run/step-000000000002/model.bin"]
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(
            "run/step-000000000002/model.bin" in text
            and "could not be aborted at close" in text
            and f"forewarn checkpoint prune s3://{bucket}/run --keep N --abort-uploads" in text
            for text in warned
        ), warned
