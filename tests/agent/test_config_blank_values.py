"""A blank value from the environment, a flag or `--set` sets nothing, for every key alike:
the config file's value (else the default) stands, and no warning says it was overridden.
A compose file's `${VAR}` left unset, an empty value in a Helm or Kustomize env list, or
`--set KEY="$VAR"` with the shell variable unset all leave one."""

from __future__ import annotations

import json
import os
import string
import types
from pathlib import Path, PurePath
from typing import Any, Literal, Union, get_args, get_origin
from unittest import mock

import pytest
from forewarn.agent.cli import apply_sets
from forewarn.agent.config import load_settings, settings_model
from forewarn.providers.registry import REGISTRY
from forewarn.providers.settings import is_seconds
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from support import AgentProcess, examples, self_signed_ca

MODEL = settings_model(REGISTRY)
KINDS = ("str", "optional str", "int", "float", "duration", "bool", "choice", "list", "path", "url")

# A value for the file of each key whose type gives none by itself (texts, lists, numbers
# without a default), each unlike the key's default.
SAMPLES: dict[str, Any] = {
    "providers": ["local", "aws"],
    "events": "tcp://127.0.0.1:5555",
    "control": "tcp://127.0.0.1:5556",
    "metrics_address": "127.0.0.1:9464",
    "webhook.url": "https://hooks.example.com/services/T0/B0/secret",
    "webhook.proxy": "http://proxy.example.com:3128",
    "aws.url": "http://127.0.0.1:1338",
    "gcp.url": "127.0.0.1:1339",
    "azure.url": "http://127.0.0.1:1340",
    "azure.api_version": "2019-08-01",
    "azure.vm_name": "vmss_3",
    "azure.approve_types": ["Preempt"],
    "digitalocean.url": "http://127.0.0.1:1341",
    "digitalocean.droplet_id": "3164444",
    "digitalocean.droplet_name": "gpu-spot-1",
    "digitalocean.imap_host": "imap.example.com",
    "digitalocean.imap_port": 1993,
    "digitalocean.imap_mailbox": "Reclaims/DigitalOcean",
    "digitalocean.sender": r"@example\.com$",
    "digitalocean.subject": "reclaim|spot",
    "kubernetes.url": "https://127.0.0.1:6443",
    "kubernetes.node_name": "node-1",
    "kubernetes.context": "prod-admin",
    "kubernetes.taints": ["karpenter.sh/disrupted"],
    "kubernetes.extra_taints": ["example.com/reclaim"],
    "kubernetes.terminate_taints": ["aws-node-termination-handler/spot-itn"],
    "gcp.preemption_notice_duration": 20.0,
    "gcp.maintenance_notice": 120.0,
    "heartbeat_interval": 0.5,
    "aws.token_ttl": 3600,
}


def _leaves(model: type[BaseModel], prefix: str = "") -> list[tuple[str, FieldInfo]]:
    found: list[tuple[str, FieldInfo]] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += _leaves(annotation, f"{prefix}{name}.")
        else:
            found.append((prefix + name, field))
    return found


