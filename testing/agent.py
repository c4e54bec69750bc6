"""A real `forewarn agent` subprocess on private directories, for a test of the code that acts
on its notices: start it, raise notices, see what the code under test did, tear it all down."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from forewarn.protocol.errors import ForewarnError
from forewarn.protocol.notifydeadline import deadline_fields, for_an_older_agent
from forewarn.protocol.wire import ENV_CONTROL, ENV_EVENTS, ENV_RUNTIME_DIR, request

from . import _lifeline
from .dovecot import Dovecot
from .events import EventRecorder
from .providers import (
    LAUNCH,
    AwsNotices,
    AzureNotices,
    DigitalOceanNotices,
    GcpNotices,
    KubernetesNotices,
    Mailbox,
    ProviderNotices,
)
from .simcontrol import SimulatorProcess
from .waiting import eventually

PROVIDERS = ("local", *LAUNCH)
# Where a watcher that is not under test would look: a port nothing listens on, on loopback.
_DEAD_LOOPBACK = "127.0.0.1:9"
FLAG_NAME = "checkpoint-now"


# sizeof(sockaddr_un.sun_path) - 1 on Linux.
IPC_PATH_MAX = 107

# The running agents that set the environment, oldest first: the newest one's endpoints are
# in it. Each keeps what it found there, for whichever restores it.
_env_holders: list[RunningAgent] = []
_env_lock = threading.Lock()


class AgentDied(ForewarnError, RuntimeError):
    """The agent (or its simulator) exited or never became ready; the message ends with the
    tail of its log."""


def _accepted(payload: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    """`reply`, unless it refuses `payload`: then an AssertionError naming the agent's error."""
    if not reply.get("ok"):
        raise AssertionError(f"the agent refused {payload}: {reply.get('error')}")
    return reply


