"""The library's calls against a failing S3 raise the store's own `StorageError` (a
`CheckpointError` and an `OSError`), naming the store, what went wrong in words and the
`S3Options` field that changes it, with botocore's error as its cause: botocore's bare
`ReadTimeoutError` named only the URL of one request (found: `store.latest()` and a save
against an endpoint that never answers raised `Read timeout on endpoint URL: ".../bucket/run/
.step-000000000001.claim"`, after 2.0 s with `S3Options(read_timeout=1, attempts=2)`)."""

from __future__ import annotations

import socket

import pytest
from forewarn.clients.checkpoint import CheckpointError, CheckpointStore, S3Options, StorageError
from forewarn.clients.checkpoint.requestlimits import RequestLimits
from forewarn.clients.checkpoint.s3 import storage_error
from forewarn.clients.checkpoint.testing import loopback_s3_env
from hypothesis import given
from hypothesis import strategies as st
from s3_proxy import XML, Reply, Request, S3Proxy
from support import LazyModule

botocore_exceptions = LazyModule("botocore.exceptions")


def test_a_hung_service_is_named_by_the_read_timeout_and_attempts(silent_endpoint: str) -> None:
    store = CheckpointStore("s3://bucket/run", s3=S3Options(read_timeout=1, attempts=2))
    for call in (
        store.latest,
        store.steps,
        lambda: store.flush(1, lambda gen: gen.write_bytes("model.bin", b"w")),
    ):
        with pytest.raises(StorageError) as raised:
            call()
        error = raised.value
        assert isinstance(error, CheckpointError) and isinstance(error, OSError)
        text = str(error)
        assert text.startswith("s3://bucket/run: no answer within the read timeout of 1 s, 2 ")
        assert "(S3Options read_timeout, attempts)" in text
        assert isinstance(error.__cause__, botocore_exceptions.ReadTimeoutError)
    store.close()


def test_an_endpoint_taking_no_connections_names_the_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"  # nothing listens there now: refused
    for key, value in loopback_s3_env(endpoint).items():
        monkeypatch.setenv(key, value)
    store = CheckpointStore("s3://bucket/run", s3=S3Options(attempts=1))
    with pytest.raises(StorageError) as raised:
        store.latest()
    text = str(raised.value)
    assert text.startswith(f"s3://bucket/run: could not connect to {endpoint}")
    assert "S3Options endpoint_url" in text
    store.close()


def test_no_credentials_are_named_with_where_they_are_looked_for(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in loopback_s3_env(moto_endpoint).items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never the metadata service
    store = CheckpointStore("s3://bucket/run")
    with pytest.raises(StorageError, match="no credentials") as raised:
        store.latest()
    assert "S3Options access_key_id, secret_access_key, profile" in str(raised.value)
    assert isinstance(raised.value.__cause__, botocore_exceptions.NoCredentialsError)
    store.close()


_REFUSALS = {
    "AccessDenied": (403, "access denied"),
    "ExpiredToken": (400, "the credentials expired"),
    "SlowDown": (503, "the service asked to slow down"),
    "InternalError": (500, "the service failed"),
}


class Refusing(S3Proxy):
    code = "AccessDenied"

    def answer(self, request: Request) -> Reply | None:
        status = _REFUSALS[self.code][0]
        body = f"<Error><Code>{self.code}</Code><Message>said {self.code}</Message></Error>"
        return Reply(status, XML, body.encode())


@pytest.mark.parametrize("code", sorted(_REFUSALS))
def test_a_refusal_is_named_in_words_with_its_code(
    moto_endpoint: str, bucket: str, code: str
) -> None:
    with Refusing(moto_endpoint) as proxy:
        proxy.code = code
        store = CheckpointStore(
            f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url, attempts=2)
        )
        for call in (
            store.latest,
            lambda: store.flush(1, lambda gen: gen.write_bytes("model.bin", b"w")),
        ):
            with pytest.raises(StorageError) as raised:
                call()
            text = str(raised.value)
            assert text.startswith(f"s3://{bucket}/run: {_REFUSALS[code][1]}"), text
            assert code in text
        store.close()


@given(
    code=st.text(min_size=0, max_size=30),
    message=st.text(max_size=60),
    status=st.integers(min_value=100, max_value=599),
)
def test_any_service_error_becomes_a_storage_error_naming_it(
    code: str, message: str, status: int
) -> None:
    cause = botocore_exceptions.ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "GetObject",
    )
    error = storage_error(cause, "s3://b/p", RequestLimits(3.0, 60.0, 6))
    assert isinstance(error, StorageError)
    assert str(error).startswith("s3://b/p: ")
    assert code in str(error)
    assert error.response is cause.response  # the store's own checks read the code


class StoppingBody(S3Proxy):
    """Sends half of a file's body, then nothing more, once `stop` is set."""

    stop = False

    def body_sent(self, request: Request, reply: Reply) -> int | None:
        if self.stop and request.command == "GET" and "model.bin" in request.path:
            return len(reply.data) // 2
        return None


def test_a_body_that_stops_midway_names_the_file_and_the_read_timeout(
    moto_endpoint: str, bucket: str
) -> None:
    """botocore's error for a body read past the read timeout said `Read timeout on endpoint
    URL: "None"`, and the words said "2 attempts" of a read that is tried once (found:
    `gen.read_bytes("model.bin")` through a proxy sending half the body, read_timeout=2)."""
    with StoppingBody(moto_endpoint) as proxy:
        store = CheckpointStore(
            f"s3://{bucket}/run",
            s3=S3Options(endpoint_url=proxy.url, read_timeout=1, attempts=2),
        )
        store.flush(1, lambda gen: gen.write_bytes("model.bin", b"w" * 100_000))
        generation = store.get(1)
        proxy.stop = True
        for read in (
            lambda: generation.read_bytes("model.bin"),
            lambda: generation.open("model.bin").read(),
        ):
            with pytest.raises(StorageError) as raised:
                read()
            text = str(raised.value)
            assert text.startswith(
                f"s3://{bucket}/run: the body of run/step-000000000001/model.bin stopped: "
                "nothing more within the read timeout of 1 s (S3Options read_timeout)"
            ), text
            assert '"None"' not in text, text
        store.close()
