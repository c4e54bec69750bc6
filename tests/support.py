"""Helpers shared by the tests: the agent as a real subprocess, real ZeroMQ peers, and an
environment that can never reach a real metadata address."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

import hypothesis
import pytest
import zmq
from forewarn.protocol.fields import CLOCK_AHEAD
from forewarn.protocol.wire import (
    TOPIC_NOTICE,
    TOPIC_REPLAY_PREFIX,
    allow_ipv6,
    new_replay_token,
    with_token,
)

# The toolkit forewarn.testing ships to users is the tests' own: one free_port, one eventually.
from forewarn.testing.waiting import eventually, free_port
from forked_ranks import RankLauncher, RankProcess

FORBIDDEN_HOSTS = ("169.254.169.254", "metadata.google.internal", "fd00:ec2::254", "metadata.goog")
# An address nothing listens on: a watcher pointed here fails fast instead of leaving loopback.
DEAD_LOOPBACK = "127.0.0.1:9"

_URL_KEYS = (
    "FOREWARN_AWS_URL",
    "FOREWARN_GCP_URL",
    "FOREWARN_AZURE_URL",
    "FOREWARN_DIGITALOCEAN_URL",
    "FOREWARN_KUBERNETES_URL",
    # The webhook's proxy: a test's webhook goes through a proxy on loopback or none.
    "FOREWARN_WEBHOOK_PROXY",
    *(f"{scheme}_{case}" for scheme in ("http", "https", "all") for case in ("proxy", "PROXY")),
)


def _assert_loopback(key: str, value: str) -> None:
    host = urlsplit(value if "//" in value else f"http://{value}").hostname or ""
    if host in FORBIDDEN_HOSTS or not (
        host == "localhost" or host.startswith("127.") or host == "::1"
    ):
        raise AssertionError(f"{key}={value!r} is not loopback: tests never leave this machine")


# Every xdist worker imports every test module to collect it. A module-level
# `pytest.importorskip("torch")` or `import lightning` therefore cost each worker seconds of
# CPU (torch ~2 s, lightning ~3 s more) whether or not it ran one of those tests. These two
# helpers keep the skip and the module-level name without the import.


# A property test's examples are the same on every run of the suite's own profile (derandomize,
# tests/conftest.py): each run re-checks one fixed draw, and what any draw found is kept as an
# `@example`. Its full count is drawn under `--hypothesis-profile=thorough` (the same examples,
# all of them: nightly) and `explore` (new ones); the suite's own run draws a third of it.
EXAMPLES_SHARE = 3
FULL_EXAMPLE_PROFILES = ("thorough", "explore")


# A suite run under `nohup` (or by a runner that ignores SIGHUP) hands its ignored SIGHUP to
# every child, and a test of what a terminal's hangup does then tested the nohup case instead
# (check 45a: three hangup tests failed under `nohup bash .ci/run`).
_SIGHUP_DEFAULT = (
    "import os, signal, sys; signal.signal(signal.SIGHUP, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def sighup_as_in_a_terminal() -> None:
    """SIGHUP at its default, as a job typed into a terminal has it (in a forked child)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def as_in_a_terminal(argv: list[str]) -> list[str]:
    """`argv` (its program an absolute path) started with SIGHUP at its default."""
    return [sys.executable, "-c", _SIGHUP_DEFAULT, *argv]


