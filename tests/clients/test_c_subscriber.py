"""The C subscriber, compiled here against libzmq, prints a notice raised with `forewarn notify`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support import AgentProcess, forewarn_cmd

SOURCE = Path(__file__).resolve().parents[2] / "clients" / "c"


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not Path("/usr/include/zmq.h").exists() or shutil.which("cc") is None:
        if os.environ.get("CI"):
            pytest.fail("libzmq headers or a C compiler missing in CI (.ci/setup.d/10-libzmq.sh)")
        pytest.skip("libzmq headers (libzmq3-dev) or a C compiler are not installed")
    build = tmp_path_factory.mktemp("c")
    for name in ("forewarn_sub.c", "Makefile"):
        shutil.copy(SOURCE / name, build / name)
    done = subprocess.run(["make", "-C", str(build)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return build / "forewarn_sub"


def test_c_subscriber_prints_a_notice_from_forewarn_notify(tmp_path: Path, binary: Path) -> None:
    with AgentProcess(tmp_path) as agent:
        sub = subprocess.Popen(
            [str(binary), "--count", "2"],
            env=agent.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert sub.stderr is not None
        assert "listening" in sub.stderr.readline()
        notify = subprocess.run(
            forewarn_cmd("notify", "drain", "--deadline", "2h"),
            env=agent.env,
            capture_output=True,
            text=True,
        )
        assert notify.returncode == 0, notify.stderr
        notify = subprocess.run(
            forewarn_cmd("notify", "terminate"), env=agent.env, capture_output=True, text=True
        )
        out, _ = sub.communicate(timeout=15)
        assert sub.returncode == 0
        notices = [json.loads(line) for line in out.splitlines()]
        assert [n["action"] for n in notices] == ["drain", "terminate"]
        assert all(n["v"] == 1 and n["provider"] == "local" for n in notices)


def test_c_subscriber_gets_the_replay_when_it_joins_late(tmp_path: Path, binary: Path) -> None:
    with AgentProcess(tmp_path) as agent:
        agent.control({"op": "notify", "action": "drain", "id": "local/early"})
        out = subprocess.run(
            [str(binary), "--count", "1"], env=agent.env, capture_output=True, text=True, timeout=15
        ).stdout
        assert json.loads(out)["id"] == "local/early"
