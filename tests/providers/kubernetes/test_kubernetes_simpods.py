"""The simulator's pods: a real `kubectl drain` evicts them, and the eviction endpoint takes
whatever a client sends without a server error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from forewarn.providers.kubernetes.simulate import KubernetesSimulator
from forewarn.providers.simulator import SimServer
from hypothesis import given, settings
from hypothesis import strategies as st
from k8s_support import KUBECTL, NODE, kubectl
from support import examples

EVICTION = "/api/v1/namespaces/ml/pods/train-0/eviction"


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (CI installs it)")
def test_a_real_kubectl_drain_evicts_the_simulated_pod(tmp_path: Path) -> None:
    """found: `kubectl drain` against the simulator cordoned the node, listed no pod and said
    `drained`: the simulator ran no pods, so the eviction a real drain sends (and the job's
    SIGTERM behind it) could not be rehearsed. A pod raised through the control API is listed
    on the node, evicted through policy/v1 (not deleted: `pods/eviction` is in discovery) and
    gone when kubectl looks again; a pod on no other node is touched."""
    sim = KubernetesSimulator(node=NODE)
    with SimServer(sim) as server:
        control = httpx.post(
            f"{server.url}/_sim/notices",
            json={"kind": "pod", "name": "train-0", "namespace": "ml", "grace": 45},
            trust_env=False,
        )
        assert control.status_code == 201, control.text
        assert control.json()["id"] == "pod/ml/train-0"
        drain = kubectl(tmp_path, server.url, "drain", NODE, "--timeout=30s")
        assert drain.returncode == 0, drain.stderr
        assert "evicting pod ml/train-0" in drain.stdout, drain.stdout
        assert "pod/train-0 evicted" in drain.stdout, drain.stdout
        state = httpx.get(f"{server.url}/_sim/state", trust_env=False).json()
    assert state["pods"] == []
    (eviction,) = state["evictions"]
    assert (eviction["namespace"], eviction["name"], eviction["gracePeriodSeconds"]) == (
        "ml",
        "train-0",
        45,
    )
    assert state["node"]["spec"]["unschedulable"] is True


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[KubernetesSimulator, httpx.Client]]:
    sim = KubernetesSimulator(node=NODE)
    with SimServer(sim) as server, httpx.Client(base_url=server.url, trust_env=False) as client:
        yield sim, client


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=20,
)
eviction_bodies = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda value: json.dumps(value).encode()),
    st.fixed_dictionaries(
        {
            "apiVersion": st.sampled_from(["policy/v1", "policy/v1beta1", "v1", ""]),
            "kind": st.sampled_from(["Eviction", "Pod"]),
            "metadata": st.fixed_dictionaries(
                {"name": st.sampled_from(["train-0", "other", ""])},
                optional={"namespace": st.sampled_from(["ml", "default"])},
            )
            | json_values,
        },
        optional={"deleteOptions": json_values},
    ).map(lambda value: json.dumps(value).encode()),
)


@settings(max_examples=examples(120), deadline=None)
@given(body=eviction_bodies)
def test_an_eviction_body_is_admitted_only_as_an_eviction_of_that_pod(
    served: tuple[KubernetesSimulator, httpx.Client], body: bytes
) -> None:
    """Whatever the body, the answer is the API server's: 201 (the pod gone) only for a
    policy Eviction naming this pod in this namespace, else 400 and the pod still there;
    never a 5xx or a dropped connection."""
    sim, client = served
    with sim.lock:
        sim.sim_pods.pods.clear()
        sim.raise_notice("pod", {"name": "train-0", "namespace": "ml"})
    answer = client.post(EVICTION, content=body)
    assert answer.status_code in (201, 400), answer.text
    assert answer.json()["kind"] == "Status"
    try:
        sent = json.loads(body)
    except ValueError:
        sent = None
    metadata = sent.get("metadata") if isinstance(sent, dict) else None
    admitted = (
        isinstance(sent, dict)
        and sent.get("kind") == "Eviction"
        and sent.get("apiVersion") in ("policy/v1", "policy/v1beta1")
        and isinstance(metadata, dict)
        and metadata.get("name") == "train-0"
        and metadata.get("namespace", "ml") == "ml"
    )
    assert (answer.status_code == 201) == admitted, (body, answer.text)
    listed = client.get("/api/v1/pods", params={"fieldSelector": f"spec.nodeName={NODE}"})
    names = [pod["metadata"]["name"] for pod in listed.json()["items"]]
    assert names == ([] if admitted else ["train-0"])


@settings(max_examples=examples(120), deadline=None)
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
    namespace=st.sampled_from(["ml", "default", "kube-system"]),
    name=st.sampled_from(["train-0", "other"]),
    tail=st.sampled_from(["", "/eviction", "/status", "/log", "/eviction/x"]),
)
def test_any_pod_request_gets_an_api_server_answer(
    served: tuple[KubernetesSimulator, httpx.Client],
    method: str,
    namespace: str,
    name: str,
    tail: str,
) -> None:
    """A pod is read (200, or 404 once gone) and evicted (POST .../eviction); any other verb
    or subresource is a 404 or 405 Status, not a server error."""
    sim, client = served
    with sim.lock:
        sim.sim_pods.pods.clear()
        sim.raise_notice("pod", {"name": "train-0", "namespace": "ml"})
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
    path = f"/api/v1/namespaces/{namespace}/pods/{name}{tail}"
    answer = client.request(method, path, json=body)
    there = (namespace, name) == ("ml", "train-0")
    if (method, tail) == ("GET", ""):
        expected = 200 if there else 404
    elif (method, tail) == ("POST", "/eviction"):
        expected = 201 if there else 404
    elif tail == "/eviction/x":
        expected = 404  # no such route
    else:
        expected = 405
    assert answer.status_code == expected, (method, path, answer.text)
    assert answer.json()["kind"] in ("Status", "Pod")


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"name": "Train_0"}, '"name" must be a pod name'),
        ({"namespace": "a.b"}, '"namespace" must be a namespace name'),
        ({"grace": -1}, '"grace" must be a whole number'),
        ({"grace": True}, '"grace" must be a whole number'),
        ({"node": "x"}, "node"),
    ],
)
def test_a_pod_the_api_server_would_refuse_is_refused(
    served: tuple[KubernetesSimulator, httpx.Client], fields: dict[str, object], problem: str
) -> None:
    _, client = served
    answer = client.post("/_sim/notices", json={"kind": "pod", **fields})
    assert answer.status_code in (400, 422), answer.text
    assert problem in answer.json()["error"], answer.text


def test_a_pod_is_withdrawn_and_raised_again(
    served: tuple[KubernetesSimulator, httpx.Client],
) -> None:
    sim, client = served
    with sim.lock:
        sim.sim_pods.pods.clear()
    assert client.post("/_sim/notices", json={"kind": "pod"}).json()["id"] == "pod/default/job-0"
    again = client.post("/_sim/notices", json={"kind": "pod"})
    assert again.status_code == 409, again.text
    assert client.delete("/_sim/notices/pod/default/job-0").status_code == 200
    assert client.get("/api/v1/namespaces/default/pods/job-0").status_code == 404


_POD_VALUES = {
    "spec.nodeName": [NODE, "other-node"],
    "status.phase": ["Running", "Succeeded", "Failed"],
    "metadata.name": ["train-0", "train-1"],
    "metadata.namespace": ["ml", "default"],
}


@settings(max_examples=examples(120), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(sorted(_POD_VALUES)),
            st.sampled_from(["=", "==", "!="]),
            st.integers(0, 2),
        ),
        max_size=4,
    )
)
def test_a_pod_is_listed_exactly_when_the_field_selector_picks_it(
    served: tuple[KubernetesSimulator, httpx.Client], clauses: list[tuple[str, str, int]]
) -> None:
    """`kubectl drain` lists `spec.nodeName=<node>` and `describe` adds
    `status.phase!=Failed,status.phase!=Succeeded`: the Running pod `ml/train-0` on the node is
    in the list exactly when every clause holds for it."""
    sim, client = served
    with sim.lock:
        sim.sim_pods.pods.clear()
        sim.raise_notice("pod", {"name": "train-0", "namespace": "ml"})
    own = {"spec.nodeName": NODE, "status.phase": "Running"}
    own |= {"metadata.name": "train-0", "metadata.namespace": "ml"}
    selector, picks = [], True
    for field, operator, index in clauses:
        values = _POD_VALUES[field]
        value = values[index % len(values)]
        selector.append(f"{field}{operator}{value}")
        picks = picks and ((own[field] == value) == (operator != "!="))
    answer = client.get("/api/v1/pods", params={"fieldSelector": ",".join(selector)})
    assert answer.status_code == 200, answer.text
    names = [pod["metadata"]["name"] for pod in answer.json()["items"]]
    assert names == (["train-0"] if picks else []), selector
