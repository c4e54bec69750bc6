"""A value with space around it, as a Kubernetes ConfigMap leaves it (a YAML block, `key: |`,
or a key made with `--from-file`, ends the value with a newline): every key reads it as it
reads the value alone, in the environment, the config file and `--set`."""

from __future__ import annotations

import argparse
import json
import os
import re
import string
import tempfile
from pathlib import Path
from typing import Any, Literal, get_args, get_origin
from unittest import mock

import pytest
from forewarn.agent.cli import apply_sets
from forewarn.agent.config import ConfigError, load_settings, settings_model
from forewarn.providers.registry import REGISTRY
from forewarn.providers.settings import name_arg
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from support import examples

MODEL = settings_model(REGISTRY)
# Every spelling of a boolean the docs name, in any case (pydantic's `t`, `f`, `y` and `n`
# are refused: test_config_boolean_values.py).
BOOLEANS = ("true", "false", "yes", "no", "on", "off", "1", "0")


def _keys(model: type[BaseModel], prefix: str = "") -> list[tuple[str, list[str]]]:
    """(dotted key, the words it takes) for every boolean and every choice key."""
    found: list[tuple[str, list[str]]] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += _keys(annotation, f"{prefix}{name}.")
        elif annotation is bool:
            found.append((prefix + name, [*BOOLEANS, *(word.upper() for word in BOOLEANS)]))
        elif get_origin(annotation) is Literal:
            found.append((prefix + name, [str(word) for word in get_args(annotation)]))
    return found


WORD_KEYS = _keys(MODEL)
SPACE = st.text(st.sampled_from(string.whitespace), max_size=3)


def test_every_section_has_its_boolean_keys_here() -> None:
    # The property below covers the boolean and choice keys of every section.
    assert {"allow_remote", "telemetry", "kubernetes.cordon", "aws.imdsv1"} <= dict(
        WORD_KEYS
    ).keys()
    assert "gcp.migrate" in dict(WORD_KEYS)


def _value(key: str, loaded: Any) -> Any:
    for part in key.split("."):
        loaded = getattr(loaded, part)
    return loaded


def _variable(key: str) -> str:
    return "FOREWARN_" + key.replace(".", "_").upper()


def _clean_environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if not name.startswith("FOREWARN_")}


def _from_environment(key: str, text: str) -> Any:
    with mock.patch.dict(os.environ, {**_clean_environment(), _variable(key): text}, clear=True):
        return _value(key, load_settings())


def _from_file(key: str, text: str) -> Any:
    *section, leaf = key.split(".")
    header = f"[{section[0]}]\n" if section else ""
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "forewarn.toml"
        # A JSON string is a TOML basic string: "\n", "\t" and "\u000b" escaped alike.
        config.write_text(f"{header}{leaf} = {json.dumps(text)}\n")
        with mock.patch.dict(os.environ, _clean_environment(), clear=True):
            return _value(key, load_settings(config))


# What a refusal names before the key: the variable or the file the value came from (a
# `--set`'s is named by the command line, which `load_settings` does not see).
NAMED_SOURCE = r"(environment FOREWARN_[A-Z_]+: |config file [^:]+: )?"


def _from_set(key: str, text: str) -> Any:
    overrides: dict[str, Any] = {}
    apply_sets(overrides, [f"{key}={text}"])
    with mock.patch.dict(os.environ, _clean_environment(), clear=True):
        return _value(key, load_settings(**overrides))


@settings(max_examples=examples(150), deadline=None)
@given(
    chosen=st.sampled_from(WORD_KEYS).flatmap(
        lambda item: st.tuples(st.just(item[0]), st.sampled_from(item[1]))
    ),
    before=SPACE,
    after=SPACE.filter(bool),
    source=st.sampled_from([_from_environment, _from_file, _from_set]),
)
def test_a_boolean_or_choice_with_space_around_it_reads_as_the_word_alone(
    chosen: tuple[str, str], before: str, after: str, source: Any
) -> None:
    """`FOREWARN_KUBERNETES_CORDON` from a ConfigMap block is `true\\n`: pydantic refused it,
    'Input should be a valid boolean', and the agent stopped with exit 2 at every start."""
    key, word = chosen
    assert source(key, before + word + after) == source(key, word)


