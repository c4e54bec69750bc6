"""`webhook.headers_file`: headers sent with each POST (a token for a receiver that asks for
one), read from a file so the secret stays out of the configuration, the log and status."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from forewarn.agent.notifications.settings import read_headers_file
from hypothesis import given
from hypothesis import strategies as st
from support import AgentProcess, agent_env, run_forewarn
from webhook_receiver import receiver

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py); tests/agent/test_agent.py starts them fresh.
pytestmark = pytest.mark.usefixtures("forked_agents")

TOKEN = "Bearer s3cr3t-t0ken"


def test_the_headers_of_the_file_go_with_each_post_and_nowhere_else(tmp_path: Path):
    headers = tmp_path / "webhook-headers"
    headers.write_text(f"# the receiver's token\nAuthorization: {TOKEN}\n\nX-Team:  gpu \n")
    with receiver(script=[500]) as hook:
        env = agent_env(
            tmp_path,
            FOREWARN_WEBHOOK_URL=hook.url + "/hook",
            FOREWARN_WEBHOOK_HEADERS_FILE=str(headers),
            FOREWARN_LOG_LEVEL="debug",
        )
        with AgentProcess(tmp_path, env=env) as agent:
            agent.control({"op": "notify", "action": "drain"})
            (delivery,) = hook.wait_for(1, timeout=10)
            status = agent.control({"op": "status"})
    assert delivery.headers["Authorization"] == TOKEN
    assert delivery.headers["X-Team"] == "gpu"
    assert delivery.headers["Content-Type"] == "application/json"
    assert "s3cr3t" not in agent.output()
    assert "s3cr3t" not in json.dumps(status)


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("Authorization Bearer s3cr3t\n", "line 1: not `Name: value`"),
        ("Bad Name: s3cr3t\n", "line 1: not a header name"),
        ("X-A: s3cr3t\x7f\n", "line 1: a control character"),
        ("Content-Length: 12\n", "line 1: Content-Length is the agent's to set"),
        ("Host: s3cr3t.example\n", "line 1: Host is the agent's to set"),
        ("X-A: 1\nx-a: 2\n", "line 2: X-A twice"),
        ("# nothing but a comment\n", "holds no header"),
    ],
)
def test_a_bad_headers_file_exits_2_naming_the_line_not_the_value(
    tmp_path: Path,
    text: str,
    complaint: str,
    run_forewarn_forked: Callable[..., subprocess.CompletedProcess[str]],
):
    headers = tmp_path / "webhook-headers"
    headers.write_bytes(text.encode())
    env = agent_env(
        tmp_path,
        FOREWARN_WEBHOOK_URL="http://127.0.0.1:9/hook",
        FOREWARN_WEBHOOK_HEADERS_FILE=str(headers),
    )
    # The first case as a fresh interpreter, the others forked from a process that loaded the
    # command line once (~0.02 CPU-s each instead of ~0.2; tests/conftest.py): the same
    # command, environment, exit code and stderr.
    run = run_forewarn if text.startswith("Authorization Bearer") else run_forewarn_forked
    result = run("agent", "--provider", "local", env=env)
    assert result.returncode == 2, result.stderr
    assert "webhook.headers_file" in result.stderr
    assert complaint in result.stderr
    assert "s3cr3t" not in result.stderr


def test_a_missing_headers_file_exits_2(tmp_path: Path):
    env = agent_env(
        tmp_path,
        FOREWARN_WEBHOOK_URL="http://127.0.0.1:9/hook",
        FOREWARN_WEBHOOK_HEADERS_FILE=str(tmp_path / "nonexistent"),
    )
    result = run_forewarn("agent", "--provider", "local", env=env)
    assert result.returncode == 2, result.stderr
    assert "webhook.headers_file" in result.stderr


@given(st.binary(max_size=200))
def test_any_headers_file_reads_as_headers_httpx_sends_or_a_value_error(data: bytes):
    import httpx

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    try:
        headers = read_headers_text(text)
    except ValueError as error:
        assert "\n" not in str(error)
        return
    assert headers
    # httpx takes every one as it is (it raised on a value it could not encode).
    httpx.Request("POST", "http://127.0.0.1/", headers=headers)


def read_headers_text(text: str) -> dict[str, str]:
    from forewarn.agent.notifications.settings import parse_headers

    return parse_headers(text)


def test_read_headers_file_names_the_file(tmp_path: Path):
    path = tmp_path / "h"
    path.write_text("Authorization Bearer x\n")
    with pytest.raises(ValueError, match=str(path)):
        read_headers_file(path)


def test_a_token_rotated_in_the_file_is_sent_from_the_next_post(tmp_path: Path):
    """A short-lived token that an agent (Vault's, a CronJob) writes anew: read only at start,
    the old one was sent until a restart, every notice answered 401 and dropped."""
    headers = tmp_path / "webhook-headers"
    headers.write_text("Authorization: Bearer one\n")
    with receiver() as hook:
        env = agent_env(
            tmp_path,
            FOREWARN_WEBHOOK_URL=hook.url + "/hook",
            FOREWARN_WEBHOOK_HEADERS_FILE=str(headers),
        )
        with AgentProcess(tmp_path, env=env) as agent:
            agent.control({"op": "notify", "action": "drain"})
            hook.wait_for(1)
            rotated = tmp_path / "webhook-headers.new"
            rotated.write_text("Authorization: Bearer two\n")
            rotated.replace(headers)
            agent.control({"op": "notify", "action": "drain", "note": "after"})
            first, second = hook.wait_for(2)
            # Broken for a moment (half written): the last good headers go on.
            headers.write_text("Authorization Bearer\n")
            agent.control({"op": "notify", "action": "drain", "note": "broken"})
            third = hook.wait_for(3)[2]
    assert first.headers["Authorization"] == "Bearer one"
    assert second.headers["Authorization"] == "Bearer two"
    assert third.headers["Authorization"] == "Bearer two"
    assert agent.output().count("webhook.headers_file") == 1
