"""A user's suite written only with the plugin (user_suite/), run in its own pytest as a user
would run it; afterwards nothing it started may be left: no process, socket or directory."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support import processes_mentioning

SUITE = Path(__file__).with_name("user_suite")


# Eight agents, six simulators and a Dovecot one after another, in a pytest of its own.
@pytest.mark.slow(12)
@pytest.mark.timeout(900)
def test_the_user_suite_passes_and_leaves_nothing_behind(tmp_path: Path) -> None:
    # Short, so that socket paths under it stay within 107 bytes even under pytest-xdist.
    private_tmp = Path(tempfile.mkdtemp(prefix="fw-user-suite-"))
    record = tmp_path / "record.jsonl"
    env = {key: value for key, value in os.environ.items() if not key.startswith("FOREWARN_")}
    env.update(TMPDIR=str(private_tmp), USER_SUITE_RECORD=str(record), PYTHONUNBUFFERED="1")
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            # The user's own configuration: none of this repository's pytest settings.
            "-c", os.devnull, "--rootdir", str(SUITE), "--basetemp", str(tmp_path / "basetemp"),
            "-p", "no:xdist", str(SUITE),
        ],
        env=env, cwd=SUITE, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "8 passed" in done.stdout, done.stdout

    runs = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(runs) == 8 and sum(1 for run in runs if run["sim"]) == 6
    mail_servers = [run["dovecot"] for run in runs if run["dovecot"]]
    assert len(mail_servers) == 1
    # Directories: every agent's private root and the Dovecot's are gone, and nothing else
    # was left in TMPDIR (as root, Dovecot's directory is under /tmp: its mail processes run
    # as nobody, who cannot enter a private TMPDIR).
    roots = [run["root"] for run in runs] + mail_servers
    assert not [root for root in roots if Path(root).exists()]
    assert list(private_tmp.iterdir()) == []
    # Processes: no agent, simulator or Dovecot, by pid or by anything pointing into the
    # private TMPDIR or the Dovecot's directory.
    pids = [run[key] for run in runs for key in ("pid", "sim_pid", "dovecot_pid")]
    alive = [pid for pid in pids if pid is not None]
    assert not [pid for pid in alive if Path(f"/proc/{pid}").exists()], alive
    for place in (str(private_tmp), *mail_servers):
        assert processes_mentioning(place) == [], place
    # Sockets: the simulators' and Dovecot's ports refuse connections; the ipc sockets went
    # with the roots.
    for run in runs:
        ports = [int(run["sim"].rsplit(":", 1)[1])] if run["sim"] else []
        for port in ports + run["dovecot_ports"]:
            with socket.socket() as probe:
                assert probe.connect_ex(("127.0.0.1", port)) != 0, f"{port} still listens"
    private_tmp.rmdir()