def test_numbers_and_durations_with_space_around_them_read_as_alone() -> None:
    # Read stripped already; kept so that the boolean fix is not the only place that strips.
    for key, text in [
        ("exit_margin", "30s"),
        ("telemetry_max_bytes", "8192"),
        ("aws.token_ttl", "5m"),
    ]:
        for padded in (f"{text}\n", f" {text} ", f"\t{text}\r\n"):
            assert _from_environment(key, padded) == _from_environment(key, text)
            assert _from_file(key, padded) == _from_file(key, text)


def _text_keys(model: type[BaseModel], prefix: str = "") -> dict[str, Any]:
    """Every key that holds text (`str`, `str | None`) or a list of texts, with its type."""
    found: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found |= _text_keys(annotation, f"{prefix}{name}.")
        elif annotation in (str, str | None, list[str]):
            found[prefix + name] = annotation
    return found


TEXT_KEYS = _text_keys(MODEL)
LIST_KEYS = sorted(key for key, annotation in TEXT_KEYS.items() if annotation == list[str])


# A value each text key takes, as the environment writes it (a list comma-separated).
TEXT_SAMPLES = {
    "providers": "local,aws",
    "events": "tcp://127.0.0.1:5555",
    "control": "tcp://127.0.0.1:5556",
    "metrics_address": "127.0.0.1:9464",
    "webhook.url": "https://hooks.example.com/services/T0/B0/secret",
    "webhook.proxy": "http://proxy.example.com:3128",
    "aws.url": "http://127.0.0.1:1338",
    "gcp.url": "127.0.0.1:1339",
    "azure.url": "http://127.0.0.1:1340",
    "azure.api_version": "2020-07-01",
    "azure.vm_name": "vmss_3",
    "azure.approve_types": "Preempt,Terminate",
    "digitalocean.url": "http://127.0.0.1:1341",
    "digitalocean.droplet_id": "3164444",
    "digitalocean.droplet_name": "gpu-spot-1",
    "digitalocean.imap_host": "imap.example.com",
    "digitalocean.imap_mailbox": "Reclaims/DigitalOcean",
    "digitalocean.sender": r"@example\.com$",
    "digitalocean.subject": "reclaim|spot",
    "kubernetes.url": "https://127.0.0.1:6443",
    "kubernetes.node_name": "node-1",
    "kubernetes.context": "prod-admin",
    "kubernetes.taints": "karpenter.sh/disrupted,node.kubernetes.io/out-of-service",
    "kubernetes.extra_taints": "example.com/reclaim",
    "kubernetes.terminate_taints": "aws-node-termination-handler/spot-itn,example.com/reclaim",
}
# Keys a blank value (space alone, or nothing) is refused for, naming the key: no host, no
# URL, no mailbox, no pattern (an empty one matches every mail) is ever meant. Blank is
# unset for the others: their default, or what they are read from when unset (NODE_NAME,
# droplet metadata, the kubeconfig's current context).
BLANK_REFUSED = {
    "aws.url",
    "gcp.url",
    "azure.url",
    "azure.api_version",
    "digitalocean.url",
    "digitalocean.droplet_id",
    "digitalocean.imap_host",
    "digitalocean.imap_mailbox",
    "digitalocean.sender",
    "digitalocean.subject",
    "kubernetes.url",
}
SOURCES = [_from_environment, _from_file, _from_set]


def test_every_text_key_has_a_sample_here() -> None:
    # A text key added later is in the properties below only with a sample here.
    assert sorted(TEXT_KEYS) == sorted(TEXT_SAMPLES)
    assert set(LIST_KEYS) == {
        "providers",
        "azure.approve_types",
        "kubernetes.taints",
        "kubernetes.extra_taints",
        "kubernetes.terminate_taints",
    }


def _from_file_list(key: str, items: list[str]) -> Any:
    section, leaf = key.split(".") if "." in key else ("", key)
    header = f"[{section}]\n" if section else ""
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "forewarn.toml"
        config.write_text(f"{header}{leaf} = {json.dumps(items)}\n")
        with mock.patch.dict(os.environ, _clean_environment(), clear=True):
            return _value(key, load_settings(config))


