"""A watcher whose close never ends (blocked in a thread) must neither keep the agent from
stopping on SIGTERM nor keep the watcher from being restarted after a crash."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from forewarn.testing.waiting import eventually
from support import AgentProcess, agent_env

# The agent as the entry point runs it, with the stuck provider's line added.
LAUNCH = """
import sys
sys.path.insert(0, sys.argv.pop(1))
from stuck_close_provider import SPEC
from forewarn.agent.cli import main
from forewarn.providers import REGISTRY
sys.exit(main(sys.argv[1:], REGISTRY.plus(SPEC)))
"""


def _agent(tmp_path: Path, **extra: str) -> AgentProcess:
    agent = AgentProcess(tmp_path, env=agent_env(tmp_path, **extra))
    argv = ["agent", "--provider", "local", "--provider", "stuck"]
    agent.argv = [sys.executable, "-c", LAUNCH, str(Path(__file__).parent), *argv]
    return agent


def test_sigterm_ends_the_agent_though_a_watcher_cannot_be_closed(tmp_path: Path) -> None:
    agent = _agent(tmp_path).start()
    try:
        reply = agent.control({"op": "notify", "action": "drain", "id": "local/kept"})
        assert reply["ok"], reply
    finally:
        code = agent.stop(timeout=8.0)  # SIGKILL (-9) after that
    assert code == 0, agent.output()
    assert "stopped" in agent.output()
    saved = json.loads((tmp_path / "state" / "state.json").read_text())
    assert [notice["id"] for notice in saved["manual"]] == ["local/kept"], saved


def test_a_crashed_watcher_that_cannot_be_closed_is_restarted(tmp_path: Path) -> None:
    with _agent(tmp_path, FOREWARN_STUCK_CRASH="true") as agent:

        def stuck_health() -> dict[str, object]:
            status = agent.control({"op": "status"})
            (health,) = [h for h in status["health"] if h["name"] == "stuck"]
            return health

        # Each run polls once and fails: a second poll is a second watcher, built after the
        # first could not be closed.
        eventually(lambda: stuck_health()["polls"] >= 2, timeout=15, what="a restart")


def test_the_loops_threads_get_a_bounded_while_to_finish_at_the_stop() -> None:
    """Not waited for at all, a thread cancelled between starting a Kubernetes exec plugin
    and handing it to its owner never killed the plugin's process group (check 26b: the
    plugin outlived the agent); waited for without a bound, a thread blocked for good held
    the stop. A thread that ends soon ends; one that never does is left after CLOSE_TIMEOUT."""
    import threading
    import time

    from forewarn.agent import runner

    finished = threading.Event()
    never = threading.Event()
    executor = runner._UnwaitedExecutor()
    executor.submit(lambda: (time.sleep(0.3), finished.set()))
    executor.submit(never.wait)
    began = time.monotonic()
    executor.shutdown(wait=True)
    took = time.monotonic() - began
    never.set()
    assert finished.is_set()
    assert took < runner.CLOSE_TIMEOUT + 1.0
