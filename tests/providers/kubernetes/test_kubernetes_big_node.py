"""A Node of 10,000 taints (2 MiB of JSON) read by the watcher against the simulator: listed,
watched and relisted, with no notice dropped, and one over the list cap refused by name."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from forewarn.providers.kubernetes import api
from forewarn.providers.kubernetes.simulate import KubernetesSimulator
from k8s_support import NODE, TOKEN

CA = "ToBeDeletedByClusterAutoscaler"
KARPENTER = "karpenter.sh/disrupted"


def _many_taints(count: int, value_size: int) -> list[dict[str, str]]:
    """`count` taints no setting raises a notice for, each with a value of `value_size`."""
    return [
        {"key": f"example.com/t{index}", "value": "v" * value_size, "effect": "NoSchedule"}
        for index in range(count)
    ]


def _retaint(sim: KubernetesSimulator, taints: list[dict[str, str]]) -> None:
    with sim.lock:
        node = sim._edit()
        node["spec"]["taints"] = taints
        sim._commit("MODIFIED", node)


def _size(sim: KubernetesSimulator) -> int:
    with sim.lock:
        return len(json.dumps(sim.node).encode())


async def test_a_node_of_ten_thousand_taints_is_listed_watched_and_relisted(
    watch_sim: Any,
) -> None:
    """Cluster Autoscaler's taint among 10,000 others (2 MiB, half the 4 MiB cap): the list
    raises its drain, the watch its clear and Karpenter's drain, a relist after a 410 the
    cordon made in the gap; each within seconds, and no error on the way."""
    sim = KubernetesSimulator(node=NODE, token=TOKEN, max_watch_seconds=30)
    many = _many_taints(10_000, 150)
    _retaint(sim, [*many, {"key": CA, "value": "1765130000", "effect": "NoSchedule"}])
    assert 2 << 20 <= _size(sim) < api.MAX_LIST_BODY
    started = time.monotonic()
    running = await watch_sim(sim)
    await running.report("drain", f"kubernetes/{NODE}/taint/{CA}", timeout=30)
    await running.until(lambda: running.watcher.watches >= 1, what="the first watch")
    _retaint(sim, many)
    await running.report("clear", f"kubernetes/{NODE}/taint/{CA}", timeout=30)
    _retaint(sim, [*many, {"key": KARPENTER, "effect": "NoSchedule"}])
    await running.report("drain", f"kubernetes/{NODE}/taint/{KARPENTER}", timeout=30)
    with sim.lock:
        sim.raise_notice("cordon", {})
        sim.raise_notice("compact", {"expire_watches": True})
    await running.report("drain", f"kubernetes/{NODE}/cordon", timeout=30)
    assert running.health.errors == 0, running.health
    assert time.monotonic() - started < 60
    ids = [report.id for report in running.reports]
    assert len(ids) == 4 and len(set(ids)) == 3, ids


async def test_a_node_over_the_list_cap_is_one_clear_error(
    watch_sim: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """10,000 taints of 500-byte values (5 MiB): the list is refused by its size, said so
    (not a parse error of a cut body), and retried; once the node is back under the cap its
    drain comes."""
    sim = KubernetesSimulator(node=NODE, token=TOKEN, max_watch_seconds=30)
    _retaint(sim, [*_many_taints(10_000, 500), {"key": CA, "value": "1", "effect": "NoSchedule"}])
    assert _size(sim) > api.MAX_LIST_BODY
    running = await watch_sim(sim)
    await running.until(lambda: running.health.errors >= 2, what="the list refused, twice")
    # It read "transport: AnswerTooLarge: GET <url>: answer of 5670314 bytes, more than
    # 4194304": a size in bytes, not what was that large.
    said = [r.getMessage() for r in caplog.records if "AnswerTooLarge" in r.getMessage()]
    assert said, caplog.text
    assert "list: the node list is over the 4 MiB cap" in said[0], said
    assert "a Node object that large" in said[0], said
    assert not running.reports
    _retaint(sim, [{"key": CA, "value": "1", "effect": "NoSchedule"}])
    await running.report("drain", f"kubernetes/{NODE}/taint/{CA}", timeout=30)


async def test_a_watch_cut_in_the_middle_of_an_event_is_resumed_not_relisted(
    watch_sim: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The stream ends in the middle of an event (a proxy or load balancer closing a watch
    it timed out, after the first bytes of a 2 MiB Node): the part is no event, and the
    watch is resumed from the last version it held, which the server replays the whole event
    after. Found: the part was parsed as a line, "parse: watch line is not JSON
    (Unterminated string ...)", and the node listed again, as after garbage."""
    from forewarn.providers.simulator import SimResponse

    class CutOnce(KubernetesSimulator):
        cut_after: str | None = None

        def _watch(self, request: Any, matches: bool) -> Any:
            if self.cut_after is not None and request.param("resourceVersion") == self.cut_after:
                self.cut_after = None
                with self.lock:
                    self.counts["cut"] = 1
                    _, kind, node = self.history[-1]
                whole = json.dumps({"type": kind, "object": node}).encode()
                headers = {"Connection": "close"}
                body = iter([whole[: len(whole) // 2]])
                return SimResponse(
                    200, content_type="application/json", headers=headers, stream=body
                )
            return super()._watch(request, matches)

    sim = CutOnce(node=NODE, token=TOKEN, max_watch_seconds=30)
    _retaint(sim, _many_taints(10_000, 150))
    running = await watch_sim(sim)
    await running.until(lambda: running.watcher.watches >= 1, what="the first watch")
    lists = running.watcher.lists
    with sim.lock:
        sim.cut_after = str(sim.rv)
        sim.raise_notice("cordon", {})  # the event the next watch is cut in
        sim.raise_notice("timeout", {})
    await running.report("drain", f"kubernetes/{NODE}/cordon", timeout=30)
    assert sim.counts.get("cut") == 1
    assert running.watcher.lists == lists, "listed again after a cut stream"
    assert "parse" not in running.health.errors_by_kind, running.health
    said = [r.getMessage() for r in caplog.records if "middle of a line" in r.getMessage()]
    assert said, caplog.text
