"""The systemd units: `systemd-analyze verify` passes, and the settings that matter hold."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

Tool = Callable[[str], str]

UNITS = Path(__file__).resolve().parents[2] / "packaging" / "systemd"
AGENT = UNITS / "forewarn-agent.service"
TRAINING = UNITS / "example-training.service"
EXECUTABLES = ("/usr/local/bin/forewarn", "/opt/forewarn/venv/bin/python")


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


def copies_with_executables(tmp_path: Path) -> list[Path]:
    """The units with their ExecStart programs pointed at a stand-in that exists here, since
    verify checks that the program is executable."""
    stand_in = tmp_path / "forewarn"
    stand_in.write_text("#!/bin/sh\nexit 0\n")
    stand_in.chmod(0o755)
    copies = []
    for unit in (AGENT, TRAINING):
        text = unit.read_text()
        for executable in EXECUTABLES:
            text = text.replace(executable, str(stand_in))
        copy = tmp_path / unit.name
        copy.write_text(text)
        copies.append(copy)
    return copies


def test_units_pass_systemd_analyze_verify(tmp_path: Path, tool: Tool):
    analyze = tool("systemd-analyze")
    copies = copies_with_executables(tmp_path)
    result = subprocess.run(
        [analyze, "verify", *map(str, copies)], capture_output=True, text=True, timeout=60
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # Unknown keys and bad values are only warnings for verify: none may name our units.
    ours = [line for line in output.splitlines() if any(c.name in line for c in copies)]
    assert ours == [], "\n".join(ours)


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
    copy = copies_with_executables(tmp_path)[0]
    result = subprocess.run(
        [analyze, "security", "--offline=yes", "--no-pager", str(copy)],
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


def test_training_unit_orders_after_the_agent_and_leaves_time_to_flush():
    unit = parse_unit(TRAINING)
    assert "forewarn-agent.service" in " ".join(unit["Unit"]["After"]).split()
    assert "forewarn-agent.service" in " ".join(unit["Unit"]["Wants"]).split()
    service = unit["Service"]
    assert service["KillSignal"] == ["SIGTERM"]
    stop = service["TimeoutStopSec"][0]
    assert stop.endswith("s") and int(stop[:-1]) >= 120  # above AWS's two-minute notice
    assert service["SupplementaryGroups"] == ["forewarn"]
