"""`CheckpointStore.from_env()` reads FOREWARN_CHECKPOINT_URL, _KEEP and _VERIFY as the agent
reads its FOREWARN_* variables: blank sets nothing, the space around a value and one pair of
quotes around it are not part of it, names are read in any case, and anything else it cannot
use is named by its variable."""

from __future__ import annotations

import json
import os
import string
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from forewarn.clients.checkpoint import CheckpointStore, StoreConfigError
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import examples

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


@settings(max_examples=examples(200), deadline=None)
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


def _quoted(text: str, quote: str) -> str:
    return json.dumps(text) if quote == '"' else f"'{text}'"


@settings(max_examples=examples(60), deadline=None)
@given(
    quote=st.sampled_from(['"', "'"]),
    keep=st.integers(1, 10**4).map(str),
    verify=st.sampled_from(["sizes", "checksums"]),
    pad=BLANKS,
)
@example(quote='"', keep="3", verify="checksums", pad="")
def test_quoted_values_are_read_without_their_quotes(
    tmp_path_factory: pytest.TempPathFactory, quote: str, keep: str, verify: str, pad: str
) -> None:
    """A Docker `--env-file` line keeps the quotes: `FOREWARN_CHECKPOINT_URL="/data/ckpt"`
    saved every checkpoint into a directory named `"` in the working directory (the
    container's own layer, not the mounted volume), and a quoted KEEP or VERIFY was refused.
    The agent and the other clients read one pair of quotes around a FOREWARN_* value as TOML
    reads a string, as the README says; so does the store."""
    directory = tmp_path_factory.mktemp("store")
    variables = {
        "FOREWARN_CHECKPOINT_URL": pad + _quoted(str(directory), quote) + pad,
        "FOREWARN_CHECKPOINT_KEEP": pad + _quoted(keep, quote) + pad,
        "FOREWARN_CHECKPOINT_VERIFY": pad + _quoted(verify, quote) + pad,
    }
    with mock.patch.dict(os.environ, variables):
        store = CheckpointStore.from_env()
    assert store.url == directory.as_uri()
    assert (store.keep, store.verify_policy) == (int(keep), verify)


def test_quotes_inside_a_value_or_unmatched_are_part_of_it(tmp_path: Path) -> None:
    """Only one pair of matching quotes around the whole value goes, as for the agent."""
    with mock.patch.dict(os.environ, {"FOREWARN_CHECKPOINT_URL": f'{tmp_path}/a"b'}):
        assert CheckpointStore.from_env().url == (tmp_path / 'a"b').as_uri().replace("%22", '"')
    with (
        mock.patch.dict(os.environ, {"FOREWARN_CHECKPOINT_URL": str(tmp_path)}),
        mock.patch.dict(os.environ, {"FOREWARN_CHECKPOINT_KEEP": '"3'}),
        pytest.raises(StoreConfigError, match=r"^FOREWARN_CHECKPOINT_KEEP='\"3' is not an integer"),
    ):
        CheckpointStore.from_env()


def test_the_names_are_read_in_any_case(tmp_path: Path) -> None:
    """As the agent and the event client read `forewarn_runtime_dir`."""
    variables = {"forewarn_checkpoint_url": str(tmp_path), "Forewarn_Checkpoint_Keep": "4"}
    with mock.patch.dict(os.environ, variables):
        store = CheckpointStore.from_env()
    assert (store.url, store.keep) == (tmp_path.as_uri(), 4)