def _clean_environ() -> dict[str, str]:
    """The caller's environment without anything that would lead the agent elsewhere: other
    forewarn settings, proxies, an enclosing pod's API server, Google's metadata host."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.upper().startswith("FOREWARN_")
        and key.lower() not in ("http_proxy", "https_proxy", "all_proxy")
        and not key.startswith("KUBERNETES_SERVICE")
    }
    env.update(
        GCE_METADATA_HOST=_DEAD_LOOPBACK,
        GCE_METADATA_IP=_DEAD_LOOPBACK,
        NO_GCE_CHECK="true",
        NO_PROXY="*",
        PYTHONUNBUFFERED="1",
    )
    return env


class RunningAgent:
    """One agent (and, with a cloud `provider`, that provider's simulator) for one test.

    Use it as a context manager (or `start_agent`). While it runs, `FOREWARN_RUNTIME_DIR`,
    `FOREWARN_EVENTS` and `FOREWARN_CONTROL` point at it, so `CheckpointGuard()` and `Notices()`
    find it with no arguments."""

    def __init__(
        self,
        provider: str = "local",
        *,
        exit_margin: float | str | None = None,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        set_env: bool = True,
        directory: str | Path | None = None,
        keep: bool = False,
        ready_timeout: float = 30.0,
    ) -> None:
        if provider not in PROVIDERS:
            raise ValueError(f"provider must be one of {', '.join(PROVIDERS)}, not {provider!r}")
        self.provider = provider
        self.set_env = set_env
        self.keep = keep
        self.ready_timeout = ready_timeout
        self._own_root = directory is None
        if directory is None:
            root = tempfile.mkdtemp(prefix="forewarn-test-")
            # A socket path has at most 107 bytes (sun_path); a deep TMPDIR (pytest-xdist's
            # basetemp) would leave the agent unable to bind, so fall back to /tmp.
            if len(f"{root}/run/control") > IPC_PATH_MAX:
                os.rmdir(root)
                root = tempfile.mkdtemp(prefix="forewarn-test-", dir="/tmp")
        else:
            root = str(directory)
            socket = f"{root}/run/control"
            if len(socket.encode()) > IPC_PATH_MAX:
                raise ValueError(
                    f"directory: the agent's socket {socket} is {len(socket.encode())} bytes; "
                    f"Linux allows at most {IPC_PATH_MAX} (give a shorter directory)"
                )
        self.root = Path(root)
        self.runtime_dir = self.root / "run"
        self.state_dir = self.root / "state"
        self.log_path = self.root / "agent.log"
        self.events_endpoint = f"ipc://{self.runtime_dir}/events"
        self.control_endpoint = f"ipc://{self.runtime_dir}/control"
        self.flag_path = self.runtime_dir / FLAG_NAME
        self.env = _clean_environ()
        self.env.update(
            FOREWARN_RUNTIME_DIR=str(self.runtime_dir),
            FOREWARN_STATE_DIR=str(self.state_dir),
            FOREWARN_EVENTS=self.events_endpoint,
            FOREWARN_CONTROL=self.control_endpoint,
        )
        providers = ["local"] if provider == "local" else ["local", provider]
        argv = [sys.executable, "-m", "forewarn.agent.cli", "agent"]
        for name in providers:
            argv += ["--provider", name]
        self.config_path: Path | None = None
        names_config = "FOREWARN_CONFIG" in (env or {}) or any(
            a == "--config" or a.startswith("--config=") for a in args
        )
        if not names_config:
            # The node's own /etc/forewarn/forewarn.toml (a real agent's metrics port, its
            # providers) is not the test's: with it the agent exited 2 ("metrics_address ...:
            # cannot listen"). An empty file in the private directory gives the defaults.
            self.config_path = self.root / "forewarn.toml"
            argv += ["--config", str(self.config_path)]
        if exit_margin is not None:
            argv += ["--exit-margin", str(exit_margin)]
        self.argv = [*argv, *args]
        self.simulator: SimulatorProcess | None = None
        self.notices: ProviderNotices | None = None
        self.dovecot: Dovecot | None = None
        self.mailbox: Mailbox | None = None
        self._extra_env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._lifeline: int | None = None
        self._recorder: EventRecorder | None = None
        # What it saw, kept by stop() before the directory goes: readable after the agent.
        self._stopped = False
        self._kept_events: list[dict[str, Any]] = []
        self._kept_acks: list[dict[str, Any]] | None = None
        self._kept_log: str | None = None
        self._saved_environ: dict[str, str | None] = {}
        # Each manual notice as notify() raised it (action, reason, note), for move_deadline.
        self._raised: dict[str, tuple[str, str | None, str | None]] = {}

    # Life cycle.

    def start(self) -> RunningAgent:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        self.runtime_dir.mkdir(parents=True, mode=0o700, exist_ok=True)
        self.state_dir.mkdir(parents=True, mode=0o700, exist_ok=True)
        if self.config_path is not None:
            self.config_path.write_text("# the test's agent: defaults, whatever the node says\n")
        launch = LAUNCH.get(self.provider)
        if launch is not None:
            if launch.mailbox:
                # Raises DovecotNotInstalled, saying what to install, before anything starts.
                self.dovecot = Dovecot().start()
                self.mailbox = Mailbox(self.dovecot, self.dovecot.add_user())
                self.env.update(self.mailbox.agent_env(self.root))
            # Port 0: the kernel's pick as the simulator binds, read back before the agent is
            # given it (a number picked first could be taken by another test's server between
            # the pick and the bind, and the agent then watched that server).
            self.simulator = SimulatorProcess(
                self.provider, 0, launch.sim_args, self.root / "simulator.log"
            ).start(_clean_environ())
            try:
                url = self.simulator.wait_listening(deadline)
            except RuntimeError as error:  # it exited, or never listened: as the agent's own
                raise AgentDied(str(error)) from None
            self.env.update(launch.agent_env(url, self.root))
            self.notices = launch.handle(self.simulator.control, self.mailbox)
        self.env.update(self._extra_env)
        # The agent starts once the simulator listens; its watcher polls it from the start.
        self._log = self.log_path.open("wb")
        self.proc, self._lifeline = _lifeline.spawn(self.argv, self.env, self._log)
        self._recorder = EventRecorder(self.events_endpoint).start()
        while not self._recorder.first_heartbeat.wait(0.02):
            self._check_alive()
            if time.monotonic() > deadline:
                raise AgentDied(self._died(f"no heartbeat within {self.ready_timeout:g}s"))
        if self.simulator is not None:
            try:
                self.simulator.wait_ready(deadline)
            except RuntimeError as error:  # it exited, or never answered: as the agent's own
                raise AgentDied(str(error)) from None
            # Ready means the watcher has read its endpoint once, not merely that it exists.
            while not self.simulator.control.requests():
                self._check_alive()
                if time.monotonic() > deadline:
                    raise AgentDied(self._died(f"the {self.provider} watcher never polled"))
                time.sleep(0.02)
        if self.set_env:
            with _env_lock:
                for key in (ENV_RUNTIME_DIR, ENV_EVENTS, ENV_CONTROL):
                    self._saved_environ[key] = os.environ.get(key)
                    os.environ[key] = self.env[key]
                _env_holders.append(self)

    def _check_alive(self) -> None:
        if self._stopped:
            raise AgentDied("the agent was stopped (stop(), or the end of its with block)")
        if self.proc is not None and self.proc.poll() is not None:
            raise AgentDied(self._died(f"the agent exited with code {self.proc.returncode}"))
        sim = self.simulator
        if sim is not None and sim.proc is not None and sim.proc.poll() is not None:
            raise AgentDied(
                f"forewarn simulate {self.provider} exited with {sim.proc.returncode}:\n"
                + sim.log_path.read_text(errors="replace")
            )

    def _died(self, what: str) -> str:
        return f"{what}; the agent's log ({self.log_path}) ends:\n{self.log_tail()}"

    def stop(self) -> int | None:
        """Stop the agent and the simulator, restore the environment, remove the directory.
        Safe to call twice; returns the agent's exit code."""
        self._restore_environ()
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            code = self.proc.returncode
        _lifeline.cut(self._lifeline)
        self._lifeline = None
        if self._recorder is not None:
            self._recorder.close()
            self._kept_events = self.events
            self._recorder = None
        if not self._stopped:
            self._kept_acks, self._kept_log = self.acks, self.log()
            self._stopped = True
        if self.simulator is not None:
            self.simulator.stop()
        if self.dovecot is not None:
            self.dovecot.stop()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._own_root and not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)
        return code

    def _restore_environ(self) -> None:
        with _env_lock:
            if self not in _env_holders:
                return
            index = _env_holders.index(self)
            del _env_holders[index]
            if index < len(_env_holders):
                # Stopped out of order: a newer agent holds the environment, and restores
                # what this one found there when it stops in turn.
                _env_holders[index]._saved_environ = self._saved_environ
            else:
                for key, value in self._saved_environ.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
            self._saved_environ = {}

    def __enter__(self) -> RunningAgent:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def log(self) -> str:
        if self._kept_log is not None:
            return self._kept_log
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    # Each provider's notices.

    def _provider(self, cls: type[ProviderNotices]) -> Any:
        if not isinstance(self.notices, cls):
            raise AttributeError(
                f"this agent runs provider {self.provider!r}; "
                + (
                    f"start one with provider={cls.name!r} to raise {cls.name} notices"
                    if cls.name
                    else "only a cloud provider's agent has a simulator"
                )
            )
        return self.notices

    @property
    def aws(self) -> AwsNotices:
        return self._provider(AwsNotices)

    @property
    def gcp(self) -> GcpNotices:
        return self._provider(GcpNotices)

    @property
    def azure(self) -> AzureNotices:
        return self._provider(AzureNotices)

    @property
    def digitalocean(self) -> DigitalOceanNotices:
        return self._provider(DigitalOceanNotices)

    @property
    def kubernetes(self) -> KubernetesNotices:
        return self._provider(KubernetesNotices)

    @property
    def sim(self) -> ProviderNotices:
        """The simulator of whichever cloud provider this agent runs."""
        return self._provider(ProviderNotices)

    def fault(self, kind: str, **fields: Any) -> str:
        """Make the provider's endpoint misbehave (see `forewarn simulate --help`)."""
        return self.sim.fault(kind, **fields)

    def end_fault(self, fault_id: str | None = None) -> None:
        self.sim.end_fault(fault_id)

    # The agent's own notices and control socket.

    def control(self, payload: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        """One control request; raises AgentDied when the agent is gone."""
        return _accepted(payload, self._ask(payload, timeout))

    def _ask(self, payload: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        """The agent's reply to one control request, a refusal too."""
        self._check_alive()
        return request(self.control_endpoint, payload, timeout, runtime=self.runtime_dir)

    def status(self) -> dict[str, Any]:
        return self.control({"op": "status"})

    def notify(
        self,
        action: str = "drain",
        deadline: str | None = None,
        *,
        reason: str | None = None,
        note: str | None = None,
        id: str | None = None,
    ) -> str:
        """Raise a manual notice (as `forewarn notify`); `deadline` is RFC 3339 or a duration
        from now (`90s`, `15m`), which the agent counts on the boot clock as the command's
        (a step of the wall clock moves the deadline with it). The same `id` again changes
        that notice. Returns its id."""
        payload: dict[str, Any] = {"op": "notify", "action": action}
        if deadline is not None:
            payload.update(deadline_fields(deadline))
        for key, value in (("reason", reason), ("note", note), ("id", id)):
            if value is not None:
                payload[key] = value
        reply = self._ask(payload)
        older = for_an_older_agent(payload, reply)
        if older is not None:  # an agent older than `deadline_in`: the time alone, as before
            payload, reply = older, self._ask(older)
        notice_id = str(_accepted(payload, reply)["notice"]["id"])
        self._raised[notice_id] = (action, reason, note)
        return notice_id

    def move_deadline(self, notice_id: str, deadline: str) -> None:
        """Give a manual notice a new deadline (same id; it may escalate or step back)."""
        current = next((n for n in self.status()["active"] if n["id"] == notice_id), None)
        if current is None:
            raise AssertionError(f"no active notice {notice_id!r}")
        # As raised, not as the status shows it: an escalated drain reads as a terminate.
        note = (current.get("detail") or {}).get("note")
        action, reason, note = self._raised.get(
            notice_id, (current["action"], current["reason"], note)
        )
        self.notify(action, deadline, reason=reason, note=note, id=notice_id)

    def clear(self, notice_id: str | None = None) -> list[str]:
        """Withdraw one manual notice, or all; the ids cleared."""
        payload: dict[str, Any] = {"op": "clear"}
        if notice_id is not None:
            payload["id"] = notice_id
        return list(self.control(payload)["cleared"])

    def flag_file(self, deadline: str | None = None) -> Path:
        """Touch the flag file (`checkpoint-now` in the runtime directory): a drain, with
        `deadline` (RFC 3339 or a duration) on its first line when given."""
        self.flag_path.write_text("" if deadline is None else deadline + "\n")
        return self.flag_path

    # What the code under test did.

    @property
    def events(self) -> list[dict[str, Any]]:
        """Every notice the agent published since it started, in order."""
        if self._recorder is None:
            return list(self._kept_events)
        with self._recorder.changed:
            return list(self._recorder.notices)

    def wait_for_event(self, timeout: float = 10.0, **match: Any) -> dict[str, Any]:
        """The first notice published (since the start) whose fields equal `match`, e.g.
        `wait_for_event(action="terminate", provider="aws")`."""
        if self._recorder is None:
            matching = (
                n for n in self._kept_events if all(n.get(k) == v for k, v in match.items())
            )
            found = next(matching, None)
        else:
            found = self._recorder.wait(match, 0, timeout)
        if found is None:
            self._check_alive()
            seen = [(n.get("action"), n.get("id")) for n in self.events]
            raise AssertionError(f"no notice matching {match} within {timeout:g}s; seen {seen}")
        return found

    @property
    def acks(self) -> list[dict[str, Any]]:
        """Every flush a client reported (`notice_id`, `client`, `step`, `flush_seconds`,
        `outcome`), read from the agent's telemetry."""
        if self._kept_acks is not None:
            return list(self._kept_acks)
        path = self.state_dir / "telemetry.jsonl"
        if not path.exists():
            return []
        found = []
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict) and entry.get("kind") == "ack":
                    found.append(entry)
        return found

    def wait_for_ack(self, notice_id: str | None = None, timeout: float = 10.0) -> dict[str, Any]:
        """The first ack for `notice_id` (or for anything, periodic saves included)."""

        def found() -> dict[str, Any] | None:
            for ack in self.acks:
                if notice_id is None or ack.get("notice_id") == notice_id:
                    return ack
            self._check_alive()
            return None

        what = f"an ack of {notice_id}" if notice_id else "an ack"
        try:
            result: dict[str, Any] = eventually(found, timeout, what, interval=0.02)
        except AssertionError as error:
            raise AssertionError(f"{error}; acks so far: {self.acks}") from None
        return result


@contextlib.contextmanager
def start_agent(provider: str = "local", **options: Any) -> Iterator[RunningAgent]:
    """`with start_agent("aws") as agent:` a ready agent (and simulator), gone at the end of
    the block whatever happened in it. Options as for `RunningAgent`."""
    agent = RunningAgent(provider, **options).start()
    try:
        yield agent
    finally:
        agent.stop()


__all__ = ["PROVIDERS", "AgentDied", "RunningAgent", "start_agent"]
