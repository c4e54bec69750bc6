"""The webhook through an HTTP proxy: `webhook.proxy`, else the environment's, as curl reads it.

A proxy on loopback stands in for a cluster's egress proxy: the receiver of `webhook_receiver`
answers the proxied POST itself, which is what an HTTP proxy hands on (the absolute URL)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from forewarn.agent.notifications.proxy import (
    NOT_A_PROXY,
    SOCKS_REFUSED,
    ProxyError,
    webhook_proxy,
)
from forewarn.agent.notifications.settings import WebhookSettings
from hypothesis import example, given
from hypothesis import strategies as st
from support import AgentProcess, agent_env, free_port, run_forewarn
from webhook_receiver import receiver

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py); tests/agent/test_agent.py starts them fresh.
pytestmark = pytest.mark.usefixtures("forked_agents")

SECRET_PATH = "/hooks/T000/B000/s3cr3t-token"
NO_PROXIES = {name: "" for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")}


def test_a_proxy_in_the_environment_carries_the_webhook(tmp_path: Path):
    """A cluster whose only way out is the proxy of HTTPS_PROXY: the webhook read no proxy,
    and every notice failed to reach its receiver."""
    unreachable = f"http://127.0.0.1:{free_port()}"  # only the proxy reaches it
    with receiver() as proxy:
        env = agent_env(
            tmp_path,
            **{**NO_PROXIES, "HTTP_PROXY": proxy.url},
            FOREWARN_WEBHOOK_URL=unreachable + SECRET_PATH,
        )
        with AgentProcess(tmp_path, env=env) as agent:
            agent.control({"op": "notify", "action": "drain", "note": "through"})
            (delivery,) = proxy.wait_for(1, timeout=20)
        log = agent.output()
    # An HTTP proxy is asked for the absolute URL.
    assert delivery.path == unreachable + SECRET_PATH
    assert delivery.body["detail"]["note"] == "through"
    assert f"through the proxy {proxy.url} (from HTTP_PROXY)" in log
    assert "s3cr3t" not in log


def test_no_proxy_naming_the_receiver_posts_to_it_directly(tmp_path: Path):
    with receiver() as proxy, receiver() as hook:
        env = agent_env(
            tmp_path,
            **{**NO_PROXIES, "http_proxy": proxy.url, "no_proxy": "localhost,127.0.0.1"},
            FOREWARN_WEBHOOK_URL=hook.url + SECRET_PATH,
        )
        with AgentProcess(tmp_path, env=env) as agent:
            agent.control({"op": "notify", "action": "drain"})
            (delivery,) = hook.wait_for(1, timeout=20)
        assert delivery.path == SECRET_PATH
        assert proxy.attempts == 0
    assert "through the proxy" not in agent.output()


def test_webhook_proxy_wins_over_the_environment(tmp_path: Path):
    unreachable = f"http://127.0.0.1:{free_port()}"
    with receiver() as proxy:
        env = agent_env(
            tmp_path,
            **{**NO_PROXIES, "HTTP_PROXY": f"http://127.0.0.1:{free_port()}"},
            FOREWARN_WEBHOOK_URL=unreachable + SECRET_PATH,
            FOREWARN_WEBHOOK_PROXY=proxy.url.removeprefix("http://"),  # host:port, as written
        )
        with AgentProcess(tmp_path, env=env) as agent:
            agent.control({"op": "notify", "action": "drain"})
            (delivery,) = proxy.wait_for(1, timeout=20)
        assert delivery.path == unreachable + SECRET_PATH
    assert "(from webhook.proxy)" in agent.output()


@pytest.mark.parametrize(
    ("env", "complaint"),
    [
        ({"HTTPS_PROXY": "socks5://user:pa55word@127.0.0.1:1080"}, "HTTPS_PROXY: a SOCKS proxy"),
        ({"https_proxy": "http://user:pa55word@127.0.0.1:99999"}, "https_proxy: not a proxy URL"),
        ({"ALL_PROXY": "http://127.0.0.1 :3128/pa55word"}, "ALL_PROXY: not a proxy URL"),
        ({"FOREWARN_WEBHOOK_PROXY": "ftp://pa55word@127.0.0.1"}, "webhook.proxy"),
    ],
)
def test_a_proxy_the_webhook_cannot_use_exits_2_naming_it(
    env: dict[str, str],
    complaint: str,
    tmp_path: Path,
    run_forewarn_forked: Callable[..., subprocess.CompletedProcess[str]],
):
    given_env = agent_env(
        tmp_path,
        **{**NO_PROXIES, **env},
        FOREWARN_WEBHOOK_URL="https://127.0.0.1:1" + SECRET_PATH,
    )
    # The first case as a fresh interpreter, the others forked from a process that loaded the
    # command line once (~0.02 CPU-s each instead of ~0.2; tests/conftest.py): the same
    # command, environment, exit code and stderr.
    run = run_forewarn if "HTTPS_PROXY" in env else run_forewarn_forked
    result = run("agent", "--provider", "local", env=given_env)
    assert result.returncode == 2, result.stderr
    assert complaint in result.stderr
    assert "pa55word" not in result.stderr
    assert "s3cr3t" not in result.stderr


@pytest.mark.parametrize(
    ("url", "environ", "chosen"),
    [
        ("https://hooks.example/x", {"HTTPS_PROXY": "proxy:3128"}, "http://proxy:3128"),
        ("https://hooks.example/x", {"HTTP_PROXY": "http://proxy:3128"}, None),
        ("http://hooks.example/x", {"HTTP_PROXY": "http://proxy:3128"}, "http://proxy:3128"),
        ("https://hooks.example/x", {"ALL_PROXY": "http://all:1"}, "http://all:1"),
        (
            "https://hooks.example/x",
            {"https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:1"},
            "http://lower:1",
        ),
        (
            "https://hooks.example/x",
            {"https_proxy": " ", "HTTPS_PROXY": "http://u:1"},
            "http://u:1",
        ),
        ("https://hooks.example/x", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "*"}, None),
        (
            "https://a.hooks.example/x",
            {"HTTPS_PROXY": "http://p:1", "no_proxy": "hooks.example"},
            None,
        ),
        ("https://hooks.example/x", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": ".example"}, None),
        (
            "https://hooks.example/x",
            {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "other.example"},
            "http://p:1",
        ),
        (
            "https://u:p@hooks.example:8443/x",
            {"HTTPS_PROXY": "https://p:1", "NO_PROXY": "hooks.example"},
            None,
        ),
    ],
)
def test_the_proxy_is_chosen_as_curl_chooses_it(
    url: str, environ: dict[str, str], chosen: str | None
):
    proxy = webhook_proxy(None, url, environ)
    assert (None if proxy is None else proxy.url) == chosen


@pytest.mark.parametrize(
    ("url", "no_proxy", "bypassed"),
    [
        ("https://hooks.example/x", "hooks.example:443", True),
        ("https://hooks.example/x", "hooks.example:8443", False),
        ("https://hooks.example:8443/x", "hooks.example:8443", True),
        ("http://[::1]:8080/x", "::1", True),
        ("http://[::1]:8080/x", "[::1]:8080", True),
        ("http://[::1]:8080/x", "[::1]:9090", False),
        ("https://HOOKS.Example/x", " other , .EXAMPLE ", True),
        ("https://badexample/x", "example", False),
        ("https://hooks.example/x", ",,", False),
        # CIDR blocks, as a cluster's NO_PROXY names its pod and service networks (curl
        # reads them since 7.86): an in-cluster receiver was posted to through the proxy.
        ("http://10.96.0.15:8080/x", "10.0.0.0/8", True),
        ("http://10.96.0.15:8080/x", ".svc, 10.96.0.0/12", True),
        ("http://11.0.0.1/x", "10.0.0.0/8", False),
        ("http://[fd00::7]:8080/x", "fd00::/8", True),
        ("http://[fd00::7]:8080/x", "[fd00::]/8", True),
        ("https://hooks.example/x", "10.0.0.0/8", False),
        ("http://10.0.0.1/x", "10.0.0.0/33", False),
    ],
)
def test_no_proxy_is_read_as_curl_reads_it(url: str, no_proxy: str, bypassed: bool):
    proxy = webhook_proxy(None, url, {"ALL_PROXY": "http://p:1", "NO_PROXY": no_proxy})
    assert (proxy is None) == bypassed


@given(
    st.text(max_size=40),
    st.sampled_from(["https://hooks.example/x", "http://[::1]:1/x", "http://10.1.2.3/x"]),
)
def test_any_no_proxy_value_bypasses_or_not_without_error(no_proxy: str, url: str):
    proxy = webhook_proxy(None, url, {"ALL_PROXY": "http://p:1", "NO_PROXY": no_proxy})
    assert proxy is None or proxy.url == "http://p:1"


def test_the_setting_reads_as_the_environment_does():
    assert WebhookSettings(proxy="proxy.corp:3128").proxy == "http://proxy.corp:3128"
    assert WebhookSettings(proxy="  ").proxy is None
    with pytest.raises(ValueError, match="SOCKS"):
        WebhookSettings(proxy="socks5h://proxy.corp:1080")


PROXY_LIKE = st.from_regex(
    r"\A(https?://|socks5://|HTTP://)?[a-z0-9:@.\[\]%-]{0,20}(:[0-9]{0,6})?/?\Z"
)


@given(st.one_of(st.text(max_size=60), PROXY_LIKE))
@example("http://user:pass@[::1]:3128")
@example("[::1]:3128")
@example("http://h:0")
def test_any_proxy_value_is_one_httpx_takes_or_a_named_refusal(value: str):
    """Whatever HTTPS_PROXY holds: a proxy httpx accepts, none, or a ProxyError naming the
    variable and never the value (it may hold a password)."""
    try:
        proxy = webhook_proxy(None, "https://hooks.example/x", {"HTTPS_PROXY": value})
    except ProxyError as error:
        # One of its fixed messages: the value, which may hold a password, is never echoed.
        name, _, why = str(error).partition(": ")
        assert name == "HTTPS_PROXY"
        assert why in (SOCKS_REFUSED, NOT_A_PROXY)
        return
    if proxy is not None:
        httpx.AsyncClient(proxy=proxy.url, trust_env=False)
        shown = urlsplit(proxy.shown)  # as logs name it: no password
        assert shown.username is None and shown.password is None
        assert shown.hostname == urlsplit(proxy.url).hostname
