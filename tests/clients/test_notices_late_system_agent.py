"""A job started before the system agent: it finds the agent once it comes.

At boot, or while an upgrade restarts the agent with its runtime directory removed, a job of a
user in the agent's group finds no /run/forewarn it can write and no agent there, so it looks
in a place of its own. The agent then starts in /run/forewarn. (A temporary directory stands in
for /run/forewarn; the job runs as another user in a forked child.)
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients import CheckpointGuard, Notices
from forewarn.protocol import wire
from other_user import call_as, other_user, shared_tmp
from support import AgentProcess, agent_env, eventually


def _job_before_the_agent(marker: Path, guard: bool) -> dict[str, Any]:
    """The training process: its client made while no agent runs anywhere; then it waits for
    the agent and its drain."""
    if guard:
        made = CheckpointGuard(every_steps=10**9, handle_signals=False, heartbeat_timeout=1.0)
        notices = made.notices
        assert notices is not None
    else:
        notices = Notices(heartbeat_timeout=1.0)
    first = notices.events
    # Renamed into place: the test reads it as soon as it exists (check 28f read it empty).
    written = marker.with_name(marker.name + ".part")
    written.write_text(first)
    written.rename(marker)
    try:
        found = eventually(lambda: notices.alive, timeout=25, what="the agent") and True
    except AssertionError:
        found = False
    drained = notices.wait(("drain",), timeout=10 if found else 0) is not None
    step_saved = False
    if guard and drained:
        step_saved = made.due(1) and made.saved(1, 0.1).step == 1
    result = {"first": first, "events": notices.events, "found": found, "drained": drained}
    result["saved"] = step_saved
    if guard:
        made.close()
    else:
        notices.close()
    return result


@pytest.mark.parametrize("client", ["notices", "guard"])
def test_a_job_started_before_the_system_agent_hears_it_when_it_starts(
    client: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's client picked $XDG_RUNTIME_DIR/forewarn or /tmp/forewarn-<uid> for good and
    never heard the agent that started in /run/forewarn a moment later: it trained through
    the notice with no warning. Its endpoints chosen by default, it now looks again while it
    hears no agent."""
    uid, gid = other_user()
    host = Path(tempfile.mkdtemp(prefix="forewarn-host-", dir="/tmp"))
    shared = shared_tmp(uid, gid)
    try:
        host.chmod(0o755)
        (host / "run").mkdir(mode=0o755)
        system = host / "run" / "forewarn"  # absent until the agent's unit makes it
        monkeypatch.setattr(wire, "SYSTEM_RUNTIME_DIR", system)
        monkeypatch.setattr(wire, "DEFAULT_CONFIG_FILE", host / "no-config.toml")
        for name in list(os.environ):
            if name.upper().startswith("FOREWARN_") or name == "XDG_RUNTIME_DIR":
                monkeypatch.delenv(name)
        marker = shared / "client-made"
        answer: dict[str, Any] = {}

        def job() -> None:
            try:
                answer["value"] = call_as(
                    uid, gid, lambda: _job_before_the_agent(marker, client == "guard"), 60
                )
            except BaseException as error:
                answer["error"] = error

        thread = threading.Thread(target=job)
        thread.start()
        try:
            eventually(marker.exists, timeout=20, what="the job's client")
            assert marker.read_text() == f"ipc:///tmp/forewarn-{uid}/events"
            # systemd's RuntimeDirectory=forewarn, RuntimeDirectoryMode=0750, the agent's
            # group, which the job's user is in; then the agent starts there.
            system.mkdir(mode=0o750)
            os.chown(system, 0, gid)
            env = agent_env(tmp_path, FOREWARN_RUNTIME_DIR=str(system))
            with AgentProcess(tmp_path, env=env) as agent:
                agent.control({"op": "notify", "action": "drain", "id": "local/boot"})
                thread.join(60)
        finally:
            thread.join(60)
        if "error" in answer:
            raise answer["error"]
        value = answer["value"]
        assert value["events"] == f"ipc://{system}/events", value
        assert value["found"] and value["drained"], value
        if client == "guard":
            assert value["saved"], value
    finally:
        shutil.rmtree(host, ignore_errors=True)
        shutil.rmtree(shared, ignore_errors=True)
