"""boto3's own setting of how many times a request is tried, `AWS_MAX_ATTEMPTS` or the AWS
config file's `max_attempts`, is honoured when the store was given no `attempts` (found:
`AWS_MAX_ATTEMPTS=2` against an endpoint that never answers, read timeout 1 s: the request
was tried 6 times, the store's own default, as the client's `total_max_attempts` was always
set). `S3Options(attempts=)` (`--attempts`) still wins."""

from __future__ import annotations

from pathlib import Path

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options, StoreConfigError
from forewarn.clients.checkpoint.testing import loopback_s3_env
from hypothesis import given
from hypothesis import strategies as st


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in loopback_s3_env("http://127.0.0.1:9").items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)


def attempts_of(store: CheckpointStore) -> tuple[int, int]:
    backend = store.backend
    config = backend.client.meta.config  # type: ignore[attr-defined]
    return backend.limits.attempts, config.retries["total_max_attempts"]  # type: ignore[attr-defined]


def test_aws_max_attempts_is_honoured_when_no_attempts_are_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    assert attempts_of(CheckpointStore("s3://bucket/run")) == (2, 2)
    assert attempts_of(CheckpointStore("s3://bucket/run", s3=S3Options(attempts=4))) == (4, 4)


def test_the_config_files_max_attempts_is_honoured_for_its_profile(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    config.write_text("[default]\nmax_attempts = 3\n[profile slow]\nmax_attempts = 9\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    assert attempts_of(CheckpointStore("s3://bucket/run")) == (3, 3)
    store = CheckpointStore(
        "s3://bucket/run", s3=S3Options(profile="slow", access_key_id="k", secret_access_key="s")
    )
    assert attempts_of(store) == (9, 9)


def test_without_either_the_stores_own_default_stands() -> None:
    assert attempts_of(CheckpointStore("s3://bucket/run")) == (6, 6)


@given(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8)
)
def test_a_bad_aws_max_attempts_is_refused_naming_it(text: str) -> None:
    stripped = text.strip()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_MAX_ATTEMPTS", text)
        if not stripped:
            assert CheckpointStore("s3://bucket/run").backend.limits.attempts == 6  # type: ignore[attr-defined]
        elif stripped.isascii() and stripped.isdigit() and int(stripped) >= 1:
            attempts = CheckpointStore("s3://bucket/run").backend.limits.attempts  # type: ignore[attr-defined]
            assert attempts == int(stripped)
        else:
            with pytest.raises(StoreConfigError, match="AWS_MAX_ATTEMPTS"):
                CheckpointStore("s3://bucket/run").backend.limits  # type: ignore[attr-defined]  # noqa: B018
