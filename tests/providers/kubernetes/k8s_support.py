"""Helpers of the Kubernetes provider tests: the simulator handle and a running watcher."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from forewarn.agent.protocol import Report
from forewarn.providers.kubernetes.simulate import KubernetesSimulator
from forewarn.providers.simulator import SimServer
from support import WatcherRun

NODE = "gpu-node-1"
TOKEN = "token-one"
KUBECTL = shutil.which("kubectl")


class Cluster:
    """The simulator, its server and the control API."""

    def __init__(self, sim: KubernetesSimulator, server: SimServer, token_file: Path) -> None:
        self.sim = sim
        self.server = server
        self.url = server.url
        self.token_file = token_file
        self.http = httpx.Client(base_url=server.url, trust_env=False, timeout=5)

    def raise_(self, kind: str, **fields: Any) -> str:
        response = self.http.post("/_sim/notices", json={"kind": kind, **fields})
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    def withdraw(self, notice_id: str) -> None:
        response = self.http.delete(f"/_sim/notices/{notice_id}")
        assert response.status_code == 200, response.text

    def state(self) -> dict[str, Any]:
        return dict(self.http.get("/_sim/state").json())


class Running(WatcherRun):
    """The shared watcher harness; a report is looked up by action and id."""

    async def report(self, action: str, report_id: str, timeout: float = 8.0) -> Report:
        def found() -> bool:
            return any(r.action == action and r.id == report_id for r in self.reports)

        await self.until(found, timeout, f"{action} {report_id}")
        return next(r for r in self.reports if r.action == action and r.id == report_id)

    async def drained_cleared_and_drained(self, report_id: str, what: str) -> None:
        """Until this watcher has reported drain, clear, drain of `report_id` and nothing
        else: a drain the relist after a watch gap found lifted and set again is cleared, then
        raised anew (a guard that saved for the first saves for the second)."""
        expected = [("drain", report_id), ("clear", report_id), ("drain", report_id)]
        await self.until(lambda: self.summary() == expected, what=what)


@contextmanager
def watch_gap(sim: KubernetesSimulator) -> Iterator[KubernetesSimulator]:
    """What the block does to `sim`'s node, no watch sees: done under the simulator's lock,
    then the watch is pushed out of the history (410), so the relist is the first the
    watcher learns of any of it."""
    with sim.lock:
        yield sim
        sim.raise_notice("compact", {"expire_watches": True})


def recordon(sim: KubernetesSimulator, later: int = 1) -> None:
    """Lift the cordon and cordon again as a real cluster shows it: the controller's taint
    is NoSchedule, with no `timeAdded` (the API server writes it only for NoExecute), and
    the one thing that differs is `time` of the managedFields entry that set
    `spec.unschedulable`, in whole seconds: `later` seconds later here (a second, as a
    re-cordon in any real gap is; the simulator would otherwise write the same second)."""
    with sim.lock:
        assert sim.node is not None
        (before,) = [
            entry["time"]
            for entry in sim.node["metadata"]["managedFields"]
            if "f:unschedulable" in entry["fieldsV1"].get("f:spec", {})
        ]
        sim.withdraw("cordon")
        sim.raise_notice("cordon", {})
        node = sim._edit()
        moved = datetime.strptime(before, "%Y-%m-%dT%H:%M:%SZ") + timedelta(seconds=later)
        for entry in node["metadata"]["managedFields"]:
            if "f:unschedulable" in entry["fieldsV1"].get("f:spec", {}):
                entry["time"] = moved.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert all("timeAdded" not in taint for taint in node["spec"]["taints"])
        sim._commit("MODIFIED", node)


def retaint(sim: KubernetesSimulator, key: str, manager: str = "karpenter") -> None:
    """Remove the taint `key` and set it again, same value and effect, by the same manager, as a
    real cluster shows it: a NoSchedule taint has no `timeAdded`, and the one thing that
    differs is `time` of the managedFields entry that owns `spec.taints` (an atomic list), in
    whole seconds: a second later here, as a re-taint in any real gap is."""
    with sim.lock:
        assert sim.node is not None
        (before,) = [
            entry["time"]
            for entry in sim.node["metadata"]["managedFields"]
            if "f:taints" in entry["fieldsV1"].get("f:spec", {})
        ]
        (taint,) = [t for t in sim.node["spec"]["taints"] if t["key"] == key]
        sim.withdraw(f"taint/{key}")
        fields = {"key": key, "effect": taint["effect"], "manager": manager}
        sim.raise_notice(
            "taint", {**fields, **({"value": taint["value"]} if "value" in taint else {})}
        )
        node = sim._edit()
        later = datetime.strptime(before, "%Y-%m-%dT%H:%M:%SZ") + timedelta(seconds=1)
        for entry in node["metadata"]["managedFields"]:
            if "f:taints" in entry["fieldsV1"].get("f:spec", {}):
                entry["time"] = later.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert [t for t in node["spec"]["taints"] if t["key"] == key] == [taint]
        sim._commit("MODIFIED", node)


def kubectl_command(tmp_path: Path, url: str, *args: str) -> list[str]:
    """The argv of a real `kubectl` against the simulator, its kubeconfig written under
    `tmp_path` (run it with `kubectl_env`)."""
    config = tmp_path / "kubeconfig"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "sim", "cluster": {"server": url}}],
                "users": [{"name": "op", "user": {"token": "secret"}}],
                "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "op"}}],
                "current-context": "sim",
            }
        )
    )
    return [str(KUBECTL), *args]


def kubectl_env(tmp_path: Path) -> dict[str, str]:
    """kubectl's environment: the kubeconfig `kubectl_command` wrote, no cache, no proxy
    (only 127.0.0.1 is asked)."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "KUBECONFIG": str(tmp_path / "kubeconfig"),
        "KUBECACHEDIR": str(tmp_path / "cache"),
        "NO_PROXY": "127.0.0.1",
    }


def kubectl(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A real `kubectl` against the simulator, run to its end."""
    return subprocess.run(
        kubectl_command(tmp_path, url, *args),
        env=kubectl_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
