"""A value in quotes where no shell removes them: a Docker `--env-file` line
(`FOREWARN_STATE_DIR="/var/lib/fw"`), a systemd `ExecStart=... --set state_dir="/x"` or a
`--set 'node_name="node-1"'` copied from the TOML file. Each was read with its quotes: a
node named `"node-1"` that was never found, a state directory named `"` in the working
directory. One pair of matching quotes around a whole value is TOML's string, as in the file."""

from __future__ import annotations

import json
import os
from typing import Any
from unittest import mock

from forewarn.agent.cli import apply_sets
from forewarn.agent.config import load_settings
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import examples

# (key, a value it takes, as the environment writes it)
SAMPLES = [
    ("kubernetes.node_name", "node-1"),
    ("state_dir", "/var/lib/fw-test"),
    ("exit_margin", "45s"),
    ("telemetry", "false"),
    ("azure.approve", "immediately"),
    ("providers", "local,aws"),
    ("aws.url", "http://127.0.0.1:1338"),
    ("digitalocean.sender", r"@example\.com$"),
    ("webhook.retries", "3"),
]


def _value(key: str, loaded: Any) -> Any:
    for part in key.split("."):
        loaded = getattr(loaded, part)
    return loaded


def _clean() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if not name.startswith("FOREWARN_")}


def _from_environment(key: str, text: str) -> Any:
    variable = "FOREWARN_" + key.replace(".", "_").upper()
    with mock.patch.dict(os.environ, {**_clean(), variable: text}, clear=True):
        return _value(key, load_settings())


def _from_set(key: str, text: str) -> Any:
    overrides: dict[str, Any] = {}
    apply_sets(overrides, [f"{key}={text}"])
    with mock.patch.dict(os.environ, _clean(), clear=True):
        return _value(key, load_settings(**overrides))


@settings(max_examples=examples(100), deadline=None)
@given(
    sample=st.sampled_from(SAMPLES),
    quote=st.sampled_from(['"', "'"]),
    source=st.sampled_from([_from_environment, _from_set]),
)
@example(sample=("kubernetes.node_name", "node-1"), quote='"', source=_from_set)
@example(sample=("state_dir", "/var/lib/fw-test"), quote='"', source=_from_environment)
def test_a_quoted_value_reads_as_the_value(
    sample: tuple[str, str], quote: str, source: Any
) -> None:
    key, text = sample
    quoted = json.dumps(text) if quote == '"' else f"'{text}'"
    assert source(key, quoted) == source(key, text)


def test_quotes_inside_a_value_or_unmatched_are_kept() -> None:
    assert _from_environment("kubernetes.node_name", 'a"b') == 'a"b'
    assert _from_set("kubernetes.context", "'prod") == "'prod"
    assert _from_set("kubernetes.context", '"a","b"') == '"a","b"'


def test_a_quoted_blank_is_blank_and_sets_nothing() -> None:
    assert _from_environment("exit_margin", '""') == 30
    assert _from_set("exit_margin", "''") == 30


@given(quote=st.sampled_from(['"', "'"]))
def test_the_clients_find_the_agent_where_it_reads_a_quoted_runtime_dir(quote: str) -> None:
    """A Docker env-file shared by the agent and the job: the clients must unquote
    FOREWARN_RUNTIME_DIR, FOREWARN_EVENTS and FOREWARN_CONTROL as the agent does, or they look
    for it in a directory named with the quotes."""
    from pathlib import Path

    from forewarn.protocol.wire import default_endpoints, runtime_dir

    variables = {
        "FOREWARN_RUNTIME_DIR": f"{quote}/tmp/fw-quoted{quote}",
        "FOREWARN_CONTROL": f"{quote}ipc:///tmp/fw-quoted/ctl{quote}",
    }
    with mock.patch.dict(os.environ, {**_clean(), **variables}, clear=True):
        agent = load_settings()
        assert runtime_dir() == agent.runtime_dir == Path("/tmp/fw-quoted")
        events, control = default_endpoints()
        assert (events, control) == agent.resolved_endpoints()
        assert control == "ipc:///tmp/fw-quoted/ctl"