def examples(full: int) -> int:
    """`max_examples` for a property test whose full count is `full`: all of them under the
    thorough and explore profiles, a third (at least 20, or `full` below that) otherwise.
    Read as the test module is imported, after `--hypothesis-profile` has loaded."""
    # A verbosity option loads a profile named "<profile>-with-<verbosity>-verbosity".
    profile = hypothesis.settings.get_current_profile_name()
    if profile.split("-with-")[0] in FULL_EXAMPLE_PROFILES:
        return full
    return min(full, max(20, full // EXAMPLES_SHARE))


def requires(module: str) -> pytest.MarkDecorator:
    """Skip where `module` is not installed, found without importing it (`pytestmark =
    requires("torch")` in place of a module-level `pytest.importorskip("torch")`)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        found = False
    return pytest.mark.skipif(not found, reason=f"needs {module}")


class LazyModule:
    """A module imported on first attribute access: `torch = LazyModule("torch")` at module
    level, then `torch.randn(...)` in a test."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        # Collection probes every module-level name (`__test__`, fixture markers): a private
        # name must not import the module.
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        return getattr(importlib.import_module(self._name), attribute)


def fsynced_at_each_ack(monkeypatch: pytest.MonkeyPatch, guard: Any) -> list[set[str]]:
    """Record every path os.fsync is called on; the list gains, at each `guard.saved(...)`,
    the paths fsynced so far: what was on disk when the agent was told "saved"."""
    synced: set[str] = set()
    acked: list[set[str]] = []
    real_fsync, real_saved = os.fsync, guard.saved

    def fsync(fd: int) -> None:
        synced.add(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def saved(*args: Any, **kwargs: Any) -> Any:
        acked.append(set(synced))
        return real_saved(*args, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(guard, "saved", saved)
    return acked


@contextmanager
def refused_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A port every connection to is refused for as long as the block runs: bound, never
    listened on, so no other test's server can take it meanwhile (a fixed "closed" port such
    as 9 answered HTTP 404 once, in a run with other work on the machine)."""
    with socket.socket() as held:
        held.bind((host, 0))
        yield int(held.getsockname()[1])


# The old name, so branches written before the toolkit still run; new tests say eventually.
wait_until = eventually


async def eventually_async(
    check: Callable[[], Any],
    timeout: float = 10.0,
    what: str = "condition",
    interval: float = 0.01,
    alive: Callable[[], None] | None = None,
) -> Any:
    """`eventually` for a test's event loop; `alive` raises when what is being waited on died."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if alive is not None:
            alive()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


def self_signed_ca(directory: Path, name: str, dns: str | None = None) -> tuple[Path, Path]:
    """A CA certificate that is also the server's, for 127.0.0.1 (or for the host name `dns`
    alone), as a cluster CA signs the API server's, and its key: PEM files."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(dns)] if dns else [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class RotatingTls:
    """A simulator served over TLS with a certificate (`self_signed_ca`) that can be replaced,
    as an API server restarted with one of a rotated CA: `rotate` serves the new one and
    cuts every open connection."""

    def __init__(self, server: Any, cert: Path, key: Path) -> None:
        self.context = self._serving(cert, key)
        self.accepted: list[socket.socket] = []
        self.url = f"https://127.0.0.1:{server.port}"
        accept = server.httpd.socket.accept

        def get_request() -> tuple[socket.socket, Any]:
            raw, address = accept()
            wrapped = self.context.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
            self.accepted.append(wrapped)
            return wrapped, address

        server.httpd.get_request = get_request

    @staticmethod
    def _serving(cert: Path, key: Path) -> Any:
        import ssl

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        return context

    def rotate(self, cert: Path, key: Path) -> None:
        self.context = self._serving(cert, key)
        for connection in self.accepted:
            with suppress(OSError):  # closed already
                connection.shutdown(socket.SHUT_RDWR)


def wire_notice(**changes: Any) -> dict[str, Any]:
    """A valid v1 notice as it travels on the wire (a terminate, no deadline), with `changes`."""
    notice: dict[str, Any] = {
        "v": 1,
        "id": "aws/spot-itn/1",
        "seq": 17,
        "action": "terminate",
        "reason": "spot-interruption",
        "provider": "aws",
        "deadline": None,
        "noticed_at": "2026-11-30T03:10:00.120Z",
        "sent_at": "2026-11-30T03:10:00.121Z",
        "detail": {},
    }
    return {**notice, **changes}


def wire_heartbeat(**changes: Any) -> dict[str, Any]:
    """A valid v1 heartbeat as it travels on the wire (nothing active), with `changes`."""
    heartbeat: dict[str, Any] = {
        "v": 1,
        "seq": 18,
        "agent": "host/1/a",
        "version": "0.1.0",
        "providers": ["aws"],
        "active": [],
        "sent_at": "2026-11-30T03:10:00Z",
    }
    return {**heartbeat, **changes}


def local_notice(seq: int, action: str) -> Any:
    """A manual notice `local/<seq>` sent now, for an observer fed directly (not started)."""
    from forewarn.agent.protocol import Notice
    from forewarn.protocol.timefmt import utcnow

    now = utcnow()
    return Notice.model_validate(
        {
            "id": f"local/{seq}",
            "seq": seq,
            "action": action,
            "reason": "manual",
            "provider": "local",
            "noticed_at": now,
            "sent_at": now,
        }
    )


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes whose command line, environment, working directory or
    open files hold `text` (Dovecot's children name nothing but hold its log open)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
            places = [os.readlink(entry / "cwd")]
            places += [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if text.encode() in cmdline + environ or any(text in place for place in places):
            found.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return found


def agent_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment for an agent or client under test: its own runtime and state
    directories, no proxies, Google's metadata variables on a dead loopback port, and every
    provider URL checked to be loopback."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("FOREWARN_")
        and key.lower() not in ("http_proxy", "https_proxy", "all_proxy")
        # Inside a pod, `auto` would otherwise find the real API server.
        and not key.startswith("KUBERNETES_SERVICE")
    }
    runtime = tmp_path / "run"
    state = tmp_path / "state"
    runtime.mkdir(exist_ok=True)
    state.mkdir(exist_ok=True)
    env.update(
        FOREWARN_RUNTIME_DIR=str(runtime),
        FOREWARN_STATE_DIR=str(state),
        GCE_METADATA_HOST=DEAD_LOOPBACK,
        GCE_METADATA_IP=DEAD_LOOPBACK,
        NO_GCE_CHECK="true",
        NO_PROXY="*",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    for key in (*_URL_KEYS, "GCE_METADATA_HOST", "GCE_METADATA_IP"):
        if key in env:
            _assert_loopback(key, env[key])
    return env


def forewarn_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "forewarn.agent.cli", *args]


def run_forewarn(
    *args: str, env: dict[str, str], timeout: float = 30, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        forewarn_cmd(*args),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
    )


def run_agent_on(config: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`forewarn agent --provider local --config CONFIG`, run to its exit (a configuration
    refused: its exit code and its one line on stderr)."""
    return run_forewarn(
        "agent", "--provider", "local", "--config", str(config), env=env, timeout=60
    )


def run_forewarn_here(*args: str) -> subprocess.CompletedProcess[str]:
    """`forewarn ARGS` through the entry point's own `main`, in this process, read as
    `run_forewarn` reads the command's process: its exit code, and its stdout and stderr as
    text mode reads them (`\\r\\n` and `\\r` as `\\n`). For a command whose exit code and output
    are all a test checks (`forewarn render`: no environment of its own, no signal, no
    socket), without starting an interpreter that imports forewarn again (~0.2 CPU-s each).
    A test of the installed command itself still runs the process."""
    import contextlib
    import io

    from forewarn.agent.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as ended:  # --help and --version end as argparse ends them
            if ended.code is None or isinstance(ended.code, int):
                code = ended.code or 0
            else:  # as the interpreter ends on `sys.exit("text")`
                print(ended.code, file=sys.stderr)
                code = 1

    def as_text(written: str) -> str:
        return written.replace("\r\n", "\n").replace("\r", "\n")

    return subprocess.CompletedProcess(
        ["forewarn", *args], code, as_text(out.getvalue()), as_text(err.getvalue())
    )


# A control answer waits for the agent's state to be on disk (fsync): with the suite's eight
# workers building wheels and venvs, that took over 2 s once (a notify in a clean-clone run).
CONTROL_TIMEOUT = 10.0


def control(
    endpoint: str, request: dict[str, Any], timeout: float = CONTROL_TIMEOUT
) -> dict[str, Any]:
    """One request on the control socket; raises TimeoutError when nothing answers."""
    context = zmq.Context.instance()
    sock = context.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, int(timeout * 1000))
    sock.setsockopt(zmq.SNDTIMEO, int(timeout * 1000))
    try:
        allow_ipv6(sock, endpoint)
        sock.connect(endpoint)
        sock.send(json.dumps(request).encode())
        try:
            return json.loads(sock.recv())
        except zmq.Again:
            raise TimeoutError(f"no answer from {endpoint} within {timeout}s") from None
    finally:
        sock.close()


def _as_sent(notice: dict[str, Any]) -> dict[str, Any]:
    """`notice` less what a replay of it changes without the agent sending it as news."""
    sent = {key: value for key, value in notice.items() if key not in ("seq", "sent_at")}
    detail = sent.get("detail")
    if isinstance(detail, dict):
        sent["detail"] = {key: value for key, value in detail.items() if key != CLOCK_AHEAD}
    return sent


class Subscriber:
    """A raw SUB socket on the events endpoint, as any language would use it."""

    def __init__(self, endpoint: str, topics: tuple[str, ...] = ("notice",)) -> None:
        self.topics = topics
        self.sock = zmq.Context.instance().socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        # Heartbeats always, before the rest, for `ready`: the agent's replay starts with one,
        # and the socket sends its subscriptions in order, at each (re)connection too. Taken
        # only in `ready`, it came after the `notice` one, and an agent quick to replay sent
        # the replay's heartbeat before this socket took heartbeats. `recv` drops them unless
        # asked for.
        self.sock.setsockopt(zmq.SUBSCRIBE, b"heartbeat")
        for topic in topics:
            self.sock.setsockopt(zmq.SUBSCRIBE, topic.encode())
        # Last: the heartbeat of the replay it asks for lists the token, once the agent has
        # read every subscription before it (`client/<id>` too). Sent again at a reconnection.
        self.token = new_replay_token()
        self.sock.setsockopt(zmq.SUBSCRIBE, f"{TOPIC_REPLAY_PREFIX}{self.token}".encode())
        allow_ipv6(self.sock, endpoint)
        self.sock.connect(endpoint)
        self._early: list[tuple[str, dict[str, Any]]] = []
        # Replays the agent sent for this socket's token: one per (re)connection.
        self.answers = 0

    def ready(self, timeout: float = 30.0) -> Subscriber:
        """Wait until the agent has answered this subscription: from then on nothing sent is
        missed, the agent has read every topic it subscribed (a `client/<id>` is a client),
        and no replay of what was active when it joined is still to come.

        The agent answers with a heartbeat whose `replay_for` lists this socket's token, and
        then one notice for each id that heartbeat lists as active, each taking the next
        `seq`. A heartbeat without the token is not that answer: the agent also beats every
        second, and a loaded one reads a new subscription late, so its replay came after a
        notice sent meanwhile and a test read the repeat as news (CI, 6382ddd); with nothing
        active, a periodic heartbeat was taken for the replay of nothing, before the agent had
        read `client/<id>`. The messages read meanwhile that this subscriber asked for are
        kept for `recv`.

        A notice the agent sent live before it read this subscription (it was in force
        already) and then replayed is kept once: kept twice, a test read the repeat as the
        next news (a drain where it waited for the clear).

        Call it again only where the socket reconnects (a restarted agent): the replay it
        waits for is the one answering the socket's subscriptions.

        30 s by default, as `AgentProcess.start`: a guard against an agent that never answers,
        not a measure of how soon it does. 10 s failed at the suite's load (check 44a,
        test_the_agent_raises_a_reclaim_drain_once_across_restarts: an agent that had just
        answered its status request did not answer the subscription within 10 s)."""
        extra = "heartbeat" not in self.topics
        receives = any(TOPIC_NOTICE.startswith(topic) for topic in self.topics)
        deadline = time.monotonic() + timeout
        # The ids of this socket's replay still to come, and the seq the next one takes.
        awaited: list[str] | None = None
        next_seq = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sock.poll(int(left * 1000)):
                again = " (answered before: call ready() again only after a reconnection)"
                raise TimeoutError(
                    f"no heartbeat naming replay/{self.token} within {timeout}s"
                    + (again if self.answers else "")
                )
            topic, payload = self.sock.recv_multipart()
            name, message = topic.decode(), json.loads(payload)
            kept = name != "heartbeat" or not extra
            if name == "heartbeat" and self.token in message.get("replay_for", []):
                awaited, next_seq = list(message["active"]), message["seq"] + 1
                self.answers += 1
            elif (
                awaited
                and name == TOPIC_NOTICE
                and (message["id"], message["seq"]) == (awaited[0], next_seq)
            ):
                awaited.pop(0)
                next_seq += 1
                # The agent put the subscription in force before it read it: the notice went
                # out live too, and kept twice, a test read the repeat as the next news.
                kept = kept and not self._kept_already(message)
            if kept:
                self._early.append((name, message))
            if awaited == [] or (awaited is not None and not receives):
                return self

    def _kept_already(self, replayed: dict[str, Any]) -> bool:
        """Whether the last notice of `replayed`'s id kept for `recv` is the one it replays:
        the same but for what a replay changes without the agent sending it as news (its
        `seq` and `sent_at`, and the detail's clock_ahead_seconds, as `forewarn.testing`'s
        recorder counts it)."""
        same = [
            m for topic, m in self._early if topic == TOPIC_NOTICE and m["id"] == replayed["id"]
        ]
        return bool(same) and _as_sent(same[-1]) == _as_sent(replayed)

    def recv(self, timeout: float = 5.0) -> tuple[str, dict[str, Any]]:
        if self._early:
            return self._early.pop(0)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sock.poll(int(left * 1000)):
                raise TimeoutError(f"no message within {timeout}s")
            topic, payload = self.sock.recv_multipart()
            name = topic.decode()
            # Heartbeats (always taken, for `ready`) are not what was asked for.
            if any(name.startswith(wanted) for wanted in self.topics):
                return name, json.loads(payload)

    def notice(self, timeout: float = 5.0) -> dict[str, Any]:
        """The next message on the `notice` topic, skipping heartbeats."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no notice within {timeout}s")
            topic, message = self.recv(left)
            if topic == "notice":
                return message

    def drain(self, quiet: float = 0.3) -> list[dict[str, Any]]:
        """Every notice that arrives until `quiet` seconds pass with none."""
        found = []
        while True:
            try:
                found.append(self.notice(quiet))
            except TimeoutError:
                return found

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SimControl:
    """A simulator's `/_sim` control API over HTTP (standard library only, as a user's test or
    another language would speak it)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + "/_sim" + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"} if data is not None else {},
        )
        # No proxy for loopback, whatever the environment says.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=10) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            raise AssertionError(
                f"{method} /_sim{path}: {error.code} {error.read().decode(errors='replace')}"
            ) from None
        return json.loads(raw) if raw else None

    def raise_(self, kind: str, **fields: Any) -> str:
        """Raise a notice of `kind`; its id."""
        return str(self.request("POST", "/notices", {"kind": kind, **fields})["id"])

    def change(self, notice_id: str, **fields: Any) -> None:
        self.request("PATCH", f"/notices/{notice_id}", fields)

    def withdraw(self, notice_id: str) -> None:
        self.request("DELETE", f"/notices/{notice_id}")

    def state(self) -> dict[str, Any]:
        return dict(self.request("GET", "/state"))

    def fault(self, kind: str, **fields: Any) -> str:
        """Start a fault of the shared vocabulary (README, "Simulators"); its id."""
        return str(self.request("POST", "/faults", {"kind": kind, **fields})["id"])

    def end_fault(self, fault_id: str | None = None) -> None:
        """End one fault, or every fault."""
        self.request("DELETE", "/faults" if fault_id is None else f"/faults/{fault_id}")

    def requests(self, key: str) -> int:
        """How many requests the simulator has answered for `key`, e.g. "GET /path"."""
        return int(self.state().get("requests", {}).get(key, 0))


