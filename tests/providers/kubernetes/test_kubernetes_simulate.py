"""The node API simulator itself, and `forewarn simulate kubernetes`."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from forewarn.protocol.timefmt import parse_time
from forewarn.providers.kubernetes import simulate
from forewarn.providers.kubernetes.api import uid_refused
from forewarn.providers.kubernetes.config import node_name
from forewarn.providers.kubernetes.settings import Settings
from forewarn.providers.kubernetes.simulate import (
    DEFAULT_NODE,
    KubernetesSimulator,
    drill_script,
    merge_patch,
)
from forewarn.providers.simulator import SimError, SimServer
from hypothesis import given, settings
from hypothesis import strategies as st
from k8s_support import KUBECTL
from k8s_support import kubectl as _kubectl
from support import agent_env, eventually, examples, forewarn_cmd, run_forewarn

NODE = "sim-node"
AUTH = {"Authorization": "Bearer secret"}


@pytest.fixture
def api() -> Iterator[httpx.Client]:
    sim = KubernetesSimulator(node=NODE, token="secret", max_watch_seconds=1, bookmark_interval=0.2)
    with SimServer(sim) as server, httpx.Client(base_url=server.url, trust_env=False) as client:
        yield client


def selector(name: str = NODE) -> dict[str, str]:
    return {"fieldSelector": f"metadata.name={name}"}


def watch_lines(client: httpx.Client, **params: str) -> list[dict[str, object]]:
    query = {**selector(), "watch": "1", **params}
    with client.stream("GET", "/api/v1/nodes", params=query, headers=AUTH, timeout=5) as response:
        assert response.status_code == 200
        return [json.loads(line) for line in response.iter_lines() if line]


def test_list_and_field_selector(api: httpx.Client) -> None:
    listed = api.get("/api/v1/nodes", params=selector(), headers=AUTH).json()
    assert listed["kind"] == "NodeList"
    assert [item["metadata"]["name"] for item in listed["items"]] == [NODE]
    assert (
        listed["metadata"]["resourceVersion"] == listed["items"][0]["metadata"]["resourceVersion"]
    )
    other = api.get("/api/v1/nodes", params=selector("other"), headers=AUTH).json()
    assert other["items"] == []
    bad = api.get("/api/v1/nodes", params={"fieldSelector": "spec.foo=1"}, headers=AUTH)
    assert bad.status_code == 400


def test_wrong_or_missing_token_is_401(api: httpx.Client) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        response = api.get("/api/v1/nodes", headers=headers)
        assert response.status_code == 401
        assert response.json()["reason"] == "Unauthorized"
    api.post("/_sim/notices", json={"kind": "rotate-token", "token": "new"})
    assert api.get("/api/v1/nodes", headers=AUTH).status_code == 401
    assert api.get("/api/v1/nodes", headers={"Authorization": "Bearer new"}).status_code == 200


def test_watch_replays_from_a_version_then_times_out(api: httpx.Client) -> None:
    start = api.get("/api/v1/nodes", params=selector(), headers=AUTH).json()
    rv = start["metadata"]["resourceVersion"]
    api.post("/_sim/notices", json={"kind": "cordon"})
    api.post("/_sim/notices", json={"kind": "taint", "key": "karpenter.sh/disrupted"})
    began = time.monotonic()
    events = watch_lines(api, resourceVersion=rv, timeoutSeconds="1")
    assert time.monotonic() - began < 4
    kinds = [event["type"] for event in events]
    assert kinds == ["MODIFIED", "MODIFIED"]  # no bookmarks unless asked for
    cordoned = events[0]["object"]
    assert cordoned["spec"]["unschedulable"] is True  # type: ignore[index]
    assert cordoned["spec"]["taints"][0]["key"] == "node.kubernetes.io/unschedulable"  # type: ignore[index]


def test_watch_from_zero_starts_with_added_and_bookmarks(api: httpx.Client) -> None:
    events = watch_lines(api, resourceVersion="0", allowWatchBookmarks="true")
    assert events[0]["type"] == "ADDED"
    assert {event["type"] for event in events[1:]} == {"BOOKMARK"}
    assert len(events) >= 3


def test_a_simulator_served_again_after_a_stop_streams_its_watches() -> None:
    """An API server restart as a test plays it: the same simulator (its etcd) served again
    on the port. Its stop ended the open watches for good: every later watch ended at once
    with no event, and a watcher never saw the node change again."""
    sim = KubernetesSimulator(node=NODE, token="secret", max_watch_seconds=1, bookmark_interval=5)
    with SimServer(sim) as server:
        port = server.port
    with (
        SimServer(sim, port=port) as server,
        httpx.Client(base_url=server.url, trust_env=False) as client,
    ):
        rv = client.get("/api/v1/nodes", params=selector(), headers=AUTH).json()["metadata"]
        client.post("/_sim/notices", json={"kind": "cordon"})
        events = watch_lines(client, resourceVersion=rv["resourceVersion"], timeoutSeconds="1")
    assert [event["type"] for event in events] == ["MODIFIED"]


def test_too_old_version_is_gone(api: httpx.Client) -> None:
    rv = api.get("/api/v1/nodes", headers=AUTH).json()["metadata"]["resourceVersion"]
    api.post("/_sim/notices", json={"kind": "compact"})
    events = watch_lines(api, resourceVersion=rv)
    assert events == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": events[0]["object"]["message"],  # type: ignore[index]
                "reason": "Expired",
                "code": 410,
            },
        }
    ]
    api.post("/_sim/notices", json={"kind": "compact", "as": "status"})
    response = api.get("/api/v1/nodes", params={"watch": "1", "resourceVersion": rv}, headers=AUTH)
    assert response.status_code == 410


def test_a_version_ahead_of_a_restored_server_is_too_large() -> None:
    sim = KubernetesSimulator(node=NODE, token="secret", max_watch_seconds=1, too_large_wait=0.1)
    with SimServer(sim) as server, httpx.Client(base_url=server.url, trust_env=False) as client:
        rv = int(client.get("/api/v1/nodes", headers=AUTH).json()["metadata"]["resourceVersion"])
        client.post("/_sim/notices", json={"kind": "restore", "back": 10})
        listed = client.get("/api/v1/nodes", headers=AUTH).json()
        assert int(listed["metadata"]["resourceVersion"]) == rv - 10
        [event] = watch_lines(client, resourceVersion=str(rv))
        assert event["type"] == "ERROR"
        status: Any = event["object"]
        assert (status["code"], status["reason"]) == (504, "Timeout")
        assert status["message"] == f"Too large resource version: {rv}, current: {rv - 10}"
        assert status["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
        # From the restored version, a watch follows the node's changes.
        client.post("/_sim/notices", json={"kind": "cordon"})
        events = watch_lines(client, resourceVersion=str(rv - 10))
        assert events[0]["type"] == "MODIFIED"
        assert client.get("/_sim/state").json()["too_large"] == 1


def test_patch_cordons_like_kubectl(api: httpx.Client) -> None:
    patch = {"spec": {"unschedulable": True}}
    headers = {**AUTH, "Content-Type": "application/strategic-merge-patch+json"}
    node = api.patch(f"/api/v1/nodes/{NODE}", content=json.dumps(patch), headers=headers).json()
    assert node["spec"]["unschedulable"] is True
    # As a real API server writes them: the controller's taint is NoSchedule with no value
    # and no `timeAdded` (written only for NoExecute); the field's manager and time are in
    # managedFields.
    assert node["spec"]["taints"] == [
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    ]
    # The field's manager and the controller's, whose the taints list is now.
    entry, taints = node["metadata"]["managedFields"]
    assert entry["manager"] == "kubectl-cordon"
    assert entry["fieldsV1"] == {"f:spec": {"f:unschedulable": {}}}
    assert taints["manager"] == "kube-controller-manager"
    assert taints["fieldsV1"] == {"f:spec": {"f:taints": {}}}
    undo = {"spec": {"unschedulable": None}}
    node = api.patch(f"/api/v1/nodes/{NODE}", content=json.dumps(undo), headers=headers).json()
    assert "unschedulable" not in node["spec"]
    assert "taints" not in node["spec"]
    assert "managedFields" not in node["metadata"]  # the field left the only entry
    wrong = api.patch(
        f"/api/v1/nodes/{NODE}", content="{}", headers={**AUTH, "Content-Type": "text/plain"}
    )
    assert wrong.status_code == 415
    missing = api.patch("/api/v1/nodes/other", content="{}", headers=headers)
    assert missing.status_code == 404


def test_only_a_no_execute_taint_gets_time_added(api: httpx.Client) -> None:
    """The API server writes `timeAdded` only for NoExecute taints, whatever the `taint`
    control call is given; the watcher was tested against one on every taint."""
    for effect in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        body = {"kind": "taint", "key": f"example.com/{effect.lower()}", "effect": effect}
        assert api.post("/_sim/notices", json=body).status_code == 201
    taints = api.get(f"/api/v1/nodes/{NODE}", headers=AUTH).json()["spec"]["taints"]
    assert [("timeAdded" in t, t["effect"]) for t in taints] == [
        (False, "NoSchedule"),
        (False, "PreferNoSchedule"),
        (True, "NoExecute"),
    ]


def test_a_patch_for_another_uid_is_refused_as_the_api_server_does(api: httpx.Client) -> None:
    """metadata.uid is immutable: a patch carrying another uid is 422 Invalid and changes
    nothing (the agent's cordon relies on it to reach only the Node it was raised for)."""
    headers = {**AUTH, "Content-Type": "application/strategic-merge-patch+json"}
    uid = api.get(f"/api/v1/nodes/{NODE}", headers=AUTH).json()["metadata"]["uid"]
    stale = {"metadata": {"uid": "0-old"}, "spec": {"unschedulable": True}}
    refused = api.patch(f"/api/v1/nodes/{NODE}", content=json.dumps(stale), headers=headers)
    assert refused.status_code == 422, refused.text
    assert refused.json()["reason"] == "Invalid" and "metadata.uid" in refused.json()["message"]
    assert uid_refused(refused.status_code, refused.content)
    node = api.get(f"/api/v1/nodes/{NODE}", headers=AUTH).json()
    assert not node["spec"].get("unschedulable")
    same = {"metadata": {"uid": uid}, "spec": {"unschedulable": True}}
    done = api.patch(f"/api/v1/nodes/{NODE}", content=json.dumps(same), headers=headers)
    assert done.status_code == 200 and done.json()["spec"]["unschedulable"] is True
    assert not uid_refused(done.status_code, done.content)


@given(st.integers(min_value=100, max_value=599), st.binary(max_size=300))
def test_uid_refused_reads_any_answer(status: int, body: bytes) -> None:
    assert uid_refused(status, body) in (True, False)
    if status not in (409, 422):
        assert not uid_refused(status, body)


def test_a_uid_precondition_refused_as_a_conflict_is_read_too() -> None:
    message = "Precondition failed: UID in precondition: 0-old, UID in object meta: 1-new"
    body = json.dumps({"kind": "Status", "code": 409, "message": message}).encode()
    assert uid_refused(409, body)
    assert not uid_refused(409, b'{"message": "Operation cannot be fulfilled: conflict"}')


@pytest.mark.parametrize("opening", ["[", '{"a":'])
def test_a_patch_or_event_nested_past_json_recursion_is_a_400(
    api: httpx.Client, opening: str
) -> None:
    """The node PATCH and the Event POST answered 500 with a traceback for a body nested a few
    thousand deep (RecursionError, not ValueError), where any other unreadable body is a 400."""
    body = opening * 100_000
    headers = {**AUTH, "Content-Type": "application/strategic-merge-patch+json"}
    patch = api.patch(f"/api/v1/nodes/{NODE}", content=body, headers=headers)
    assert patch.status_code == 400 and "patch" in patch.json()["message"]
    headers = {**AUTH, "Content-Type": "application/json"}
    event = api.post(
        "/apis/events.k8s.io/v1/namespaces/default/events", content=body, headers=headers
    )
    assert event.status_code == 400 and "event" in event.json()["message"]


def test_control_errors(api: httpx.Client) -> None:
    assert api.post("/_sim/notices", json={"kind": "flood"}).status_code == 400
    assert api.post("/_sim/notices", json={"kind": "taint"}).status_code == 400
    assert (
        api.post("/_sim/notices", json={"kind": "taint", "key": "k", "effect": "Nope"}).status_code
        == 400
    )
    assert api.delete("/_sim/notices/cordon").status_code == 404  # not cordoned
    notice = api.post("/_sim/notices", json={"kind": "taint", "key": "k"}).json()["id"]
    changed = api.patch(f"/_sim/notices/{notice}", json={"effect": "NoExecute"})
    assert changed.status_code == 200
    taints = api.get("/_sim/state").json()["node"]["spec"]["taints"]
    assert taints[0]["effect"] == "NoExecute"


def test_merge_patch() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None, "d": 3}}) == {
        "a": {"c": 2, "d": 3}
    }
    assert merge_patch({"a": [1]}, {"a": [2]}) == {"a": [2]}