def _inner(annotation: Any) -> Any:
    """`X` of `X | None`."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _kind(key: str, field: FieldInfo) -> str:
    annotation = _inner(field.annotation)
    if get_origin(annotation) is list:
        return "list"
    if isinstance(annotation, type) and issubclass(annotation, PurePath):
        return "path"
    if annotation is bool:
        return "bool"
    if get_origin(annotation) is Literal:
        return "choice"
    if annotation is str:
        if key.rpartition(".")[2] == "url":
            return "url"
        return "str" if field.annotation is str else "optional str"
    if annotation is int:
        return "int"
    assert annotation is float and is_seconds(field.annotation), key
    return "float"


def _file_value(key: str, field: FieldInfo, kind: str) -> Any:
    if key in SAMPLES:
        return SAMPLES[key]
    default = field.get_default(call_default_factory=True)
    if kind == "path":
        # Relative to the file's directory; `_load` makes it, as some keys read it at load.
        return f"file-{key}"
    if kind == "bool":
        return not default
    if kind == "choice":
        return next(word for word in get_args(_inner(field.annotation)) if word != default)
    assert kind in ("int", "float") and isinstance(default, (int, float)), key
    return default + 1 if kind == "int" else default / 2 or 1.0


def _rows() -> list[tuple[str, str, Any]]:
    """(key, kind, the file's value) for every key; a seconds key once more with its file
    value written as a duration (`"90s"`)."""
    rows = []
    for key, field in _leaves(MODEL):
        kind = _kind(key, field)
        value = _file_value(key, field, kind)
        rows.append((key, kind, value))
        if kind == "float":
            rows.append((key, "duration", f"{value}s"))
    return rows


ROWS = _rows()


def test_every_kind_of_key_is_in_the_table() -> None:
    assert {kind for _, kind, _ in ROWS} == set(KINDS)


def _variable(key: str) -> str:
    return "FOREWARN_" + key.replace(".", "_").upper()


def _clean_environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if not name.startswith("FOREWARN_")}


def _value(key: str, loaded: Any) -> Any:
    for part in key.split("."):
        loaded = getattr(loaded, part)
    return loaded


def _make_file(directory: Path, key: str, path: Path) -> None:
    """The file a path key names, holding what it is read for at load."""
    if path.exists():
        return
    if key.endswith("ca_file"):
        # Checked at load for a PEM certificate.
        certificate, _ = self_signed_ca(directory, "forewarn-test-ca")
        certificate.rename(path)
    elif key.endswith("headers_file"):
        # Checked at load for `Name: value` lines.
        path.write_text("Authorization: Bearer secret\n")
    else:
        path.write_text("https://hooks.example.com/services/T0/B0/secret\n")


def _load(
    tmp_path: Path, key: str, written: Any, environment: dict[str, str], sets: list[str]
) -> Any:
    """The settings loaded from a config file setting `key` to `written` (none when None),
    with `environment` and `--set` items `sets` besides."""
    config = None
    if written is not None:
        *section, leaf = key.split(".")
        header = f"[{section[0]}]\n" if section else ""
        config = tmp_path / "forewarn.toml"
        config.write_text(f"{header}{leaf} = {json.dumps(written)}\n")
        if isinstance(written, str) and written.startswith("file-"):
            _make_file(tmp_path, key, tmp_path / written)
    overrides: dict[str, Any] = {}
    apply_sets(overrides, sets)
    with mock.patch.dict(os.environ, {**_clean_environment(), **environment}, clear=True):
        return load_settings(config, **overrides)


@pytest.mark.parametrize(("key", "kind", "written"), ROWS, ids=[f"{r[1]}:{r[0]}" for r in ROWS])
def test_a_blank_variable_leaves_the_files_value_standing(
    tmp_path: Path, key: str, kind: str, written: Any
) -> None:
    """`FOREWARN_KUBERNETES_CONTEXT=` beside the file's `context` unset it, with a warning
    that it overrode the file, while a blank path, endpoint or list left the file's value;
    a blank number, boolean or word was refused, exit 2."""
    alone = _load(tmp_path, key, written, {}, [])
    default = _load(tmp_path, key, None, {}, [])
    assert _value(key, alone) != _value(key, default), "the file's value must show"
    for blank in ("", " ", "\n"):
        loaded = _load(tmp_path, key, written, {_variable(key): blank}, [])
        assert _value(key, loaded) == _value(key, alone), repr(blank)
        assert loaded.overridden == []


@pytest.mark.parametrize(("key", "kind", "written"), ROWS, ids=[f"{r[1]}:{r[0]}" for r in ROWS])
def test_a_blank_set_leaves_the_files_value_standing(
    tmp_path: Path, key: str, kind: str, written: Any
) -> None:
    # `--set kubernetes.context="$CONTEXT"` with the shell variable unset, as the variable.
    alone = _load(tmp_path, key, written, {}, [])
    loaded = _load(tmp_path, key, written, {}, [f"{key}= "])
    assert _value(key, loaded) == _value(key, alone)
    assert loaded.overridden == []


@pytest.mark.parametrize(("key", "kind", "written"), ROWS, ids=[f"{r[1]}:{r[0]}" for r in ROWS])
def test_a_blank_variable_without_a_file_is_the_default(
    tmp_path: Path, key: str, kind: str, written: Any
) -> None:
    # Not refused: `FOREWARN_DIGITALOCEAN_SENDER=` sets no pattern, as no variable does.
    default = _load(tmp_path, key, None, {}, [])
    loaded = _load(tmp_path, key, None, {_variable(key): ""}, [])
    assert _value(key, loaded) == _value(key, default)


def test_a_blank_endpoint_flag_leaves_the_files_value_standing(tmp_path: Path) -> None:
    # `forewarn agent --events "$EVENTS"` with the variable unset bound the default endpoint,
    # where no client looked (they read the file's).
    loaded = _load(tmp_path, "events", "tcp://127.0.0.1:5555", {}, [])
    flagged = _load_with_flag(tmp_path, events="")
    assert flagged.events == loaded.events == "tcp://127.0.0.1:5555"
    assert flagged.overridden == []


def _load_with_flag(tmp_path: Path, **flags: Any) -> Any:
    with mock.patch.dict(os.environ, _clean_environment(), clear=True):
        return load_settings(tmp_path / "forewarn.toml", **flags)


BLANK = st.text(st.sampled_from(string.whitespace), max_size=4)


@settings(max_examples=examples(150), deadline=None)
@given(row=st.sampled_from(ROWS), blank=BLANK, by_set=st.booleans())
def test_any_whitespace_alone_sets_nothing(
    tmp_path_factory: pytest.TempPathFactory, row: tuple[str, str, Any], blank: str, by_set: bool
) -> None:
    key, _, written = row
    tmp_path = tmp_path_factory.mktemp("blank")
    alone = _load(tmp_path, key, written, {}, [])
    if by_set:
        loaded = _load(tmp_path, key, written, {}, [f"{key}={blank}"])
    else:
        loaded = _load(tmp_path, key, written, {_variable(key): blank}, [])
    assert _value(key, loaded) == _value(key, alone)
    assert loaded.overridden == []


def test_a_blank_set_leaves_the_flags_value_standing(tmp_path: Path) -> None:
    """`forewarn agent --runtime-dir DIR --set runtime_dir="$DIR"` with DIR unset: the blank
    `--set` replaced the flag's value and was then dropped as blank, so the agent bound its
    sockets in the default place (here FOREWARN_RUNTIME_DIR), not where the flag said."""
    flagged = tmp_path / "flagged-runtime"
    flagged.mkdir(mode=0o700)
    args = ("--runtime-dir", str(flagged), "--set", "runtime_dir=")
    with AgentProcess(tmp_path, args=args, runtime=flagged) as agent:
        status = agent.control({"op": "status"})
    assert status["agent"]["control"] == f"ipc://{flagged}/control"
