"""A watcher that cannot reach its endpoint names the endpoint it tried, in `forewarn status`
and in its log line: the operator's question is "which address?", and the answer is not
always the one they set (a kubeconfig's `server:`, a `~/.kube/config` left from another
cluster, `KUBERNETES_SERVICE_HOST`).

found: `forewarn agent --provider kubernetes` with a kubeconfig whose server was a closed
port said `transport: ConnectError: All connection attempts failed` and nothing of where; so
did `--provider gcp` with `gcp.url` on a closed port. httpx's connect errors carry the request,
not its address in their message. Azure's first lookup (this VM's name) said the bare message
in parentheses: `(All connection attempts failed)`, and `()` for a reset connection.
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from forewarn.providers.errortext import error_text
from hypothesis import given, settings
from hypothesis import strategies as st
from support import AgentProcess, agent_env, eventually, examples, refused_port

KUBECONFIG = """\
apiVersion: v1
kind: Config
current-context: c
clusters:
- name: k
  cluster:
    server: http://127.0.0.1:{port}
contexts:
- name: c
  context: {{cluster: k, user: u}}
users:
- name: u
  user:
    token: not-a-secret
"""


def _health(agent: AgentProcess, provider: str) -> dict[str, Any]:
    reply = agent.control({"op": "status"})
    return next(entry for entry in reply["health"] if entry["name"] == provider)


# The kind of error each watcher's first request reports when its endpoint is closed.
FIRST_ERROR = {"kubernetes": "transport", "gcp": "transport", "azure": "vm-name"}


@pytest.mark.parametrize("provider", sorted(FIRST_ERROR))
def test_a_closed_endpoint_is_named_in_status_and_log(provider: str, tmp_path: Path) -> None:
    kind = FIRST_ERROR[provider]
    with refused_port() as port:
        if provider == "kubernetes":
            kubeconfig = tmp_path / "kubeconfig"
            kubeconfig.write_text(KUBECONFIG.format(port=port))
            args: tuple[str, ...] = ("--set", f"kubernetes.kubeconfig={kubeconfig}")
            env = agent_env(tmp_path, NODE_NAME="n1")
        else:
            args = ("--set", f"{provider}.url=http://127.0.0.1:{port}")
            env = agent_env(tmp_path)
        address = f"http://127.0.0.1:{port}"
        with AgentProcess(tmp_path, (provider,), args, env) as agent:
            health = eventually(
                lambda: (found := _health(agent, provider))["last_error"] == kind and found,
                20,
                "the error in status",
            )
            assert address in health["last_error_message"], health
            line = eventually(
                lambda: [
                    line for line in agent.output().splitlines() if f"{provider}: {kind}:" in line
                ],
                20,
                "the error's log line",
            )[0]
            assert address in line, line


@settings(max_examples=examples(60))
@given(
    scheme=st.sampled_from(["http", "https"]),
    host=st.sampled_from(["127.0.0.1", "localhost", "[::1]", "metadata.example"]),
    port=st.integers(1, 65535),
    path=st.text(alphabet="abc/?=&", max_size=20),
    kind=st.sampled_from([httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadError]),
    message=st.text(max_size=20),
)
def test_an_httpx_error_names_the_endpoint_and_nothing_past_it(
    scheme: str, host: str, port: int, path: str, kind: type[httpx.RequestError], message: str
) -> None:
    request = httpx.Request("GET", f"{scheme}://user:secret@{host}:{port}/{path}")
    text = error_text(kind(message, request=request))
    assert text.startswith(f"{kind.__name__}"), text
    assert str(request.url.copy_with(path="/", query=None, userinfo=b"")).rstrip("/") in text
    assert "secret" not in text.replace(message, "")
    assert path.strip("/") == "" or f"/{path}" not in text.replace(message, "")


def test_an_error_without_a_request_reads_as_before() -> None:
    assert error_text(httpx.ConnectError("refused")) == "ConnectError: refused"


def test_a_message_that_names_the_endpoint_is_not_given_it_twice() -> None:
    request = httpx.Request("GET", "http://127.0.0.1:8/api/v1/nodes")
    error = httpx.ReadError("GET http://127.0.0.1:8/api/v1/nodes: cut", request=request)
    assert error_text(error) == "ReadError: GET http://127.0.0.1:8/api/v1/nodes: cut"


@contextmanager
def resetting_port() -> Iterator[int]:
    """A loopback port whose every connection is reset once its request is read."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                with contextlib.suppress(OSError):
                    conn.recv(65536)
                # Linger 0: close sends RST, not FIN.
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        done.set()
        thread.join()
        server.close()


def test_azure_s_name_lookup_reset_is_said_as_a_reset(tmp_path: Path) -> None:
    """It read `cannot read this VM's name from /metadata/instance/compute ()`."""
    with resetting_port() as port:
        args = ("--set", f"azure.url=http://127.0.0.1:{port}")
        with AgentProcess(tmp_path, ("azure",), args) as agent:
            health = eventually(
                lambda: (found := _health(agent, "azure"))["last_error"] == "vm-name" and found,
                20,
                "the name lookup's error in status",
            )
            message = health["last_error_message"]
            assert "()" not in message, message
            assert "Connection reset by peer" in message, message
            assert f"http://127.0.0.1:{port}" in message, message


class _WebServer(BaseHTTPRequestHandler):
    """A web server that is not the metadata server: 404 and a page, no Metadata-Flavor."""

    def do_GET(self) -> None:
        body = b"<html><body><h1>404 Not Found</h1></body></html>"
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_gcp_url_on_a_web_server_is_said_not_the_metadata_server(tmp_path: Path) -> None:
    """`gcp.url` on another web server: status said `http-404: instance/preempted: HTTP 404`
    for the notice keys, never that the answer was not the metadata server's."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _WebServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        args = ("--set", f"gcp.url=http://127.0.0.1:{server.server_port}")
        with AgentProcess(tmp_path, ("gcp",), args) as agent:
            eventually(
                lambda: re.search(r"gcp: \S+: instance/preempted:", agent.output()),
                20,
                "the preempted key's error in the log",
            )
            lines = [
                line
                for line in agent.output().splitlines()
                if re.search(r"gcp: \S+: instance/(preempted|maintenance-event):", line)
            ]
            assert lines and all("not the metadata server" in line for line in lines), lines
            message = _health(agent, "gcp")["last_error_message"]
            assert "not the metadata server" in message, message
    finally:
        server.shutdown()
        server.server_close()


def test_kubernetes_url_on_a_web_server_is_said_not_the_api_server(tmp_path: Path) -> None:
    """`kubernetes.url` on another web server: status said `http-404: list: 404 <html>...`,
    with nothing on what to check (the API server always has the node list, and answers its
    errors with a Kubernetes Status)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _WebServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        env = agent_env(tmp_path, NODE_NAME="n1")
        args = ("--set", f"kubernetes.url={url}")
        with AgentProcess(tmp_path, ("kubernetes",), args, env) as agent:
            health = eventually(
                lambda: (
                    (found := _health(agent, "kubernetes"))["last_error"] == "http-404" and found
                ),
                20,
                "the list's 404 in status",
            )
            message = health["last_error_message"]
            assert "not the API server" in message and url in message, message
    finally:
        server.shutdown()
        server.server_close()