def test_drill_script_matches_the_simulator_defaults() -> None:
    script = drill_script()
    assert script["drain"] == ("cordon", {})
    assert script["terminate"] == ("shutdown", {})
    env = script["env"]
    assert env["FOREWARN_KUBERNETES_NODE_NAME"] == DEFAULT_NODE
    name, token = script["files"]["FOREWARN_KUBERNETES_TOKEN_FILE"]
    assert name and token.strip()
    sim = KubernetesSimulator()
    assert sim.node_name == DEFAULT_NODE
    assert sim.token is None  # accepts the drill's token file, whatever it holds


def test_cli_serves_the_node(tmp_path: Path) -> None:
    command = forewarn_cmd("simulate", "kubernetes", "--node", "cli-node", "--token", "tok")
    proc = subprocess.Popen(
        command,
        env=agent_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = None
        deadline = time.monotonic() + 15
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if "listening on" in line:
                url = line.rsplit(" ", 1)[-1].strip()
        assert url is not None and url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=url, trust_env=False) as client:
            listed = client.get(
                "/api/v1/nodes",
                params=selector("cli-node"),
                headers={"Authorization": "Bearer tok"},
            )
            assert listed.json()["items"][0]["metadata"]["name"] == "cli-node"
            assert client.get("/api/v1/nodes").status_code == 401
    finally:
        proc.terminate()
        proc.wait(10)
    assert proc.returncode == 0


