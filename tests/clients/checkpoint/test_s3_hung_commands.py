"""`forewarn checkpoint ...` and a store against a hung S3 service (moto behind a proxy that
takes every request and never answers): bounded by the S3 options' connect/read timeouts and
attempts, saying what it waits for after a few seconds, and failing with an error that names
the endpoint, the key and the limit that ended it. Before, `ls` stayed silent for 369 s
(botocore's 60 s read timeout, 6 attempts) and then said only "Read timeout ... LATEST"."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options, StoreConfigError
from forewarn.clients.checkpoint.testing import loopback_s3_env
from hypothesis import given, settings
from hypothesis import strategies as st
from s3_proxy import Reply, Request, S3Proxy
from support import examples


class HungProxy(S3Proxy):
    """Forwards to moto until `hang` is set; then takes every request and never answers it
    (until the test ends)."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.hang = threading.Event()
        self.released = threading.Event()
        self.held = 0
        self.only: tuple[str, str] | None = None  # (method, a word of the path): hang those

    def answer(self, request: Request) -> Reply | None:
        hangs = self.only is None or (
            request.command == self.only[0] and self.only[1] in request.path
        )
        if self.hang.is_set() and hangs:
            self.held += 1
            self.released.wait()
            return Reply(503, [], b"")
        return None


@pytest.fixture
def hung(moto_endpoint: str, bucket: str) -> Iterator[HungProxy]:
    with HungProxy(moto_endpoint) as proxy:
        store = CheckpointStore(f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url))
        store.flush(1, lambda gen: gen.write_bytes("model.bin", b"w"))
        store.close()
        proxy.hang.set()
        try:
            yield proxy
        finally:
            proxy.released.set()


def command(*argv: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "forewarn.agent.cli", "checkpoint", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_ls_against_a_hung_service_ends_at_its_limits_naming_them(
    hung: HungProxy, bucket: str, moto_endpoint: str
) -> None:
    env = loopback_s3_env(hung.url)
    started = time.monotonic()
    process = command("ls", f"s3://{bucket}/run", "--read-timeout", "1", "--attempts", "2", env=env)
    _out, err = process.communicate(timeout=60)
    took = time.monotonic() - started
    assert process.returncode == 3, err
    assert took < 20, took
    assert hung.url in err, err
    assert f"{bucket}/run/" in err, err
    assert "read timeout of 1 s" in err, err
    assert "2 attempts" in err, err


def test_ls_honours_aws_max_attempts_when_no_attempts_flag_is_given(
    hung: HungProxy, bucket: str
) -> None:
    """`AWS_MAX_ATTEMPTS=1` was ignored: the command tried each request its own 3 times
    (found: `ls --read-timeout 1` took 3 requests against the hung proxy)."""
    hung.held = 0
    env = {**loopback_s3_env(hung.url), "AWS_MAX_ATTEMPTS": "1"}
    process = command("ls", f"s3://{bucket}/run", "--read-timeout", "1", env=env)
    _out, err = process.communicate(timeout=60)
    assert process.returncode == 3, err
    assert "read timeout of 1 s, 1 attempt: --read-timeout, --attempts)" in err, err
    assert hung.held == 1, hung.held


def test_get_of_a_file_the_service_never_sends_ends_at_the_attempts_given(
    hung: HungProxy, bucket: str, tmp_path: Path
) -> None:
    """boto3's download tried a file's GET 5 times, each with botocore's attempts, and then
    said only "Max Retries Exceeded": `get` against a service that answered everything but
    that GET took 5 * attempts * read timeouts, and named neither the file nor the limit."""
    hung.only = ("GET", "model.bin")
    hung.held = 0
    env = loopback_s3_env(hung.url)
    process = command(
        "get",
        f"s3://{bucket}/run",
        str(tmp_path / "out"),
        "--read-timeout",
        "1",
        "--attempts",
        "2",
        env=env,
    )
    _out, err = process.communicate(timeout=120)
    assert process.returncode == 3, err
    assert "model.bin" in err and "read timeout of 1 s, 2 attempts" in err, err
    # botocore's 2 attempts within each of boto3's download tries, which --attempts caps too
    # (before: 5 tries, 10 requests, and the error "Max Retries Exceeded" naming nothing).
    assert hung.held == 2 * 2, hung.held


def test_a_command_waiting_on_a_hung_service_says_so(hung: HungProxy, bucket: str) -> None:
    env = loopback_s3_env(hung.url)
    process = command("ls", f"s3://{bucket}/run", "--read-timeout", "30", env=env)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()  # the first line: a wait, a few seconds in
        assert "waiting for" in line, line
        assert hung.url in line, line
        assert "read timeout 30 s" in line, line
        assert process.poll() is None
    finally:
        process.kill()
        process.communicate()


def test_store_options_bound_a_read_from_a_hung_service(hung: HungProxy, bucket: str) -> None:
    store = CheckpointStore(
        f"s3://{bucket}/run",
        s3=S3Options(endpoint_url=hung.url, read_timeout=1.0, attempts=1, connect_timeout=1.0),
    )
    started = time.monotonic()
    with pytest.raises(Exception, match="Read timeout"):
        store.latest()
    assert time.monotonic() - started < 10
    store.close()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("read_timeout", 0.0),
        ("read_timeout", -1.0),
        ("read_timeout", math.inf),
        ("connect_timeout", math.nan),
        ("attempts", 0),
        ("attempts", 1.5),
        ("attempts", True),
    ],
)
def test_bad_limits_are_refused_by_name(field: str, value: object, s3_env: object) -> None:
    with pytest.raises(StoreConfigError, match=field):
        CheckpointStore("s3://bucket/run", s3=S3Options(**{field: value}))  # type: ignore[arg-type]


@settings(max_examples=examples(60), deadline=None)
@given(st.text(max_size=12))
def test_limit_flags_take_a_duration_or_refuse_it_by_name(text: str) -> None:
    from forewarn.agent.checkpoint_cli import _limit_seconds

    try:
        seconds = _limit_seconds(text)
    except Exception as error:
        assert type(error).__name__ == "ArgumentTypeError"
        assert str(error)
    else:
        assert 0 < seconds < math.inf