@settings(max_examples=examples(200), deadline=None)
@given(
    key=st.sampled_from(sorted(TEXT_SAMPLES)),
    before=SPACE,
    after=SPACE.filter(bool),
    source=st.sampled_from(SOURCES),
)
def test_a_text_with_space_around_it_reads_as_the_text_alone(
    key: str, before: str, after: str, source: Any
) -> None:
    """`FOREWARN_DIGITALOCEAN_IMAP_HOST` from a ConfigMap block is `imap.example.com\\n`: kept,
    the host never resolved; a sender pattern ending `$\\n` matched no mail, and a context or
    droplet name with its newline named none. Names, hosts, URLs and patterns lose the space
    around them, in the environment, the config file and `--set` alike."""
    text = TEXT_SAMPLES[key]
    assert source(key, before + text + after) == source(key, text)


@settings(max_examples=examples(60), deadline=None)
@given(
    key=st.sampled_from(LIST_KEYS),
    spaces=st.lists(st.tuples(SPACE, SPACE), min_size=3, max_size=3),
    source=st.sampled_from([*SOURCES, _from_file_list]),
)
def test_each_text_of_a_list_loses_the_space_around_it(
    key: str, spaces: list[tuple[str, str]], source: Any
) -> None:
    """`taints = ["karpenter.sh/disrupted\\n"]` was refused as no taint key; a comma-separated
    variable was read stripped already."""
    items = TEXT_SAMPLES[key].split(",")
    padded = [before + item + after for item, (before, after) in zip(items, spaces, strict=False)]
    if source is _from_file_list:
        assert source(key, padded) == source(key, items)
    else:
        assert source(key, ",".join(padded)) == source(key, ",".join(items))


@settings(max_examples=examples(150), deadline=None)
@given(
    key=st.sampled_from(sorted(set(TEXT_SAMPLES) - set(LIST_KEYS))),
    blank=SPACE,
    source=st.sampled_from(SOURCES),
)
def test_a_blank_text_is_unset_or_refused_naming_its_key(key: str, blank: str, source: Any) -> None:
    """Stripped to nothing, a text in the file is either unset (as a blank path is) or, where
    no empty value is meant, refused naming the key: `sender = ""` matched every mail's From,
    and a blank `imap_host` ran the agent with the mailbox unwatched. A blank variable or
    `--set` sets nothing at all (test_config_blank_values.py): the key's default here."""
    if key in BLANK_REFUSED and source is _from_file:
        with pytest.raises(ConfigError) as refused:
            source(key, blank)
        assert re.match(rf"config file [^:]+: config key {key}: ", str(refused.value)), refused
    elif key in BLANK_REFUSED:
        assert source(key, blank) == _default(key)
    else:
        assert source(key, blank) is None


@given(
    name=st.text(string.ascii_letters + string.digits + "-_", min_size=1), before=SPACE, after=SPACE
)
def test_a_drill_name_loses_the_space_around_it(name: str, before: str, after: str) -> None:
    """`--vm "$(cat vm-name)"` keeps no newline, but `--vm "$VM"` from a ConfigMap block did:
    the drill asked to evict a VM named `spot-1\\n`."""
    assert name_arg(before + name + after) == name
    with pytest.raises(argparse.ArgumentTypeError):
        name_arg(before + after)


def _default(key: str) -> Any:
    with mock.patch.dict(os.environ, _clean_environment(), clear=True):
        return _value(key, load_settings())


@settings(max_examples=examples(60), deadline=None)
@given(key=st.sampled_from(LIST_KEYS), blank=SPACE, source=st.sampled_from(SOURCES))
def test_a_blank_list_is_unset(key: str, blank: str, source: Any) -> None:
    """`FOREWARN_KUBERNETES_TAINTS=` (an empty value in a Helm or Kustomize env list) was an
    empty list: every default drain taint was off, and Karpenter's and the Cluster
    Autoscaler's deletions went unnoticed. A blank list is unset, as a blank text is."""
    assert source(key, blank) == _default(key)