@pytest.mark.parametrize("given_name", ["GPU-Node-1", " gpu-node-1\n", "Gpu-Node-1 "])
def test_cli_serves_the_node_under_the_name_the_agent_watches(given_name: str) -> None:
    """`forewarn simulate kubernetes --node "$(hostname)"` served a Node named `GPU-Node-1`,
    which no cluster can hold (a Node's name is lower case), while the agent given the same
    `NODE_NAME` watches `gpu-node-1`: it reported `node-not-found` for ever."""
    parser = argparse.ArgumentParser()
    simulate.add_arguments(parser)
    served = parser.parse_args(["--node", given_name]).node
    watched = node_name(Settings(), {"NODE_NAME": given_name})
    assert served == watched == "gpu-node-1"


@pytest.mark.parametrize("option", ["--bookmark-interval", "--max-watch-seconds"])
def test_cli_refuses_a_zero_interval(tmp_path: Path, option: str) -> None:
    """`--bookmark-interval 0` (meant as "no bookmarks") sent bookmarks without a pause:
    tens of thousands a second to every watch; a watch of 0 s ended as it began, for ever."""
    done = run_forewarn("simulate", "kubernetes", option, "0", env=agent_env(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{option}: must be more than 0" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"kind": "taint", "key": "k", "efect": "NoExecute"}, "efect"),
        ({"kind": "cordon", "tiant": False}, "tiant"),
        ({"kind": "cordon", "taint": "false"}, "taint"),
        ({"kind": "shutdown", "mesage": "x"}, "mesage"),
        ({"kind": "shutdown", "reason": 5}, "reason"),
        ({"kind": "delete", "now": True}, "now"),
        ({"kind": "compact", "expire_watches": "yes"}, "expire_watches"),
        ({"kind": "restore", "back": "5"}, "back"),
        ({"kind": "restore", "back": 0}, "back"),
        ({"kind": "restore", "back": 10**9}, "back"),
        ({"kind": "taint", "key": "k", "after": 60, "efect": "NoExecute"}, "efect"),
    ],
)
def test_a_notice_field_it_does_not_have_is_a_400_naming_it(
    api: httpx.Client, body: dict[str, object], named: str
) -> None:
    # The other simulators refuse unknown fields; this one took a typo quietly: `efect`
    # raised a NoSchedule taint, `taint: "false"` a cordon taint, and a handler's test of
    # the notice meant passed or failed against another one. A notice for later was not
    # checked at all (a 202, then nothing).
    answer = api.post("/_sim/notices", json=body)
    assert answer.status_code == 400 and named in answer.json()["error"], answer.text
    assert api.get("/_sim/state").json()["node"]["spec"].get("taints") is None


