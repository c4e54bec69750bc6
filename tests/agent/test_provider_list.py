"""Several providers in one value, written as people write a list: `--provider "local aws"`,
`--provider local,aws`, `FOREWARN_PROVIDERS="local aws"`."""

from __future__ import annotations

import re

import pytest
from forewarn.agent.cli import build_parser
from forewarn.agent.config import ConfigError, load_settings
from forewarn.protocol.errors import UsageError
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import examples

NAMES = ["local", "aws", "gcp", "azure", "digitalocean", "kubernetes"]
SEPARATORS = st.sampled_from([",", " ", ", ", " ,", "  ", "\t", ",\n"])


@st.composite
def _written_lists(draw: st.DrawFn) -> tuple[str, list[str]]:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4))
    written = [draw(st.sampled_from([name, name.upper(), name.title()])) for name in names]
    text = written[0]
    for name in written[1:]:
        text += draw(SEPARATORS) + name
    return text, list(dict.fromkeys(names))


@settings(max_examples=examples(120), deadline=None)
@given(_written_lists())
@example(("local aws", ["local", "aws"]))
@example(("local,aws", ["local", "aws"]))
@example(("Local, AWS", ["local", "aws"]))
def test_a_list_of_providers_reads_the_same_from_the_flag_and_the_config(
    drawn: tuple[str, list[str]],
) -> None:
    """`--provider "local aws"` (a systemd `ExecStart=` or a variable quoted once) and
    `--provider local,aws` were 'invalid choice', and `FOREWARN_PROVIDERS="local aws"` an
    unknown provider, while `FOREWARN_PROVIDERS=local,aws` was two."""
    text, names = drawn
    args = build_parser("agent").parse_args(["agent", "--provider", text])
    assert list(dict.fromkeys(args.provider)) == names
    assert load_settings(providers=text).providers == names


def test_repeated_flags_and_lists_add_up() -> None:
    args = build_parser("agent").parse_args(
        ["agent", "--provider", "local aws", "--provider", "gcp"]
    )
    assert args.provider == ["local", "aws", "gcp"]
    assert load_settings(providers=args.provider).providers == ["local", "aws", "gcp"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("local awz", "invalid choice 'awz' (did you mean 'aws'?)"),
        ("local,,aws x", "invalid choice 'x'"),
        (",", "names no provider"),
        ("", "names no provider"),
    ],
)
def test_a_bad_name_in_the_list_is_named(text: str, says: str) -> None:
    with pytest.raises(UsageError, match="--provider: .*" + re.escape(says)):
        build_parser("agent").parse_args(["agent", "--provider", text])


def test_the_config_names_a_bad_name_in_a_list() -> None:
    with pytest.raises(ConfigError, match="providers: unknown provider 'amazon'"):
        load_settings(providers="local amazon")


@pytest.mark.parametrize("written", ['["local","aws"]', '["local", "aws"]', '[ "LOCAL" , "aws" ]'])
def test_providers_as_a_json_list_in_the_environment_and_set(written: str) -> None:
    """`FOREWARN_PROVIDERS=["local","aws"]` (the list as the TOML file writes it, as
    `FOREWARN_KUBERNETES_TAINTS` takes one) was an unknown provider '["local"'."""
    import os
    from unittest import mock

    from forewarn.agent.cli import apply_sets

    with mock.patch.dict(os.environ, {"FOREWARN_PROVIDERS": written}):
        assert load_settings().providers == ["local", "aws"]
    overrides: dict[str, object] = {}
    apply_sets(overrides, [f"providers={written}"])
    assert load_settings(**overrides).providers == ["local", "aws"]