@pytest.mark.parametrize("key", LIST_KEYS)
def test_a_blank_list_variable_leaves_the_files_list_standing(key: str) -> None:
    # As a blank path variable does: the file's value is used, and no note says otherwise.
    section, leaf = key.split(".") if "." in key else ("", key)
    items = TEXT_SAMPLES[key].split(",")[:1]  # one item: no key's default
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "forewarn.toml"
        config.write_text((f"[{section}]\n" if section else "") + f"{leaf} = {json.dumps(items)}\n")
        environment = {**_clean_environment(), _variable(key): "\n"}
        with mock.patch.dict(os.environ, environment, clear=True):
            loaded = load_settings(config)
    assert _value(key, loaded) == _from_file_list(key, items) != _default(key)
    assert loaded.overridden == []


@pytest.mark.parametrize("key", LIST_KEYS)
@pytest.mark.parametrize("source", SOURCES)
def test_a_list_of_commas_alone_is_refused_naming_its_key(key: str, source: Any) -> None:
    # `,` names no item: neither the default nor an empty list is clearly meant.
    said = rf"^{NAMED_SOURCE}config key {key}: ' ?, ,?' names nothing"
    with pytest.raises(ConfigError, match=said):
        source(key, " , ,")


@pytest.mark.parametrize("source", [_from_environment, _from_set])
def test_no_drain_taint_at_all_is_an_empty_json_list(source: Any) -> None:
    # The one way to have no taint key: blank is the defaults.
    assert source("kubernetes.taints", "[]") == []
    assert _from_file_list("kubernetes.taints", []) == []


@pytest.mark.parametrize("source", [_from_environment, _from_set])
def test_a_json_list_nested_past_json_recursion_is_refused_naming_its_key(source: Any) -> None:
    # json.loads raises RecursionError, not ValueError, past a few thousand levels: the agent
    # ended in a traceback instead of exit 2 naming the key.
    said = rf"^{NAMED_SOURCE}config key kubernetes.taints: .*not a JSON list"
    with pytest.raises(ConfigError, match=said):
        source("kubernetes.taints", "[" * 50_000 + "]" * 50_000)


@settings(max_examples=examples(100), deadline=None)
@given(
    chosen=st.sampled_from(
        [(key, words) for key, words in WORD_KEYS if not set(words) & set(BOOLEANS)]
    ).flatmap(lambda item: st.tuples(st.just(item[0]), st.sampled_from(item[1]))),
    upper=st.lists(st.booleans(), min_size=20, max_size=20),
    source=st.sampled_from([_from_environment, _from_file, _from_set]),
)
def test_a_choice_in_any_case_reads_as_the_word(
    chosen: tuple[str, str], upper: list[bool], source: Any
) -> None:
    """`FOREWARN_GCP_MIGRATE=DRAIN` and `azure.approve = "After-Ack"` stopped the agent
    with exit 2 at every start, for their case alone, while `log_level` took any case."""
    key, word = chosen
    written = "".join(char.upper() if up else char for char, up in zip(word, upper, strict=False))
    assert source(key, written) == source(key, word) == word


def _number_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    from forewarn.providers.settings import is_seconds

    found: list[str] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += _number_keys(annotation, f"{prefix}{name}.")
            continue
        numbers = [arg for arg in get_args(annotation) if arg is not type(None)] or [annotation]
        if is_seconds(annotation) or (len(numbers) == 1 and numbers[0] in (int, float)):
            found.append(prefix + name)
    return found


NUMBER_KEYS = _number_keys(MODEL)


def test_the_number_keys_are_found() -> None:
    assert {"exit_margin", "heartbeat_interval", "digitalocean.imap_port"} <= set(NUMBER_KEYS)


@settings(max_examples=examples(100), deadline=None)
@given(key=st.sampled_from(NUMBER_KEYS), blank=SPACE, source=st.sampled_from(SOURCES))
def test_a_blank_number_or_duration_is_unset(key: str, blank: str, source: Any) -> None:
    """`exit_margin = " "` in the file was refused in pydantic's words ("Input should be a
    valid number, unable to parse string as a number (got ' ')"), where a blank list or path
    is unset and a blank variable or `--set` sets nothing: it is the key's default too."""
    assert source(key, blank) == _default(key)
