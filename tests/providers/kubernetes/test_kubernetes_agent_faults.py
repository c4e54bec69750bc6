"""The API server misbehaving the way real ones do, through the real agent subprocess:
watches that end every second or so, 429 with Retry-After, a 410 Gone, a token rotated in
its file. The job must get its drain and terminate, each once, and the end of a fault must
send nothing again and clear nothing that was not withdrawn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from forewarn.providers.kubernetes.simulate import KubernetesSimulator
from forewarn.providers.simulator import SimServer
from support import AgentProcess, Subscriber, agent_env, eventually

NODE = "flaky-node"
CORDON = f"kubernetes/{NODE}/cordon"
SHUTDOWN = f"kubernetes/{NODE}/shutdown"


@pytest.fixture
def sim() -> Iterator[tuple[KubernetesSimulator, SimServer]]:
    # Every watch ends after 1.5 s, as behind a load balancer with a short idle limit.
    cluster = KubernetesSimulator(node=NODE, token="t1", max_watch_seconds=1.5)
    with SimServer(cluster) as server:
        yield cluster, server


def control(server: SimServer, kind: str, **fields: object) -> None:
    response = httpx.post(
        f"{server.url}/_sim/notices", json={"kind": kind, **fields}, trust_env=False, timeout=5
    )
    assert response.status_code == 201, response.text


def expect(sub: Subscriber, action: str, notice_id: str, timeout: float = 10) -> None:
    notice = sub.notice(timeout=timeout)
    assert (notice["action"], notice["id"]) == (action, notice_id), notice


def watches(cluster: KubernetesSimulator) -> int:
    with cluster.lock:
        return cluster.counts["watches"]


def test_short_watches_429s_a_410_and_a_rotated_token_lose_and_repeat_nothing(
    tmp_path: Path, sim: tuple[KubernetesSimulator, SimServer]
) -> None:
    cluster, server = sim
    token = tmp_path / "token"
    token.write_text("t1")
    env = agent_env(
        tmp_path,
        FOREWARN_KUBERNETES_URL=server.url,
        FOREWARN_KUBERNETES_TOKEN_FILE=str(token),
        NODE_NAME=NODE,
    )
    agent = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
    with agent, agent.subscriber() as sub:
        eventually(lambda: watches(cluster) >= 1, what="the agent's watch")
        control(server, "cordon")
        expect(sub, "drain", CORDON)
        # Several watches end and are resumed: the cordon is not sent again.
        seen = watches(cluster)
        eventually(lambda: watches(cluster) >= seen + 3, timeout=15, what="3 more watches")
        assert sub.drain(0.3) == []

        # Throttled: two 429s asking for 2 s each. A node shutting down meanwhile is seen
        # once they are waited out, not given up on and not hammered.
        cluster.add_fault("status", path="/api/v1/nodes", status=429, retry_after=2, count=2)
        control(server, "timeout")
        eventually(lambda: cluster.faults() == [], timeout=10, what="both 429s")
        control(server, "shutdown")
        expect(sub, "terminate", SHUTDOWN, timeout=10)

        # The token turns (kubelet rewrites the projected file; the server accepts only
        # the new one from then on) and the history is compacted under the open watch.
        token.write_text("t2\n")
        control(server, "rotate-token", token="t2")
        control(server, "compact", expire_watches=True)
        seen = watches(cluster)
        eventually(lambda: watches(cluster) >= seen + 2, timeout=15, what="watches again")
        assert sub.drain(0.3) == []

        response = httpx.delete(f"{server.url}/_sim/notices/cordon", trust_env=False, timeout=5)
        assert response.status_code == 200, response.text
        expect(sub, "clear", CORDON)
        assert sub.drain(0.3) == []
        active = agent.control({"op": "status"})["active"]
        assert [n["id"] for n in active] == [SHUTDOWN]
    with cluster.lock:
        assert cluster.counts["gone"] >= 1 and cluster.counts["unauthorized"] == 0
    assert "Traceback" not in agent.output()