class WatcherRun:
    """A watcher's `watch()` as a task in the test's event loop, every report it emitted and
    when. The one in-process watcher harness; providers' tests add their own queries."""

    def __init__(self, watcher: Any) -> None:
        self.watcher = watcher
        self.reports: list[Any] = []
        self.times: list[float] = []
        self.task: asyncio.Task[None] | None = None

    @property
    def health(self) -> Any:
        return self.watcher.health

    def emit(self, report: Any) -> None:
        self.reports.append(report)
        self.times.append(time.monotonic())

    def summary(self) -> list[tuple[str, str]]:
        return [(report.action, report.id) for report in self.reports]

    def _alive(self) -> None:
        if self.task is not None and self.task.done():
            self.task.result()  # a watcher that crashed says why
            raise AssertionError("watch() returned on its own")

    async def until(
        self, check: Callable[[], Any], timeout: float = 10.0, what: str = "condition"
    ) -> Any:
        """Wait for `check()` to be true and return it; the failure shows the reports."""
        try:
            return await eventually_async(check, timeout, what, alive=self._alive)
        except AssertionError as error:
            raise AssertionError(
                f"{error}; reports={self.summary()} health={self.health}"
            ) from None

    async def count(self, n: int, timeout: float = 10.0) -> list[Any]:
        """The reports once there are at least `n`."""
        await self.until(lambda: len(self.reports) >= n, timeout, f"{n} reports")
        return self.reports

    async def report_at(self, timeout: float = 10.0, **match: Any) -> tuple[Any, float]:
        """The first report from now on whose fields equal `match`, and when it came."""
        start = len(self.reports)

        def found() -> tuple[Any, float] | None:
            for index in range(start, len(self.reports)):
                report = self.reports[index]
                if all(getattr(report, key) == value for key, value in match.items()):
                    return report, self.times[index]
            return None

        result: tuple[Any, float] = await self.until(found, timeout, f"a report {match}")
        return result

    async def polls(self, count: int = 1, timeout: float = 10.0) -> None:
        """Wait until the watcher has polled `count` more times (its health counts them)."""
        target = self.health.polls + count
        await self.until(lambda: self.health.polls >= target, timeout, f"{count} more polls")


