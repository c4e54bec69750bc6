"""The systemd units: `systemd-analyze verify` passes, and the settings that matter hold."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from other_user import call_as
from support import (
    AgentProcess,
    eventually,
    forewarn_cmd,
    free_port,
    requires,
    run_forewarn,
)

Tool = Callable[[str], str]

UNITS = Path(__file__).resolve().parents[2] / "packaging" / "systemd"
DOCS = UNITS.parents[1] / "docs"
AGENT = UNITS / "forewarn-agent.service"
TRAINING = UNITS / "example-training.service"
EXAMPLE = UNITS.parent / "examples" / "stop-job-on-terminate.service"


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Sections → key → every value in order (systemd allows repeated keys)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, sep, value = line.partition("=")
        assert sep and current is not None, f"{path.name}: cannot read {raw!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


# The documented install (docs/operations.md, the cloud-init template): a virtual environment
# in /opt/forewarn/venv, its `forewarn` linked from /usr/local/bin.
INSTALLED = ("/opt/forewarn/venv/bin/forewarn", "/opt/forewarn/venv/bin/python")
# What every Debian or Ubuntu machine has, and the example unit runs.
SYSTEM_PROGRAMS = ("/bin/sh", "/bin/systemctl")
LINKED = {"/usr/local/bin/forewarn": "/opt/forewarn/venv/bin/forewarn"}
SHIPPED = (AGENT, TRAINING, EXAMPLE)


def installed_root(tmp_path: Path) -> Path:
    """A file system root laid out as the documented install leaves a machine, with the
    system's own units (verify resolves dependencies such as sysinit.target there) and the
    shipped units copied byte for byte into /etc/systemd/system."""
    root = tmp_path / "root"
    for program in (*INSTALLED, *SYSTEM_PROGRAMS):
        path = root / program.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\nexit 0\n")
        path.chmod(0o755)
    for link, target in LINKED.items():
        path = root / link.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
    system_units = Path("/usr/lib/systemd/system")
    shutil.copytree(system_units, root / "usr/lib/systemd/system", symlinks=True)
    etc = root / "etc/systemd/system"
    etc.mkdir(parents=True)
    for unit in SHIPPED:
        shutil.copyfile(unit, etc / unit.name)
    return root


def verify(analyze: str, root: Path, *units: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [analyze, "verify", f"--root={root}", *(f"/etc/systemd/system/{u}" for u in units)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_units_pass_systemd_analyze_verify_as_shipped(tmp_path: Path, tool: Tool):
    analyze = tool("systemd-analyze")
    root = installed_root(tmp_path)
    for unit in SHIPPED:
        assert (root / "etc/systemd/system" / unit.name).read_bytes() == unit.read_bytes()
    result = verify(analyze, root, *(unit.name for unit in SHIPPED))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # Unknown keys and bad values are only warnings for verify: none may name our units.
    ours = [line for line in output.splitlines() if any(u.name in line for u in SHIPPED)]
    assert ours == [], "\n".join(ours)


def test_verify_fails_without_the_documented_install(tmp_path: Path, tool: Tool):
    analyze = tool("systemd-analyze")
    root = installed_root(tmp_path)
    (root / "usr/local/bin/forewarn").unlink()
    result = verify(analyze, root, AGENT.name)
    assert result.returncode != 0
    assert "/usr/local/bin/forewarn" in result.stdout + result.stderr


def test_verify_catches_a_broken_unit(tmp_path: Path, tool: Tool):
    analyze = tool("systemd-analyze")
    broken = tmp_path / "forewarn-agent.service"
    broken.write_text(AGENT.read_text().replace("/usr/local/bin/forewarn", "/nonexistent/fw"))
    result = subprocess.run(
        [analyze, "verify", str(broken)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0


def test_agent_unit_exposure_is_low(tmp_path: Path, tool: Tool):
    analyze = tool("systemd-analyze")
    root = installed_root(tmp_path)
    result = subprocess.run(
        [
            analyze,
            "security",
            "--offline=yes",
            f"--root={root}",
            "--no-pager",
            f"/etc/systemd/system/{AGENT.name}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    found = re.search(r"Overall exposure level for \S+: ([0-9.]+)", result.stdout)
    assert found, result.stdout + result.stderr
    assert float(found.group(1)) <= 2.5, result.stdout


def test_agent_unit_settings():
    unit = parse_unit(AGENT)
    service = unit["Service"]
    assert service["Type"] == ["notify"]
    assert service["WatchdogSec"] == ["30s"]
    assert service["Restart"] == ["on-failure"]
    assert service["RuntimeDirectory"] == ["forewarn"]
    assert service["RuntimeDirectoryMode"] == ["0750"]
    assert service["Group"] == ["forewarn"]
    assert service["StateDirectory"] == ["forewarn"]
    assert service["EnvironmentFile"] == ["-/etc/forewarn/forewarn.env"]
    assert service["ProtectSystem"] == ["strict"]
    assert service["NoNewPrivileges"] == ["yes"]
    assert service["ProtectHome"] == ["yes"]
    assert service["ExecStart"] == ["/usr/local/bin/forewarn agent"]
    environment = dict(value.split("=", 1) for value in service["Environment"])
    assert environment["FOREWARN_RUNTIME_DIR"] == "%t/forewarn"
    assert environment["FOREWARN_STATE_DIR"] == "%S/forewarn"
    assert environment["FOREWARN_METRICS_ADDRESS"] == "127.0.0.1:9464"


def test_agent_unit_hardening_keeps_metadata_reachable():
    service = parse_unit(AGENT)["Service"]
    for key in ("PrivateNetwork", "IPAddressDeny", "IPAddressAllow", "PrivateUsers"):
        assert key not in service, f"{key} would cut the agent off the metadata service"
    families = " ".join(service["RestrictAddressFamilies"]).split()
    assert {"AF_INET", "AF_INET6", "AF_UNIX"} <= set(families)


def test_private_devices_leaves_the_gcp_watcher_a_gpu_path_and_the_docs_say_so():
    """`PrivateDevices=yes` hides `/dev/nvidia0` from the agent; the GCP watcher's GPU check
    (the hour's notice of a host maintenance on an N1 VM with GPUs) must still have a path
    the unit leaves visible, and docs/operations.md must say what the unit hides."""
    from forewarn.providers.gcp.watch import NVIDIA_PATHS

    assert parse_unit(AGENT)["Service"]["PrivateDevices"] == ["yes"]
    visible = [path for path in NVIDIA_PATHS if not str(path).startswith("/dev/")]
    assert Path("/proc/driver/nvidia/gpus") in visible
    docs = " ".join((DOCS / "operations.md").read_text().split())
    assert "`PrivateDevices=yes` gives the agent a `/dev` of its own" in docs
    assert "`/dev/nvidia0` is not there under the unit" in docs
    assert "`/proc/driver/nvidia/gpus/` too, which the unit leaves visible" in docs


def _syscall_group(analyze: str, name: str) -> set[str]:
    """The system calls `systemd-analyze syscall-filter` lists for a name: a group's, with
    the groups it includes expanded, or the call itself."""
    if not name.startswith("@"):
        return {name}
    listed = subprocess.run(
        [analyze, "syscall-filter", "--no-pager", name],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()[1:]
    calls: set[str] = set()
    for line in listed:
        entry = line.strip()
        if entry and not entry.startswith("#"):
            calls |= _syscall_group(analyze, entry)
    return calls


def _allowed_syscalls(analyze: str, filters: list[str]) -> set[str]:
    """What the unit's SystemCallFilter= lines let through, read as systemd reads them: the
    first line, an allow list, sets what passes; each later `~` line takes its calls out and
    each later plain line puts its calls back."""
    assert filters and not filters[0].startswith("~"), filters
    allowed: set[str] = set()
    for value in filters:
        denied = value.startswith("~")
        for name in value.lstrip("~").split():
            calls = _syscall_group(analyze, name)
            allowed = allowed - calls if denied else allowed | calls
    return allowed


def test_the_agent_runs_under_the_agent_unit_s_system_call_filter(tmp_path: Path, tool: Tool):
    """found: libzmq sets the scheduling policy of each thread it starts (sched_setscheduler,
    in @resources) and aborts the process when that fails, so under the unit's
    `SystemCallFilter=~@privileged @resources` (SystemCallErrorNumber=EPERM) the agent died
    at its first socket with `Operation not permitted (src/thread.cpp:315)`, exit 134, and
    systemd restarted it until its start limit. Every call the filter refuses is refused
    here too (strace answers it EPERM), through a notice, a hold for a process, an ack,
    metrics and a stop."""
    analyze = tool("systemd-analyze")
    strace = tool("strace")
    traced = subprocess.run(
        [strace, "-f", "-qq", "-o", os.devnull, "true"], capture_output=True, text=True, timeout=60
    )
    if traced.returncode != 0:  # a container whose seccomp profile refuses ptrace
        pytest.skip(f"strace cannot trace here: {traced.stderr.strip()}")
    service = parse_unit(AGENT)["Service"]
    assert service["SystemCallErrorNumber"] == ["EPERM"]
    allowed = _allowed_syscalls(analyze, service["SystemCallFilter"])
    # `?`: a call this strace does not know is no error; `!`: all but those.
    refused = "!" + ",".join(f"?{call}" for call in sorted(allowed))
    port = free_port()
    agent = AgentProcess(tmp_path)
    agent.argv = [strace, "-f", "-qq", "-o", os.devnull, "-e", f"inject={refused}:error=EPERM"]
    agent.argv += forewarn_cmd(
        "agent", "--provider", "local", "--metrics-address", f"127.0.0.1:{port}"
    )
    agent.start(timeout=60)
    try:
        pid = agent.control({"op": "status"})["agent"]["pid"]
        raised = run_forewarn("notify", "drain", "--json", env=agent.env)
        assert raised.returncode == 0, raised.stderr + agent.output()
        notice = json.loads(raised.stdout)["notice"]["id"]
        held = run_forewarn(
            "wait",
            "--for",
            "drain",
            "--client",
            "job",
            "--pid",
            str(os.getpid()),
            "--json",
            "--timeout",
            "20s",
            env=agent.env,
        )
        assert held.returncode == 0, held.stderr + agent.output()
        acked = run_forewarn(
            "ack", notice, "--client", "job", "--flush-seconds", "2s", env=agent.env
        )
        assert acked.returncode == 0, acked.stderr + agent.output()
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
        assert health.status_code == 200, health.text
        assert "forewarn_flush_seconds" in httpx.get(f"http://127.0.0.1:{port}/metrics").text
        os.kill(pid, signal.SIGTERM)  # the agent itself: strace passes on its exit code
        assert agent.proc is not None
        assert agent.proc.wait(timeout=30) == 0, agent.output()
    finally:
        agent.stop()
    assert "not permitted" not in agent.output()


def test_training_unit_orders_after_the_agent_and_leaves_time_to_flush():
    unit = parse_unit(TRAINING)
    assert "forewarn-agent.service" in " ".join(unit["Unit"]["After"]).split()
    assert "forewarn-agent.service" in " ".join(unit["Unit"]["Wants"]).split()
    service = unit["Service"]
    assert service["KillSignal"] == ["SIGTERM"]
    stop = service["TimeoutStopSec"][0]
    assert stop.endswith("s") and int(stop[:-1]) >= 120  # above AWS's two-minute notice


def test_training_unit_starts_where_forewarn_is_not_installed():
    """The unit says a missing agent does not stop the job, but it named the group
    `forewarn` (SupplementaryGroups=), and systemd does not start a unit whose group does not
    exist (status 216/GROUP). The training user's own membership, which the documented
    install and the cloud-init user data give it, is what opens the sockets."""
    unit = parse_unit(TRAINING)
    service = unit["Service"]
    named = {*service.get("Group", []), *" ".join(service.get("SupplementaryGroups", [])).split()}
    assert "forewarn" not in named, named
    assert 'usermod -aG forewarn "$TRAINING_USER"' in (DOCS / "operations.md").read_text()
    user_data = (UNITS.parent / "cloud-init" / "user-data.yaml.tmpl").read_text()
    assert "  - name: ${training_user}\n    groups: [forewarn]\n" in user_data


def test_training_unit_ends_a_stop_cleanly_and_restarts_after_a_reclaim_exit():
    """CheckpointGuard.exit_code is 143 after a reclaim save, SIGTERM from `systemctl stop`
    included. systemd counts an exit code of 143 as a failure (only death by the signal
    itself is clean), so every `systemctl stop` of the example job left it `failed
    (Result: exit-code)` and fired its OnFailure= units. 143 is a clean exit, and the job
    still restarts when it exits so by itself (a terminate notice): a stop never restarts."""
    service = parse_unit(TRAINING)["Service"]
    assert "143" in " ".join(service.get("SuccessExitStatus", [])).split()
    assert "143" in " ".join(service.get("RestartForceExitStatus", [])).split()
    assert service["Restart"] == ["on-failure"]


def test_the_documented_webhook_url_file_is_readable_by_the_units_user(tmp_path: Path):
    """docs/operations.md gives the webhook URL file's mode and owner. The agent reads it
    itself, at start, as the unit's User=; the docs said `0600 root:root; systemd reads it as
    root`, a file the agent cannot open (it exits 2 at every start)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to take the unit's uid")
    from forewarn.agent.notifications.settings import WebhookSettings

    found = re.search(
        r'url_file = "[^"]+"\s+# (0[0-7]{3}) (\w+):(\w+)', (DOCS / "operations.md").read_text()
    )
    assert found, "docs/operations.md: the url_file example names no mode and owner"
    mode, owner, group = found.groups()
    unit = parse_unit(AGENT)["Service"]
    # The unit's user and group as the test's uid and gid (no such user here).
    ids = {"root": 0, unit["User"][0]: 10001, unit["Group"][0]: 10001}
    base = Path(tempfile.mkdtemp(prefix="forewarn-etc-", dir="/tmp"))
    try:
        base.chmod(0o755)
        url_file = base / "webhook-url"
        url_file.write_text("https://hooks.example.org/services/T0/B0/secret\n")
        os.chown(url_file, ids[owner], ids[group])
        url_file.chmod(int(mode, 8))
        WebhookSettings(url="https://hooks.example.org/")  # its lazy imports, read as root

        def agent_reads() -> str | None:
            return WebhookSettings(url_file=url_file).resolved_url()

        read = call_as(10001, 10001, agent_reads)
        assert read == "https://hooks.example.org/services/T0/B0/secret"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_the_documented_imap_credentials_file_is_readable_by_the_units_user():
    """docs/digitalocean.md has the IMAP login written to a file "that only the agent can read
    (`chmod 600`)" and named no owner: made with sudo, as a file in /etc is, it stays root's,
    and the agent, which reads it itself as the unit's User=, got `cannot read it (Permission
    denied)` at every connection, so no reclaim mail was ever seen."""
    if os.geteuid() != 0:
        pytest.skip("needs root to take the unit's uid")
    from forewarn.providers.digitalocean.imap import load_credentials

    found = re.search(
        r"# (/etc/forewarn/\S+): (0[0-7]{3}) (\w+):(\w+)", (DOCS / "digitalocean.md").read_text()
    )
    assert found, "docs/digitalocean.md: the credentials file example names no mode and owner"
    name, mode, owner, group = found.groups()
    assert int(mode, 8) & 0o077 == 0, "the agent warns about a file others can read"
    unit = parse_unit(AGENT)["Service"]
    ids = {"root": 0, unit["User"][0]: 10001, unit["Group"][0]: 10001}
    base = Path(tempfile.mkdtemp(prefix="forewarn-etc-", dir="/tmp"))
    try:
        base.chmod(0o755)
        path = base / Path(name).name
        path.write_text("FOREWARN_IMAP_USER=reclaim@example.com\nFOREWARN_IMAP_PASSWORD=pw\n")
        os.chown(path, ids[owner], ids[group])
        path.chmod(int(mode, 8))

        def agent_reads() -> str:
            return load_credentials(path).user

        assert call_as(10001, 10001, agent_reads) == "reclaim@example.com"
    finally:
        shutil.rmtree(base, ignore_errors=True)


RANK = """\
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a reclaim save, then guard.exit_code
if sys.argv[1] == "exit":
    sys.exit(143)  # a terminate notice: the rank saves and exits by itself
open(sys.argv[2], "w").close()
# Until torchrun's SIGTERM, or torchrun's end: a SIGTERM that reached torchrun while it was
# still starting this rank (the ready file was already written) ended torchrun with exit 1
# and this rank not signalled, left sleeping for ever once the test was done (seen once).
parent = os.getppid()
while os.getppid() == parent:
    time.sleep(0.05)
sys.exit(143)
"""


def _torchrun(tmp_path: Path, mode: str) -> subprocess.Popen[bytes]:
    rank = tmp_path / "rank.py"
    rank.write_text(RANK)
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1"]
    argv += ["--nproc-per-node", "1", "--master-addr", "127.0.0.1"]
    argv += ["--master-port", str(free_port()), str(rank), mode, str(tmp_path / "ready")]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# Found, not imported (torch ships torch.distributed.run): torchrun imports it, not the worker.
@requires("torch")
def test_torchrun_as_the_training_unit_exits_1_on_a_stop_as_it_says(tmp_path: Path):
    """The unit said a stop leaves it inactive with torchrun as its main process too: torchrun
    exits 1 on its own SIGTERM (torch raises SignalException) even though the rank exited 143,
    so the unit is left failed. And it exits 1 when a rank exits 143 by itself, which is why
    1 must not be a success exit: Restart=on-failure resumes the job after a reclaim."""
    stopped = _torchrun(tmp_path, "wait")
    try:
        eventually(lambda: (tmp_path / "ready").exists(), timeout=60, what="the rank")
        stopped.send_signal(signal.SIGTERM)  # systemctl stop, KillMode=mixed
        assert stopped.wait(timeout=60) == 1
    finally:
        stopped.kill()
        stopped.wait()
    assert _torchrun(tmp_path, "exit").wait(timeout=60) == 1
    service = parse_unit(TRAINING)["Service"]
    assert "1" not in " ".join(service.get("SuccessExitStatus", [])).split()
    unit_text = " ".join(TRAINING.read_text().split())
    assert "With torchrun as ExecStart systemd sees torchrun's exit" in unit_text
    assert "1 after a stop" in unit_text
    docs = " ".join((DOCS / "operations.md").read_text().split())
    assert "torchrun exits 1 on its own SIGTERM" in docs