def test_a_taint_change_names_a_field_it_does_not_have(api: httpx.Client) -> None:
    notice = api.post("/_sim/notices", json={"kind": "taint", "key": "k"}).json()["id"]
    for fields, named in (({"efect": "NoExecute"}, "efect"), ({"value": 5}, "value")):
        answer = api.patch(f"/_sim/notices/{notice}", json=fields)
        assert answer.status_code == 400 and named in answer.json()["error"], answer.text


def _qualified_name(key: str) -> bool:
    """Kubernetes' IsQualifiedName, as its docs say it: an optional prefix, a DNS subdomain of
    at most 253 characters, and "/"; a name of 1-63 alphanumerics, '-', '_' or '.' that starts
    and ends alphanumeric."""
    parts = key.split("/")
    if len(parts) > 2:
        return False
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        label = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
        if not (len(prefix) <= 253 and re.fullmatch(rf"{label}(\.{label})*", prefix)):
            return False
    return len(name) <= 63 and bool(re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", name))


REFUSED_KEYS = [
    "bad key",
    "-starts-with-a-dash",
    "ends-with-a-dot.",
    "a/b/c",
    "/no-prefix",
    "Example.com/upper-case-prefix",
    "example.com/",
    "x" * 64,
    f"{'a' * 250}.com/k",  # a prefix of 254
    "k=v:NoSchedule",
]
TAKEN_KEYS = ["k", "example.com/MyName_1.x", "x" * 63, f"{'a' * 249}.com/k"]


@pytest.mark.parametrize("key", REFUSED_KEYS)
def test_a_taint_key_the_api_server_refuses_is_422_from_the_control_api(
    api: httpx.Client, key: str
) -> None:
    """A taint key is a qualified name (the API server's validation; `kubectl taint`'s help):
    the simulator took any string, so a test could raise a taint no cluster can have and
    see the agent handle it."""
    assert not _qualified_name(key), key
    refused = api.post("/_sim/notices", json={"kind": "taint", "key": key})
    assert refused.status_code == 422, refused.text
    assert key in refused.text, refused.text
    assert api.get("/_sim/state").json()["node"]["spec"].get("taints") is None


@pytest.mark.parametrize("key", REFUSED_KEYS)
def test_a_patch_with_a_taint_key_the_api_server_refuses_is_422_invalid(
    api: httpx.Client, key: str
) -> None:
    headers = {**AUTH, "Content-Type": "application/merge-patch+json"}
    patch = {"spec": {"taints": [{"key": key, "effect": "NoSchedule"}]}}
    refused = api.patch(f"/api/v1/nodes/{NODE}", content=json.dumps(patch), headers=headers)
    assert refused.status_code == 422, refused.text
    status = refused.json()
    assert status["reason"] == "Invalid" and "spec.taints[0].key" in status["message"], status
    assert api.get(f"/api/v1/nodes/{NODE}", headers=AUTH).json()["spec"].get("taints") is None


@pytest.mark.parametrize("key", TAKEN_KEYS)
def test_a_taint_key_the_api_server_takes_is_taken(api: httpx.Client, key: str) -> None:
    assert _qualified_name(key), key
    assert api.post("/_sim/notices", json={"kind": "taint", "key": key}).status_code == 201
    headers = {**AUTH, "Content-Type": "application/merge-patch+json"}
    patch = {"spec": {"taints": [{"key": key, "effect": "NoExecute"}]}}
    done = api.patch(f"/api/v1/nodes/{NODE}", content=json.dumps(patch), headers=headers)
    assert done.status_code == 200, done.text
    assert [t["key"] for t in done.json()["spec"]["taints"]] == [key]


@given(
    st.text(
        alphabet=st.sampled_from("aZ09-_./=: é"),
        min_size=1,
        max_size=70,
    )
    | st.builds(
        lambda p, n: f"{p}/{n}",
        st.from_regex(r"[a-z0-9.-]{0,260}", fullmatch=True),
        st.text("aZ9-_.", max_size=66),
    )
)
def test_the_simulator_takes_a_taint_key_exactly_when_it_is_a_qualified_name(key: str) -> None:
    sim = KubernetesSimulator(node=NODE, token="secret")
    try:
        sim.check_notice("taint", {"key": key})
    except SimError as error:
        assert error.status == 422 and not _qualified_name(key), (key, error)
    else:
        assert _qualified_name(key), key


def test_a_taint_value_the_api_server_refuses_is_422(api: httpx.Client) -> None:
    """A taint's value is a label value (63 characters at most, alphanumeric at both ends),
    raised or changed."""
    for value in ("has space", "x" * 64, "-dash"):
        raised = api.post("/_sim/notices", json={"kind": "taint", "key": "k", "value": value})
        assert raised.status_code == 422 and "value" in raised.json()["error"], raised.text
    notice = api.post("/_sim/notices", json={"kind": "taint", "key": "k", "value": "v1"})
    changed = api.patch(f"/_sim/notices/{notice.json()['id']}", json={"value": "not ok"})
    assert changed.status_code == 422, changed.text
    [taint] = api.get("/_sim/state").json()["node"]["spec"]["taints"]
    assert taint["value"] == "v1"


def test_a_patch_with_two_taints_of_one_key_and_effect_is_422_invalid(api: httpx.Client) -> None:
    """The API server's validation keeps a Node's taints unique by key and effect: a patch
    listing two (a merge patch that appends instead of replacing) is 422 Invalid, naming the
    second, and the Node is as it was. The simulator took it, and a watcher saw a Node no
    cluster can hold. One key with two effects is two taints, and taken."""
    headers = {**AUTH, "Content-Type": "application/merge-patch+json"}
    twice = [
        {"key": "example.com/maint", "value": "a", "effect": "NoSchedule"},
        {"key": "example.com/maint", "value": "b", "effect": "NoSchedule"},
    ]
    patch = {"spec": {"taints": twice}}
    refused = api.patch(f"/api/v1/nodes/{NODE}", content=json.dumps(patch), headers=headers)
    assert refused.status_code == 422, refused.text
    status = refused.json()
    assert status["reason"] == "Invalid", status
    assert "spec.taints[1]: Duplicate value" in status["message"], status
    assert "unique by key and effect" in status["message"], status
    assert api.get(f"/api/v1/nodes/{NODE}", headers=AUTH).json()["spec"].get("taints") is None
    both = [twice[0], {**twice[1], "effect": "NoExecute"}]
    patch = {"spec": {"taints": both}}
    done = api.patch(f"/api/v1/nodes/{NODE}", content=json.dumps(patch), headers=headers)
    assert done.status_code == 200, done.text
    assert [(t["key"], t["effect"]) for t in done.json()["spec"]["taints"]] == [
        ("example.com/maint", "NoSchedule"),
        ("example.com/maint", "NoExecute"),
    ]


@settings(max_examples=examples(30), deadline=None)  # a simulator served per example
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "key": st.sampled_from(["k", "example.com/k", "other"]),
                "effect": st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
            }
        ),
        max_size=5,
    )
)
def test_the_simulator_takes_a_nodes_taints_exactly_when_unique_by_key_and_effect(
    taints: list[dict[str, str]],
) -> None:
    sim = KubernetesSimulator(node=NODE, token="secret")
    with SimServer(sim) as server, httpx.Client(base_url=server.url, trust_env=False) as api:
        headers = {**AUTH, "Content-Type": "application/merge-patch+json"}
        patch = {"spec": {"taints": taints}}
        answer = api.patch(f"/api/v1/nodes/{NODE}", content=json.dumps(patch), headers=headers)
    pairs = [(t["key"], t["effect"]) for t in taints]
    unique = len(set(pairs)) == len(pairs)
    assert answer.status_code == (200 if unique else 422), (taints, answer.text)


