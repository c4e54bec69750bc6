"""A named AWS profile that is in neither AWS file (`S3Options(profile=...)`, `--profile`,
`AWS_PROFILE`): the store raised botocore's bare `ProfileNotFound` ("The config profile (nope)
could not be found"), naming no store and not where profiles are read from; now the store's
`StorageError` names the store, the profile, where its name came from and the two files,
with botocore's error as its `__cause__`, and `forewarn checkpoint` says it in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options, StorageError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import requires

pytestmark = requires("boto3")


@pytest.fixture
def aws_files(
    s3_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Path]:
    """An AWS config file holding one profile, `present`, whose keys are in the credentials
    file (a profile given by name takes its keys from there, not from the environment)."""
    config, credentials = tmp_path / "aws-config", tmp_path / "aws-credentials"
    config.write_text("[profile present]\nregion = us-east-1\n")
    credentials.write_text(
        "[present]\naws_access_key_id = testing\naws_secret_access_key = testing\n"
    )
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    return config, credentials


def _refusal(url: str, profile: str | None) -> StorageError:
    store = CheckpointStore(url, s3=S3Options(profile=profile) if profile else None)
    try:
        with pytest.raises(StorageError) as raised:
            store.latest()
    finally:
        store.close()
    return raised.value


@pytest.mark.parametrize("given_as", ["S3Options profile", "AWS_PROFILE"])
def test_a_missing_profile_is_a_storage_error_naming_it_and_the_files(
    bucket: str, aws_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, given_as: str
) -> None:
    from botocore.exceptions import ProfileNotFound

    url = f"s3://{bucket}/run"
    if given_as == "AWS_PROFILE":
        monkeypatch.setenv("AWS_PROFILE", "nope")
    error = _refusal(url, "nope" if given_as == "S3Options profile" else None)
    text = str(error)
    assert text.startswith(f"{url}: "), text
    assert "'nope'" in text and given_as in text, text
    for path in aws_files:
        assert str(path) in text, text
    assert error.options == ("profile",)
    assert isinstance(error.__cause__, ProfileNotFound)


def test_a_present_profile_still_reads_the_store(bucket: str, aws_files: tuple[Path, Path]) -> None:
    store = CheckpointStore(f"s3://{bucket}/run", s3=S3Options(profile="present"))
    try:
        store.flush(1, lambda gen: gen.write_bytes("model.bin", b"weights"))
        latest = store.latest()
        assert latest is not None and latest.step == 1
    finally:
        store.close()


# Profile names as a user may type them: any printable text but the one present; botocore
# reads `[profile NAME]` sections, so brackets and spaces are names too.
_NAMES = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x2FF), min_size=1, max_size=20)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=_NAMES.filter(lambda name: name != "present"))
def test_any_missing_profile_name_is_a_storage_error(
    bucket: str, aws_files: tuple[Path, Path], name: str
) -> None:
    error = _refusal(f"s3://{bucket}/run", name)
    assert repr(name) in str(error)
    assert error.options == ("profile",)


@pytest.mark.parametrize("given_as", ["--profile", "AWS_PROFILE"])
def test_the_command_line_says_a_missing_profile_in_one_line(
    bucket: str, aws_files: tuple[Path, Path], given_as: str
) -> None:
    env = dict(os.environ)
    argv = [sys.executable, "-m", "forewarn.agent.cli", "checkpoint", "ls", f"s3://{bucket}/run"]
    if given_as == "--profile":
        argv += ["--profile", "nope"]
    else:
        env["AWS_PROFILE"] = "nope"
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 3, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith(f"forewarn: checkpoint: cannot read s3://{bucket}/run: "), line
    assert "'nope'" in line and given_as in line and str(aws_files[0]) in line, line
    assert "--profile" in line, line
