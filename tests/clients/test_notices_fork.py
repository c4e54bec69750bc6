"""A process forked while a client listens (a DataLoader's fork workers) holds no connection to
the agent: the agent's books of acking clients follow the client, not its children."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from forewarn.clients import Notices
from support import AgentProcess, agent_env, eventually, free_port, requires


def subscribers(agent: AgentProcess) -> int:
    return int(agent.control({"op": "status"})["agent"]["subscribers"])


@requires("torch")
def test_a_dataloaders_fork_workers_keep_no_closed_client_on_the_agents_books(
    tmp_path: Path,
) -> None:
    """Fork workers started while the client listened inherited its connection to the agent.
    Closed (a guard closed at the end of fit, the workers persistent for the evaluation that
    follows, or a second guard for the next phase), the client stayed on the agent's books as
    long as they lived: a notice then waited for its ack forever, so the agent never counted
    it flushed (the flag file stayed, Azure's approval after the acks never went)."""
    from torch.utils.data import DataLoader

    with AgentProcess(tmp_path) as agent:
        notices = Notices(agent.events, agent.control_endpoint)
        try:
            eventually(lambda: subscribers(agent) == 1, what="the client on the agent's books")
            loader = DataLoader(
                list(range(64)),
                batch_size=4,
                num_workers=2,
                persistent_workers=True,
                multiprocessing_context="fork",
            )
            batches = iter(loader)
            assert next(batches).tolist() == [0, 1, 2, 3]  # the workers are forked by now
        finally:
            notices.close()
        eventually(lambda: subscribers(agent) == 0, timeout=3, what="the client gone")
        # The workers, alive all along, still feed the loop.
        assert next(batches).tolist() == [4, 5, 6, 7]
        del batches


@pytest.mark.parametrize("kind", ["ipc", "abstract", "tcp"])
def test_a_forked_child_lets_go_of_the_agent_on_every_kind_of_endpoint(
    tmp_path: Path, kind: str
) -> None:
    """As above, with a plain `os.fork()` (a forked rank, a worker pool), for each kind of
    endpoint the client may reach the agent on; the parent's own connection stays up."""
    port = free_port()
    events = {
        "ipc": f"ipc://{tmp_path}/events",
        "abstract": f"ipc://@forewarn-fork-{port}",
        "tcp": f"tcp://127.0.0.1:{port}",
    }[kind]
    env = agent_env(tmp_path, FOREWARN_EVENTS=events)
    with AgentProcess(tmp_path, env=env) as agent:
        with Notices(events, agent.control_endpoint) as notices:
            eventually(lambda: subscribers(agent) == 1, what="the client on the agent's books")
            read_end, write_end = os.pipe()
            child = os.fork()
            if child == 0:  # pragma: no cover (the child)
                os.close(write_end)
                os.read(read_end, 1)  # lives until the parent closes its end
                os._exit(0)
            os.close(read_end)
            try:
                notices.close()
                eventually(lambda: subscribers(agent) == 0, timeout=3, what="the client gone")
            finally:
                os.close(write_end)
                os.waitpid(child, 0)
            # The parent's own connection was not the child's to end: a client made before the
            # fork and still open hears the agent.
        with Notices(events, agent.control_endpoint) as first:
            eventually(lambda: first.alive, what="the first client alive")
            child = os.fork()
            if child == 0:  # pragma: no cover (the child)
                os._exit(0)
            os.waitpid(child, 0)
            agent.control({"op": "notify", "action": "drain", "id": "local/after-fork"})
            assert first.wait(timeout=5) is not None
