"""A provider simulator's `/_sim` control API over HTTP, and the simulator as a subprocess.

Standard library only, so a user's test (or any language) can drive a simulator the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import suppress
from pathlib import Path
from typing import IO, Any

from forewarn.protocol.errors import ForewarnError

from . import _lifeline
from .waiting import stop_process

# No proxy for loopback, whatever the environment says.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class SimControlError(ForewarnError, AssertionError):
    """The simulator refused a control request; the message is its own explanation."""


class SimControl:
    """`POST/PATCH/DELETE /_sim/notices`, `/_sim/faults` and `GET /_sim/state` of one simulator."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        request = urllib.request.Request(
            f"{self.url}/_sim{path}", data=data, method=method, headers=headers
        )
        try:
            with _OPENER.open(request, timeout=10) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            text = error.read().decode(errors="replace").strip()
            raise SimControlError(f"{method} /_sim{path}: {error.code} {text}") from None
        return json.loads(raw) if raw.strip() else None

    def raise_notice(self, kind: str, **fields: Any) -> str:
        """Raise a notice of `kind` with the provider's fields; the simulator's id for it: for
        one raised later (`after=S`), its `scheduled-N` id, which `withdraw` takes before and
        after it is raised ("" from a simulator that gives none)."""
        reply = self.request("POST", "/notices", {"kind": kind, **fields})
        return str(reply.get("id", "")) if isinstance(reply, dict) else ""

    def change(self, notice_id: str, **fields: Any) -> None:
        self.request("PATCH", f"/notices/{notice_id}", fields)

    def withdraw(self, notice_id: str) -> None:
        self.request("DELETE", f"/notices/{notice_id}")

    def fault(self, kind: str, **fields: Any) -> str:
        """Make the endpoint misbehave (`status`, `hang`, `slow`, `reset`, `malformed`,
        `throttle`, or a provider's named fault); the fault's id, when the simulator gives one."""
        reply = self.request("POST", "/faults", {"kind": kind, **fields})
        return str(reply.get("id", "")) if isinstance(reply, dict) else ""

    def end_fault(self, fault_id: str | None = None) -> None:
        """End one fault, or every fault."""
        self.request("DELETE", "/faults" if fault_id is None else f"/faults/{fault_id}")

    def state(self) -> dict[str, Any]:
        return dict(self.request("GET", "/state"))

    def requests(self) -> int:
        """How many requests the simulator has answered on its real endpoint paths."""
        counts = self.state().get("requests", {})
        return sum(int(count) for count in counts.values())


class SimulatorProcess:
    """`forewarn simulate PROVIDER` on a loopback port, ready once its control API answers.

    Port 0 (the default) is the kernel's pick, made as the simulator binds: its URL is known
    once `wait_listening` has read it from the simulator's ready file. A port picked before
    (a free_port() number) can be taken by another process between the pick and the bind."""

    def __init__(self, provider: str, port: int, args: tuple[str, ...], log: Path) -> None:
        self.provider = provider
        self.url = f"http://127.0.0.1:{port}"
        self.control = SimControl(self.url)
        self.log_path = log
        argv = [sys.executable, "-m", "forewarn.agent.cli", "simulate", provider]
        self.argv = [*argv, "--host", "127.0.0.1", "--port", str(port), *args]
        self._ready_file: Path | None = None
        if port == 0:
            self._ready_file = log.with_name(log.name + ".url")
            self.argv += ["--ready-file", str(self._ready_file)]
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._lifeline: int | None = None

    def start(self, env: dict[str, str]) -> SimulatorProcess:
        self._log = self.log_path.open("wb")
        self.proc, self._lifeline = _lifeline.spawn(self.argv, env, self._log)
        return self

    def wait_listening(self, deadline: float) -> str:
        """The simulator's URL, once it listens (started on port 0: read from its ready
        file). RuntimeError, with its log, if it exits or does not listen by `deadline`."""
        assert self.proc is not None
        while self._ready_file is not None:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"forewarn simulate {self.provider} exited with {self.proc.returncode}:\n"
                    + self.log_path.read_text(errors="replace")
                )
            with suppress(FileNotFoundError):
                self.url = self._ready_file.read_text().strip()  # written whole (a rename)
                self.control = SimControl(self.url)
                self._ready_file = None
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"forewarn simulate {self.provider} did not start listening")
            time.sleep(0.02)
        return self.url

    def wait_ready(self, deadline: float) -> None:
        assert self.proc is not None
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"forewarn simulate {self.provider} exited with {self.proc.returncode}:\n"
                    + self.log_path.read_text(errors="replace")
                )
            try:
                self.control.state()
                return
            except (OSError, SimControlError):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"forewarn simulate {self.provider} did not answer on {self.url}"
                    ) from None
                time.sleep(0.02)

    def stop(self) -> None:
        stop_process(self.proc, 5)
        _lifeline.cut(self._lifeline)
        self._lifeline = None
        if self._log is not None:
            self._log.close()
            self._log = None


__all__ = ["SimControl", "SimControlError", "SimulatorProcess"]