def _stamp_micro(moment: datetime) -> str:
    """A MicroTime, as the agent writes an Event's eventTime."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (CI installs it)")
def test_a_real_kubectl_cordons_taints_and_uncordons_the_simulated_node(tmp_path: Path) -> None:
    """found: `kubectl cordon` against the simulator, as its docs say it is served, failed
    with `the server could not find the requested resource`: kubectl reads the API's
    discovery (`/api`, `/apis`, `/api/v1`) before it patches, and the simulator served none.
    No `--token`: kubectl sends no bearer token to an `http://` server (seen with 1.32)."""
    sim = KubernetesSimulator(node=NODE)
    with SimServer(sim) as server:
        cordon = _kubectl(tmp_path, server.url, "cordon", NODE)
        assert cordon.returncode == 0, cordon.stderr
        assert f"node/{NODE} cordoned" in cordon.stdout
        assert sim.node is not None and sim.node["spec"]["unschedulable"] is True
        managers = [entry["manager"] for entry in sim.node["metadata"]["managedFields"]]
        assert managers == ["kubectl-cordon", "kube-controller-manager"]
        disrupted = "karpenter.sh/disrupted:NoSchedule"
        taint = _kubectl(tmp_path, server.url, "taint", "node", NODE, disrupted)
        assert taint.returncode == 0, taint.stderr
        assert sim.node is not None
        keys = {t["key"] for t in sim.node["spec"]["taints"]}
        assert keys == {"node.kubernetes.io/unschedulable", "karpenter.sh/disrupted"}
        assert _taints_owners(sim.node) == ["kubectl-taint"]  # kubectl names its manager
        got = _kubectl(tmp_path, server.url, "get", "node", NODE, "-o", "json")
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout)["spec"]["unschedulable"] is True
        uncordon = _kubectl(tmp_path, server.url, "uncordon", NODE)
        assert uncordon.returncode == 0, uncordon.stderr
        assert sim.node is not None and "unschedulable" not in sim.node["spec"]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (CI installs it)")
def test_a_real_kubectl_describes_the_simulated_node(tmp_path: Path) -> None:
    """found: `kubectl describe node` against the simulator printed `Error from server
    (NotFound): Unable to find "pods" that match label selector "", field selector
    "spec.nodeName=...,status.phase!=Failed,status.phase!=Succeeded": no route /api/v1/pods`
    and nothing else: describe lists the node's pods, and the simulator served no pods. It
    runs none: the list is empty, and describe shows the node, its taints and conditions,
    its Lease (`Failed to get lease: no route ...` before) and the Events the agent posted
    about it through events.k8s.io/v1 (listed by describe through core v1, as the API server
    serves both; `Events: <none>` before), which `kubectl events` lists too (`no route
    /api/v1/namespaces/default/events` before), and `kubectl get events` by name (`no route
    /apis/events.k8s.io/v1/events` before)."""
    sim = KubernetesSimulator(node=NODE)
    sim.raise_notice("cordon", {})
    event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "forewarn-1", "namespace": "default"},
        "eventTime": "2026-12-07T10:00:00.000000Z",
        "reportingController": "forewarn.dev/agent",
        "reportingInstance": "forewarn-host",
        "action": "Terminate",
        "reason": "Eviction",
        "type": "Warning",
        # As the agent writes it: the uid is the node's name, as the kubelet's are.
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": NODE},
        "note": "forewarn: terminate (eviction from aws) [aws/spot/1]",
    }
    with SimServer(sim) as server:
        posted = httpx.post(
            f"{server.url}/apis/events.k8s.io/v1/namespaces/default/events",
            json=event,
            trust_env=False,
        )
        assert posted.status_code == 201, posted.text
        described = _kubectl(tmp_path, server.url, "describe", "node", NODE)
        assert described.returncode == 0, described.stderr
        assert described.stderr == ""
        out = described.stdout
        assert f"Name:               {NODE}" in out
        assert "node.kubernetes.io/unschedulable:NoSchedule" in out
        assert "Non-terminated Pods:          (0 in total)" in out
        assert f"HolderIdentity:  {NODE}" in out and "Failed to get lease" not in out
        (line,) = [line for line in out.splitlines() if "Eviction" in line]
        assert line.split()[:2] == ["Warning", "Eviction"], line
        assert "forewarn.dev/agent" in line and "[aws/spot/1]" in line, line
        # The core v1 list of the context's namespace (`default`), and the names of all.
        listed = _kubectl(tmp_path, server.url, "events")
        assert listed.returncode == 0, listed.stderr
        (line,) = [line for line in listed.stdout.splitlines() if "Eviction" in line]
        assert f"Node/{NODE}" in line and "[aws/spot/1]" in line, line
        # The name is a wide column of the server's Table.
        named = _kubectl(tmp_path, server.url, "get", "events", "-A", "-o", "wide")
        assert named.returncode == 0, named.stderr
        assert "forewarn-1" in named.stdout


_CLAUSES = st.lists(
    st.tuples(
        st.sampled_from(["spec.nodeName", "status.phase", "metadata.name", "spec.node", ""])
        | st.text(max_size=12),
        st.sampled_from(["=", "==", "!=", ""]),
        st.text(max_size=12),
    ),
    max_size=4,
)


def test_a_pod_list_is_empty_or_refused_by_the_field_it_names() -> None:
    """Whatever the field selector, the pod list answers an empty PodList, or the API
    server's 400 Status naming what it refused; never a 5xx. The core v1 event list too."""
    sim = KubernetesSimulator(node=NODE)
    with SimServer(sim) as server, httpx.Client(base_url=server.url, trust_env=False) as api:

        @settings(max_examples=examples(60), deadline=None)
        @given(_CLAUSES)
        def check(clauses: list[tuple[str, str, str]]) -> None:
            selector = ",".join(key + operator + value for key, operator, value in clauses)
            events = api.get("/api/v1/events", params={"fieldSelector": selector})
            assert events.status_code in (200, 400), events.text
            assert events.json()["kind"] == ("EventList" if events.status_code == 200 else "Status")
            answer = api.get("/api/v1/pods", params={"fieldSelector": selector})
            if answer.status_code == 200:
                assert answer.json()["kind"] == "PodList" and answer.json()["items"] == []
                return
            assert answer.status_code == 400, answer.text
            status = answer.json()
            assert status["kind"] == "Status" and status["reason"] == "BadRequest"
            message = status["message"]
            assert "field label not supported" in message or "no operator" in message

        check()


