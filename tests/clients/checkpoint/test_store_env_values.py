"""`CheckpointStore.from_env()` reads FOREWARN_CHECKPOINT_KEEP and _VERIFY as the agent reads
its FOREWARN_* variables: blank sets nothing, the space around a value is not part of it, and
anything else it cannot use is named by its variable."""

from __future__ import annotations

import os
import string
import tempfile
from unittest import mock

import pytest
from forewarn.clients.checkpoint import CheckpointStore, StoreConfigError
from hypothesis import example, given, settings
from hypothesis import strategies as st

BLANKS = st.text(alphabet=" \t\n\r", max_size=3)


def _from_env(**variables: str) -> CheckpointStore:
    with (
        tempfile.TemporaryDirectory() as directory,
        mock.patch.dict(os.environ, {"FOREWARN_CHECKPOINT_URL": directory}),
    ):
        for name, value in variables.items():
            os.environ[f"FOREWARN_CHECKPOINT_{name}"] = value
        return CheckpointStore.from_env()


@settings(max_examples=40, deadline=None)
@given(keep=BLANKS, verify=BLANKS)
@example(keep=" ", verify=" ")
@example(keep="\n", verify="")
def test_a_blank_variable_sets_nothing(keep: str, verify: str) -> None:
    """`FOREWARN_CHECKPOINT_KEEP=" "` (a manifest's `value: " "`, a compose file's `${KEEP }`)
    stopped the job: "' ' is not an integer"; a blank VERIFY "is neither 'sizes' nor
    'checksums'". Blank is unset, as for every FOREWARN_* variable the agent reads."""
    store = _from_env(KEEP=keep, VERIFY=verify)
    default = _from_env()
    assert store.keep == default.keep and store.verify_policy == default.verify_policy


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=string.digits + " \t\n+-_.e٣²x", max_size=6)
    | st.integers(-5, 10**6).map(str).map(lambda text: f" {text}\n")
)
@example("1_0")
@example("٣")
@example("+3")
@example(" 3\n")
def test_keep_is_a_count_written_in_ascii_digits_or_an_error_naming_it(text: str) -> None:
    """`int()` read `1_0` as 10, `+3` as 3 and the Arabic-Indic `٣` as 3: what a count holds
    is plain digits, as every other number forewarn reads."""
    stripped = text.strip(string.whitespace)
    try:
        store = _from_env(KEEP=text)
    except StoreConfigError as error:
        assert str(error).startswith(f"FOREWARN_CHECKPOINT_KEEP={text!r}")
        assert not (stripped.isascii() and stripped.isdigit() and int(stripped) >= 1)
        return
    if not stripped:
        assert store.keep == _from_env().keep
    else:
        assert stripped.isascii() and stripped.isdigit()
        assert store.keep == int(stripped)


def test_a_padded_verify_reads_as_written() -> None:
    assert _from_env(VERIFY=" checksums ").verify_policy == "checksums"
    with pytest.raises(StoreConfigError, match=r"^FOREWARN_CHECKPOINT_VERIFY='md5'"):
        _from_env(VERIFY="md5")