RunT = TypeVar("RunT", bound=WatcherRun)


@asynccontextmanager
async def running_watcher(run: RunT) -> AsyncIterator[RunT]:
    """Run `run.watcher.watch()` until the block ends, then cancel it and close the watcher."""
    run.task = asyncio.create_task(run.watcher.watch(run.emit))
    try:
        yield run
    finally:
        run.task.cancel()
        with suppress(asyncio.CancelledError):
            await run.task
        await run.watcher.aclose()
    assert run.task.cancelled(), "watch() ended on its own"


# The launcher applies these two to each fork itself (tests/forked_ranks.py).
_APPLIED_TO_A_FORK = frozenset(("PYTHONUNBUFFERED", "PYTHONWARNINGS"))


def forkable(env: dict[str, str], launcher: RankLauncher) -> bool:
    """Whether a process forked from `launcher` with `env` starts as `python` with `env`
    would. An interpreter reads the other PYTHON* variables as it starts, which a fork has
    done already: an agent whose environment sets one otherwise than the launcher's (a
    `PYTHONPATH` to a sitecustomize, `shifted_wall_clock`) starts as a fresh interpreter."""
    keys = {key for key in (*env, *launcher.env) if key.startswith("PYTHON")}
    return all(env.get(key) == launcher.env.get(key) for key in keys - _APPLIED_TO_A_FORK)