def test_a_pod_list_is_refused_without_the_token_or_the_grant() -> None:
    sim = KubernetesSimulator(node=NODE, token="secret", grants=frozenset({"get:nodes"}))
    with SimServer(sim) as server, httpx.Client(base_url=server.url, trust_env=False) as client:
        assert client.get("/api/v1/pods").status_code == 401
        refused = client.get("/api/v1/pods", headers=AUTH)
        assert refused.status_code == 403
        assert 'cannot list resource "pods"' in refused.json()["message"]


def _taints_owners(node: dict[str, Any]) -> list[str]:
    return [
        entry["manager"]
        for entry in node["metadata"].get("managedFields", [])
        if "f:taints" in entry["fieldsV1"].get("f:spec", {})
    ]


def test_the_taints_belong_to_their_last_writer_as_the_api_server_keeps_them(
    api: httpx.Client,
) -> None:
    """`spec.taints` is an atomic list: the API server records it in managedFields as one
    field, owned by the manager that last wrote it, whose entry's `time` (whole seconds) moves
    with each write. found: the simulator wrote no entry for taints, so a watcher could not
    be tested against the one thing that tells a NoSchedule taint removed and set again."""
    body = {"kind": "taint", "key": "karpenter.sh/disrupted", "manager": "karpenter"}
    assert api.post("/_sim/notices", json=body).status_code == 201
    node = api.get(f"/api/v1/nodes/{NODE}", headers=AUTH).json()
    (entry,) = node["metadata"]["managedFields"]
    assert entry["manager"] == "karpenter" and entry["operation"] == "Update"
    assert entry["fieldsV1"] == {"f:spec": {"f:taints": {}}}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", entry["time"])
    # The cordon's taint is the node lifecycle controller's write: the list is its now.
    assert api.post("/_sim/notices", json={"kind": "cordon"}).status_code == 201
    node = api.get(f"/api/v1/nodes/{NODE}", headers=AUTH).json()
    assert _taints_owners(node) == ["kube-controller-manager"]
    patch = {
        "spec": {"taints": [*node["spec"]["taints"], {"key": "a.b/c", "effect": "NoSchedule"}]}
    }
    headers = {**AUTH, "Content-Type": "application/strategic-merge-patch+json"}
    patched = api.patch(
        f"/api/v1/nodes/{NODE}",
        params={"fieldManager": "kubectl-taint"},
        content=json.dumps(patch),
        headers=headers,
    ).json()
    assert _taints_owners(patched) == ["kubectl-taint"]
    # Removed by the manager that set it: the taint's own manager writes the list again.
    assert api.delete("/_sim/notices/taint/karpenter.sh/disrupted").status_code == 200
    node = api.get(f"/api/v1/nodes/{NODE}", headers=AUTH).json()
    assert _taints_owners(node) == ["karpenter"]
    for notice in ("cordon", "taint/a.b/c"):
        assert api.delete(f"/_sim/notices/{notice}").status_code == 200
    node = api.get(f"/api/v1/nodes/{NODE}", headers=AUTH).json()
    assert "taints" not in node["spec"] and "managedFields" not in node["metadata"]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (CI installs it)")
