"""PodDisruptionBudgets in the simulator: an eviction that would break one is the API
server's 429, a real `kubectl drain` waits on it (retrying every 5 s), and the agent's drain
stands the whole time, the job's pod still there until the budget lets it go."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from forewarn.providers.kubernetes.simulate import KubernetesSimulator
from forewarn.providers.simulator import SimServer
from hypothesis import given, settings
from hypothesis import strategies as st
from k8s_support import KUBECTL, NODE, kubectl, kubectl_command, kubectl_env
from support import AgentProcess, agent_env, eventually, examples

BUDGET_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
EVICTION = {"apiVersion": "policy/v1", "kind": "Eviction"}


def _post(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, trust_env=False, timeout=5)


def _evict(url: str, namespace: str, name: str) -> httpx.Response:
    body = {**EVICTION, "metadata": {"name": name, "namespace": namespace}}
    return _post(url, f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body)


def _refused(sim: KubernetesSimulator) -> int:
    with sim.lock:
        return len(sim.sim_pods.refusals)


def test_an_eviction_a_budget_forbids_is_a_429_and_the_pod_stays(tmp_path: Path) -> None:
    """The API server's answer, as the eviction subresource gives it: 429 TooManyRequests, the
    budget's message, and a DisruptionBudget cause saying how many healthy pods it needs; the
    pod is still there. Lifted (the budget deleted), the same eviction is admitted."""
    sim = KubernetesSimulator(node=NODE)
    with SimServer(sim) as server:
        assert _post(server.url, "/_sim/notices", {"kind": "pod", "name": "train-0"}).is_success
        budget = {"kind": "pdb", "name": "train", "min_available": 1}
        made = _post(server.url, "/_sim/notices", budget)
        assert made.status_code == 201, made.text
        assert made.json()["id"] == "pdb/default/train"
        refused = _evict(server.url, "default", "train-0")
        assert refused.status_code == 429, refused.text
        answer = refused.json()
        assert (answer["kind"], answer["reason"], answer["code"]) == (
            "Status",
            "TooManyRequests",
            429,
        )
        assert answer["message"] == BUDGET_MESSAGE
        (cause,) = answer["details"]["causes"]
        assert cause == {
            "reason": "DisruptionBudget",
            "message": "The disruption budget train needs 1 healthy pods and has 1 currently",
        }
        listed = httpx.get(f"{server.url}/apis/policy/v1/namespaces/default/poddisruptionbudgets")
        (pdb,) = listed.json()["items"]
        assert pdb["apiVersion"] == "policy/v1" and pdb["kind"] == "PodDisruptionBudget"
        assert pdb["spec"]["minAvailable"] == 1
        assert pdb["status"]["disruptionsAllowed"] == 0
        assert (pdb["status"]["currentHealthy"], pdb["status"]["expectedPods"]) == (1, 1)
        assert httpx.get(f"{server.url}/api/v1/namespaces/default/pods/train-0").is_success
        assert httpx.delete(f"{server.url}/_sim/notices/pdb/default/train").is_success
        assert _evict(server.url, "default", "train-0").status_code == 201


def test_a_max_unavailable_budget_over_a_jobs_pod_holds_every_eviction(tmp_path: Path) -> None:
    """The disruption controller sizes a `maxUnavailable` (or percentage) budget by its pods'
    controllers' scale; a Job has no scale subresource, so the budget fails to sync (condition
    SyncFailed) and allows no disruption at all: `maxUnavailable: 1` over a training Job's pod
    holds its eviction as `minAvailable: 1` does."""
    sim = KubernetesSimulator(node=NODE)
    with SimServer(sim) as server:
        assert _post(server.url, "/_sim/notices", {"kind": "pod", "name": "train-0"}).is_success
        budget = {"kind": "pdb", "name": "train", "max_unavailable": 1}
        assert _post(server.url, "/_sim/notices", budget).status_code == 201
        got = httpx.get(
            f"{server.url}/apis/policy/v1/namespaces/default/poddisruptionbudgets/train"
        )
        status = got.json()["status"]
        assert status["disruptionsAllowed"] == 0
        (condition,) = status["conditions"]
        assert (condition["type"], condition["status"], condition["reason"]) == (
            "DisruptionAllowed",
            "False",
            "SyncFailed",
        )
        assert 'found no controllers for pod "train-0"' in condition["message"]
        assert _evict(server.url, "default", "train-0").status_code == 429


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (CI installs it)")
def test_kubectl_get_pdb_prints_the_api_servers_columns(tmp_path: Path) -> None:
    """found: `kubectl get pdb` against the simulator printed NAME and AGE only (no Table),
    so the ALLOWED DISRUPTIONS an operator reads to see why a drain waits was not there. The
    API server's printer: MIN AVAILABLE, MAX UNAVAILABLE (N/A for the field not set),
    ALLOWED DISRUPTIONS, AGE."""
    sim = KubernetesSimulator(node=NODE)
    with SimServer(sim) as server:
        assert _post(server.url, "/_sim/notices", {"kind": "pod", "name": "train-0"}).is_success
        for budget in (
            {"name": "train", "min_available": 1},
            {"name": "all", "max_unavailable": "50%"},
        ):
            assert _post(server.url, "/_sim/notices", {"kind": "pdb", **budget}).is_success
        got = kubectl(tmp_path, server.url, "get", "pdb")
    assert got.returncode == 0, got.stderr
    header, *rows = [line.split() for line in got.stdout.splitlines()]
    assert header == [
        "NAME",
        "MIN",
        "AVAILABLE",
        "MAX",
        "UNAVAILABLE",
        "ALLOWED",
        "DISRUPTIONS",
        "AGE",
    ]
    assert [row[:4] for row in rows] == [["all", "N/A", "50%", "0"], ["train", "1", "N/A", "0"]]


def _drain(tmp_path: Path, url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        kubectl_command(tmp_path, url, "drain", NODE, "--timeout=60s"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=kubectl_env(tmp_path),
    )


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (CI installs it)")
@pytest.mark.usefixtures("forked_agents")
def test_a_drain_held_by_a_budget_leaves_the_agents_drain_standing(tmp_path: Path) -> None:
    """The walk of a drain a budget holds, with a real `kubectl drain` and the real agent:
    the drain cordons the node (the agent's drain notice goes out), its eviction of the job's
    pod is refused with the 429 and retried every 5 s, the pod stays and the notice stands
    (no clear, no terminate: the agent watches the Node, which is still cordoned); once the
    budget is lifted the next retry evicts the pod (the job's SIGTERM is its kubelet's, not
    the agent's) and the drain finishes, the notice still standing."""
    sim = KubernetesSimulator(node=NODE, max_watch_seconds=30, bookmark_interval=1)
    with SimServer(sim) as server:
        assert _post(server.url, "/_sim/notices", {"kind": "pod", "name": "train-0"}).is_success
        budget = {"kind": "pdb", "name": "train", "min_available": 1}
        assert _post(server.url, "/_sim/notices", budget).status_code == 201
        env = agent_env(tmp_path, FOREWARN_KUBERNETES_URL=server.url, NODE_NAME=NODE)
        notice_id = f"kubernetes/{NODE}/cordon"
        with (
            AgentProcess(tmp_path, providers=("kubernetes",), env=env) as agent,
            agent.subscriber() as sub,
        ):
            eventually(lambda: sim.open_watches >= 1, what="the agent's watch")
            drain = _drain(tmp_path, server.url)
            try:
                notice = sub.notice(timeout=10)
                assert (notice["action"], notice["id"]) == ("drain", notice_id), notice
                eventually(lambda: _refused(sim) >= 2, timeout=20, what="two refusals")
                assert drain.poll() is None  # kubectl is still waiting on the budget
                with sim.lock:
                    assert [p["metadata"]["name"] for p in sim.sim_pods.listed([])] == ["train-0"]
                    assert sim.sim_pods.evictions == []
                status = agent.control({"op": "status"})
                assert [n["id"] for n in status["active"]] == [notice_id]
                assert httpx.delete(f"{server.url}/_sim/notices/pdb/default/train").is_success
                out, err = drain.communicate(timeout=30)
            finally:
                if drain.poll() is None:
                    drain.kill()
                    drain.communicate()
            assert drain.returncode == 0, err
            assert "will retry after 5s" in err and BUDGET_MESSAGE in err, err
            assert "pod/train-0 evicted" in out, out
            with sim.lock:
                assert [e["name"] for e in sim.sim_pods.evictions] == ["train-0"]
            status = agent.control({"op": "status"})
            assert [n["id"] for n in status["active"]] == [notice_id]
            assert [n["action"] for n in status["active"]] == ["drain"]
            assert sub.drain(quiet=1.0) == []  # nothing else: no clear, no terminate
    assert "Traceback" not in agent.output()


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[KubernetesSimulator, str]]:
    sim = KubernetesSimulator(node=NODE)
    with SimServer(sim) as server:
        yield sim, server.url


labels = st.dictionaries(st.sampled_from(["app", "job-name", "tier"]), st.sampled_from(["a", "b"]))
budgets = st.fixed_dictionaries(
    {"name": st.sampled_from(["one", "two"]), "match_labels": labels},
    optional={"min_available": st.integers(0, 3), "max_unavailable": st.integers(0, 3)},
)


@settings(max_examples=examples(150), deadline=None)
@given(
    pods=st.lists(labels, min_size=1, max_size=4),
    pdbs=st.lists(budgets, max_size=2, unique_by=lambda b: b["name"]),
)
def test_an_eviction_is_admitted_exactly_when_the_one_matching_budget_allows_it(
    served: tuple[KubernetesSimulator, str], pods: list[dict[str, str]], pdbs: list[dict[str, Any]]
) -> None:
    """Whatever the pods' labels and the budgets: no matching budget, 201; two, the API
    server's 500 (the eviction subresource supports one); one, 201 when its
    `disruptionsAllowed` (healthy pods above `minAvailable`; none for `maxUnavailable` over
    Job pods) is above 0, else 429, the pod still there. A budget with both fields or neither
    is the API server's 422."""
    sim, url = served
    with sim.lock:
        sim.sim_pods.pods.clear()
        sim.sim_pods.budgets.budgets.clear()
    for index, pod_labels in enumerate(pods):
        made = _post(
            url, "/_sim/notices", {"kind": "pod", "name": f"p{index}", "labels": pod_labels}
        )
        assert made.status_code == 201, made.text
    made_budgets = []
    for budget in pdbs:
        made = _post(url, "/_sim/notices", {"kind": "pdb", **budget})
        one = ("min_available" in budget) != ("max_unavailable" in budget)
        assert made.status_code == (201 if one else 422), made.text
        if one:
            made_budgets.append(budget)
    target = pods[0]
    matching = [
        b for b in made_budgets if all(target.get(k) == v for k, v in b["match_labels"].items())
    ]
    answer = _evict(url, "default", "p0")
    if not matching:
        expected = 201
    elif len(matching) > 1:
        expected = 500
    elif "max_unavailable" in matching[0]:
        expected = 429
    else:
        selected = [
            p for p in pods if all(p.get(k) == v for k, v in matching[0]["match_labels"].items())
        ]
        expected = 201 if len(selected) - matching[0]["min_available"] > 0 else 429
    assert answer.status_code == expected, (pods, made_budgets, answer.text)
    there = httpx.get(f"{url}/api/v1/namespaces/default/pods/p0").status_code
    assert there == (404 if expected == 201 else 200)


pdb_fields = st.dictionaries(
    st.sampled_from(["name", "namespace", "match_labels", "min_available", "max_unavailable"]),
    st.recursive(
        st.none() | st.booleans() | st.integers(-2, 5) | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
        max_leaves=6,
    ),
)


@settings(max_examples=examples(150), deadline=None)
@given(fields=pdb_fields)
def test_any_budget_fields_get_a_control_api_answer(
    served: tuple[KubernetesSimulator, str], fields: dict[str, Any]
) -> None:
    """Whatever the fields, a budget is made (201) or refused (400/422) naming the field; the
    simulator never answers 500 and the budgets list stays readable."""
    sim, url = served
    with sim.lock:
        sim.sim_pods.budgets.budgets.clear()
    made = _post(url, "/_sim/notices", {"kind": "pdb", **fields})
    assert made.status_code in (201, 400, 422), made.text
    listed = httpx.get(f"{url}/apis/policy/v1/poddisruptionbudgets")
    assert listed.status_code == 200
    assert len(listed.json()["items"]) == (1 if made.status_code == 201 else 0)
    json.dumps(listed.json())