class AgentProcess:
    """`forewarn agent` as a real subprocess, ready once its control socket answers.

    In a test that uses the `forked_agents` fixture (tests/conftest.py), each start forks
    `python -m forewarn.agent.cli agent ...` from a launcher that loaded the agent's modules
    once (tests/forked_ranks.py): still its own process, pid, environment, working
    directory, sockets, signals and exit code, for ~0.03 CPU-s instead of a fresh
    interpreter's ~0.23. `forked` says which way this one started. Its /proc/<pid>/cmdline
    and environ are the launcher's (a fork execs nothing): a test that reads them, or that
    wraps `argv` or sets a PYTHON* variable (which start it fresh), keeps a fresh agent."""

    # Set by the `forked_agents` fixture for the test that uses it.
    launcher: ClassVar[RankLauncher | None] = None

    def __init__(
        self,
        tmp_path: Path,
        providers: tuple[str, ...] = ("local",),
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        *,
        runtime: Path | None = None,
        events: str | None = None,
        control: str | None = None,
        cwd: Path | None = None,
    ) -> None:
        """`runtime`, `events` and `control` say where the agent listens when `env` does not
        (an agent set up by its config file); `cwd` is its working directory."""
        self.tmp_path = tmp_path
        self.cwd = cwd
        self.env = env if env is not None else agent_env(tmp_path)
        self.runtime = runtime or Path(self.env["FOREWARN_RUNTIME_DIR"])
        self.events = events or self.env.get("FOREWARN_EVENTS", f"ipc://{self.runtime}/events")
        self.control_endpoint = control or self.env.get(
            "FOREWARN_CONTROL", f"ipc://{self.runtime}/control"
        )
        provider_args = [arg for name in providers for arg in ("--provider", name)]
        self.argv = forewarn_cmd("agent", *provider_args, *args)
        self.proc: subprocess.Popen[str] | RankProcess | None = None
        self.forked = False
        self.log_path = tmp_path / f"agent-{int(time.time() * 1000)}.log"

    def start(self, timeout: float = 30.0) -> AgentProcess:
        self._log = self.log_path.open("w")
        launcher = AgentProcess.launcher
        # Only `python -m forewarn.agent.cli ...` as built here: not an argv a test replaced
        # (`setpriv ... python -m ...` drops capabilities before the interpreter starts).
        interpreter, module = forewarn_cmd()[:2], forewarn_cmd()[2]
        self.forked = (
            launcher is not None
            and self.argv[:3] == [*interpreter, module]
            and forkable(self.env, launcher)
        )
        if launcher is not None and self.forked:
            self.proc = launcher.start(
                f"-m {module}", self.argv[3:], self.env, output=self._log.fileno(), cwd=self.cwd
            )
        else:
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                text=True,
                cwd=self.cwd,
            )
        deadline = time.monotonic() + timeout
        # Each status request waits longer than the last: on a loaded node an agent that had
        # logged "serving" 13 s before answered no request within 0.5 s, and the test said
        # "agent not ready within 20s" (test_fault_matrix[digitalocean], beside 5 busy loops).
        wait = 0.5
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited with {self.proc.returncode}:\n{self.output()}")
            left = deadline - time.monotonic()
            try:
                if self.control({"op": "status"}, timeout=max(0.05, min(wait, left))).get("ok"):
                    return self
            except TimeoutError:
                wait = min(wait * 2, 4.0)
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"agent not ready within {timeout}s:\n{self.output()}")

    def control(self, request: dict[str, Any], timeout: float = CONTROL_TIMEOUT) -> dict[str, Any]:
        """A request as the agent's own user sends it: with the control token when its
        endpoint needs one."""
        return control(
            self.control_endpoint, with_token(self.control_endpoint, request, self.runtime), timeout
        )

    def subscriber(self, topics: tuple[str, ...] = ("notice",), ready: bool = True) -> Subscriber:
        """A subscriber that, unless `ready=False`, has seen the first heartbeat."""
        sub = Subscriber(self.events, topics)
        return sub.ready() if ready else sub

    def output(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def metrics_url(self, timeout: float = 10.0) -> str:
        """The agent's metrics server, as it logged it (`http://HOST:PORT`): started with
        `metrics_address` port 0, it listens where the kernel put it, a port no other test
        can take between a probe and the agent's bind."""
        found = eventually(
            lambda: re.search(r"serving metrics on (http://\S+)/metrics", self.output()),
            timeout,
            "the metrics address in the agent's log",
        )
        return str(found.group(1))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 5.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def kill(self) -> int:
        return self.stop(signal.SIGKILL)

    def __enter__(self) -> AgentProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SignalHandlers:
    """The handlers of `signums` as a test found them, put back as the `with` ends whatever
    the test did: a guard a test left open must not take the next test's SIGTERM.
    `now()` is what they are at a point of the test, to compare with `before`."""

    def __init__(self, signums: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> None:
        self.before = {signum: signal.getsignal(signum) for signum in signums}

    def now(self) -> dict[int, Any]:
        return {signum: signal.getsignal(signum) for signum in self.before}

    def __enter__(self) -> SignalHandlers:
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.before.items():
            signal.signal(signum, handler)


def resume_steps_lost(agent: AgentProcess, step: int) -> str:
    """What `agent` logged of a framework's resume at `step`, once it has: the restore must be
    timed (`restore=` a number of seconds, not `none`); returns its `steps_lost=` field."""
    pattern = rf"resume of \S+ at step {step}: restore=(\S+) steps_lost=(\S+)"
    found = eventually(lambda: re.search(pattern, agent.log_path.read_text()), what=pattern)
    assert found.group(1) != "none", found[0]
    assert float(found.group(1).rstrip("s")) >= 0, found[0]
    return str(found.group(2))


@contextmanager
def running_agent(tmp_path: Path, **kwargs: Any) -> Iterator[AgentProcess]:
    agent = AgentProcess(tmp_path, **kwargs).start()
    try:
        yield agent
    finally:
        agent.stop()


__all__ = [
    "DEAD_LOOPBACK",
    "AgentProcess",
    "LazyModule",
    "SignalHandlers",
    "SimControl",
    "Subscriber",
    "WatcherRun",
    "agent_env",
    "control",
    "eventually",
    "eventually_async",
    "examples",
    "fill_disk",
    "forewarn_cmd",
    "free_port",
    "requires",
    "resume_steps_lost",
    "run_agent_on",
    "run_forewarn",
    "running_agent",
    "running_watcher",
    "shifted_wall_clock",
    "wait_until",
]


@contextmanager
def tmpfs_disk(tmp_path: Path, size: str) -> Iterator[Path]:
    """A real tmpfs of `size` (mount's `size=`, e.g. "4m") at `tmp_path/disk`, unmounted at
    the end: a disk that really fills up or is really read-only. Root only; the test is
    skipped where it cannot be mounted."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def fill_disk(disk: Path) -> None:
    """Take every free block of the file system of `disk` (a `tmpfs_disk`), as a checkpoint
    writer does before it fails: in `disk/checkpoint.pt`, which frees them when removed."""
    fd = os.open(disk / "checkpoint.pt", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (65536, 4096, 1):
            try:
                while os.write(fd, b"\0" * size):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)


# A sitecustomize that runs a Python process on a wall clock off the machine's by the number
# of seconds in the file $TEST_WALL_CLOCK_OFFSET_FILE, read at each reading (`datetime.now`,
# `time.time`): writing another number there is a step of that process's wall clock, as NTP
# makes one. The boot and monotonic clocks are left be, as a step leaves them.
_SHIFTED_WALL_CLOCK = """\
import datetime as _datetime
import os
import time

_path = os.environ["TEST_WALL_CLOCK_OFFSET_FILE"]
_time = time.time
_real = _datetime.datetime


def _offset():
    try:
        with open(_path) as file:
            return float(file.read() or 0)
    except (OSError, ValueError):
        return 0.0


class _Shifted(_real):
    @classmethod
    def now(cls, tz=None):
        return _real.now(tz) + _datetime.timedelta(seconds=_offset())


_datetime.datetime = _Shifted
time.time = lambda: _time() + _offset()
time.time_ns = lambda: int(time.time() * 1e9)
"""


def shifted_wall_clock(tmp_path: Path, seconds: float = 0.0) -> tuple[dict[str, str], Path]:
    """Environment entries that run a Python process (an agent) on a wall clock `seconds` off
    the machine's, and the file holding the offset: write another number of seconds to it to
    step that clock."""
    site = tmp_path / "shifted-clock"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_SHIFTED_WALL_CLOCK)
    offset = site / "offset"
    offset.write_text(str(seconds))
    return {"PYTHONPATH": str(site), "TEST_WALL_CLOCK_OFFSET_FILE": str(offset)}, offset