def test_a_real_kubectl_gets_the_nodes_status_columns(tmp_path: Path) -> None:
    """found: walking an operator's `kubectl cordon` then `kubectl get nodes` against the
    simulator printed only `NAME AGE`: kubectl asks for a server-side Table (`Accept:
    application/json;as=Table;...`) and prints the object's name and age when the server
    answers with the plain object, so the STATUS an operator checks a cordon by
    (`Ready,SchedulingDisabled`) was never shown."""
    sim = KubernetesSimulator(node=NODE)
    with SimServer(sim) as server:

        def row(*extra: str) -> tuple[list[str], list[str]]:
            got = _kubectl(tmp_path, server.url, "get", "nodes", *extra)
            assert got.returncode == 0, got.stderr
            header, *rows = got.stdout.splitlines()
            assert len(rows) == 1, got.stdout
            return header.split(), rows[0].split()

        header, cells = row()
        assert header == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
        assert cells[:3] == [NODE, "Ready", "<none>"]
        assert cells[4] == "v1.31.0-forewarn-sim"
        sim.raise_notice("cordon", {})
        assert row()[1][1] == "Ready,SchedulingDisabled"
        sim.raise_notice("shutdown", {})
        assert row()[1][1] == "NotReady,SchedulingDisabled"
        sim.withdraw("cordon")
        sim.withdraw("shutdown")
        sim.raise_notice("unreachable", {})
        assert row()[1][1] == "NotReady"  # Ready Unknown: the printer's NotReady too
        header, cells = row("-o", "wide")
        assert header[5:] == [
            "INTERNAL-IP",
            "EXTERNAL-IP",
            "OS-IMAGE",
            "KERNEL-VERSION",
            "CONTAINER-RUNTIME",
        ]
        assert cells[5:7] == ["10.0.0.10", "<none>"]
        # The single GET and a label column, which kubectl adds to the server's row.
        got = _kubectl(tmp_path, server.url, "get", "node", NODE, "--show-labels")
        assert got.returncode == 0, got.stderr
        assert "kubernetes.io/hostname=" + NODE in got.stdout


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (CI installs it)")
def test_an_event_posted_gets_its_creation_time_as_the_api_server_stamps_it(
    tmp_path: Path,
) -> None:
    """found (a gap left last session): `kubectl get events -A` against the simulator printed
    AGE `<unknown>` for the agent's Events: the API server stamps `metadata.creationTimestamp`
    on every object it creates, and the simulator stored the Event as posted."""
    sim = KubernetesSimulator(node=NODE)
    event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"generateName": "forewarn-", "namespace": "default"},
        "eventTime": "2026-12-07T10:00:00.000000Z",
        "reportingController": "forewarn.dev/agent",
        "reportingInstance": "forewarn-host",
        "action": "Drain",
        "reason": "Cordon",
        "type": "Warning",
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": NODE},
        "note": "forewarn: drain",
    }
    with SimServer(sim) as server:
        before = sim.now().replace(microsecond=0)
        posted = httpx.post(
            f"{server.url}/apis/events.k8s.io/v1/namespaces/default/events",
            json=event,
            trust_env=False,
        )
        assert posted.status_code == 201, posted.text
        columns = "NAME:.metadata.name,CREATED:.metadata.creationTimestamp"
        got = _kubectl(
            tmp_path, server.url, "get", "events", "-A", "-o", f"custom-columns={columns}"
        )
        assert got.returncode == 0, got.stderr
        (row,) = got.stdout.splitlines()[1:]
        name, created = row.split()
        assert name.startswith("forewarn-")
        assert created != "<none>", got.stdout
        assert before <= parse_time(created) <= sim.now()
        assert posted.json()["metadata"]["creationTimestamp"] == created


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (CI installs it)")
def test_a_real_kubectl_watching_the_nodes_sees_the_cordon_in_its_status_column(
    tmp_path: Path,
) -> None:
    """found: `kubectl get nodes -w`, left open while the node was cordoned, printed a second
    `NAME AGE` header and a row without STATUS: kubectl asks the watch for Tables too, and
    the simulator's watch sent the plain Node."""
    sim = KubernetesSimulator(node=NODE)
    with SimServer(sim) as server:
        _kubectl(tmp_path, server.url, "version")  # writes the kubeconfig _kubectl uses
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "KUBECONFIG": str(tmp_path / "kubeconfig"),
            "KUBECACHEDIR": str(tmp_path / "cache"),
            "NO_PROXY": "127.0.0.1",
        }
        watch = subprocess.Popen(
            [str(KUBECTL), "get", "nodes", "-w"], env=env, stdout=subprocess.PIPE, text=True
        )
        # A kubectl that never prints must not hang the test: killed after 60 s.
        guard = threading.Timer(60, watch.kill)
        guard.start()
        try:
            assert watch.stdout is not None
            header = watch.stdout.readline().split()
            assert header == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
            assert watch.stdout.readline().split()[:2] == [NODE, "Ready"]
            eventually(lambda: sim.open_watches >= 1, what="kubectl's watch")
            sim.raise_notice("cordon", {})
            assert watch.stdout.readline().split()[:2] == [NODE, "Ready,SchedulingDisabled"]
            sim.withdraw("cordon")
            assert watch.stdout.readline().split()[:2] == [NODE, "Ready"]
        finally:
            guard.cancel()
            watch.kill()
            watch.wait()


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (CI installs it)")
def test_a_real_kubectl_gets_the_events_columns(tmp_path: Path) -> None:
    """found (a gap left last session): `kubectl get events -A` against the simulator printed
    `NAMESPACE NAME AGE`, not what an operator reads an Event by (LAST SEEN, TYPE, REASON,
    OBJECT, MESSAGE): no server-side Table for events."""
    sim = KubernetesSimulator(node=NODE)
    event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "forewarn-1", "namespace": "default"},
        "eventTime": _stamp_micro(sim.now() - timedelta(minutes=3)),
        "reportingController": "forewarn.dev/agent",
        "reportingInstance": "forewarn-host",
        "action": "Drain",
        "reason": "Cordon",
        "type": "Warning",
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": NODE},
        "note": "forewarn: drain (cordon)",
    }
    with SimServer(sim) as server:
        posted = httpx.post(
            f"{server.url}/apis/events.k8s.io/v1/namespaces/default/events",
            json=event,
            trust_env=False,
        )
        assert posted.status_code == 201, posted.text
        got = _kubectl(tmp_path, server.url, "get", "events", "-A")
        assert got.returncode == 0, got.stderr
        header, row = got.stdout.splitlines()
        assert header.split() == [
            "NAMESPACE",
            "LAST",
            "SEEN",
            "TYPE",
            "REASON",
            "OBJECT",
            "MESSAGE",
        ]
        # kubectl prints whole minutes and the seconds past them below ten minutes: `3m1s`
        # when it started more than a second after the Event was posted (a loaded machine).
        cells = row.split()
        assert re.fullmatch(r"3m(?:[0-9]s)?", cells[1]), row
        assert [cells[0], *cells[2:]] == [
            "default",
            "Warning",
            "Cordon",
            f"node/{NODE}",
            "forewarn:",
            "drain",
            "(cordon)",
        ]
        wide = _kubectl(tmp_path, server.url, "get", "events", "-n", "default", "-o", "wide")
        assert wide.returncode == 0, wide.stderr
        _, row = wide.stdout.splitlines()
        assert "forewarn.dev/agent, forewarn-host" in row and row.split()[-1] == "forewarn-1", row
