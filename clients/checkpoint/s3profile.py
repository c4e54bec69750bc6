"""A named AWS profile that neither AWS file holds, as the store's own `StorageError`.

botocore raises its bare `ProfileNotFound` ("The config profile (nope) could not be found")
from wherever it first reads the profile's section: it named no store, not where the name
came from (`S3Options(profile=...)`, `--profile`, `AWS_PROFILE`) nor the files it looked in."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from .errors import StorageError

# botocore's own defaults for the two files, when their variables are unset.
_CONFIG_DEFAULT = "~/.aws/config"
_CREDENTIALS_DEFAULT = "~/.aws/credentials"


def _origin(profile: str | None) -> str:
    """Where the profile's name came from, as the user gave it."""
    if profile is not None:
        return "S3Options profile / --profile"
    if os.environ.get("AWS_PROFILE"):
        return "AWS_PROFILE"
    return "AWS_DEFAULT_PROFILE"


def missing_profile(url: str, profile: str | None, error: BaseException) -> StorageError:
    """`error` (botocore's `ProfileNotFound`) for the store at `url`, given `profile` (None:
    the name came from the environment)."""
    kwargs = getattr(error, "kwargs", {})
    name = kwargs.get("profile") if isinstance(kwargs, dict) else None
    if name is None:
        name = profile if profile is not None else os.environ.get("AWS_PROFILE", "")
    config = os.environ.get("AWS_CONFIG_FILE") or _CONFIG_DEFAULT
    credentials = os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or _CREDENTIALS_DEFAULT
    what = (
        f"the AWS profile {name!r} ({_origin(profile)}) is in neither AWS file: profiles are "
        f"the [profile NAME] sections of the config file {config} (AWS_CONFIG_FILE) and the "
        f"[NAME] sections of the credentials file {credentials} (AWS_SHARED_CREDENTIALS_FILE)"
    )
    detail = " ".join(str(error).split()) or type(error).__name__
    return StorageError(url, what, detail, options=("profile",), also="or AWS_PROFILE")


@contextlib.contextmanager
def profile_named(url: str, profile: str | None) -> Iterator[None]:
    """Raise botocore's `ProfileNotFound` from inside as `missing_profile`'s error."""
    try:
        from botocore.exceptions import ProfileNotFound
    except ImportError:  # make_client says so, naming the extra that brings boto3
        yield
        return
    try:
        yield
    except ProfileNotFound as error:
        raise missing_profile(url, profile, error) from error
