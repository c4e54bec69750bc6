"""docs/operations.md's metric table and alert rules against what a real agent exports."""

from __future__ import annotations

import os
import re
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from forewarn.agent.config import load_settings
from forewarn.agent.metrics import MetricsObserver
from forewarn.agent.observer import Deliveries, Observer
from forewarn.agent.protocol import AckRequest, Notice
from forewarn.providers import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from support import DEAD_LOOPBACK, AgentProcess, agent_env, eventually
from test_metrics import get, metrics_url

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def documented_metrics() -> dict[str, tuple[str, frozenset[str]]]:
    """name -> (type, labels) from the metric table."""
    text = DOC.read_text()
    table = text.split("| metric | type | labels | meaning |", 1)[1].split("\n\n", 1)[0]
    found: dict[str, tuple[str, frozenset[str]]] = {}
    for row in table.splitlines()[2:]:
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        name, kind, labels = cells[0].strip("`"), cells[1], cells[2]
        found[name] = (kind, frozenset(label.strip() for label in labels.split(",") if label))
    return found


def alert_rules() -> list[dict[str, Any]]:
    text = DOC.read_text()
    block = text.split("<!-- alert-rules -->", 1)[1].split("<!-- /alert-rules -->", 1)[0]
    body = block.strip().removeprefix("```yaml").removesuffix("```")
    rules: list[dict[str, Any]] = yaml.safe_load(body)["groups"][0]["rules"]
    return rules


def exercised_observer() -> MetricsObserver:
    """An observer whose every labelled metric has a sample."""
    observer = MetricsObserver()
    now = datetime.now(timezone.utc)
    observer.on_start(["local"])
    notice = Notice(
        id="local/manual/1",
        seq=1,
        action="terminate",
        reason="manual",
        provider="local",
        deadline=now + timedelta(minutes=5),
        noticed_at=now,
        sent_at=now,
        detail={"notice_time": now.isoformat()},
    )
    observer.on_notice(notice, escalated=True)
    observer.on_expired(notice)
    observer.on_unacked(notice, ["c"])
    observer.on_overdue(notice)
    observer.on_poll("local", True, None)
    observer.on_poll("local", False, "stat")
    ack = AckRequest(op="ack", notice_id=notice.id, client="c", step=1, flush_seconds=1.0)
    observer.on_ack(ack, notice)
    observer.on_ack(ack.model_copy(update={"outcome": "failed"}), notice)
    observer.on_approval("azure", "sent")
    observer.watch_notifiers([_Notifier()])
    observer.watch_conditions(lambda: {"kubernetes": {"nodeclaim-refused": "forbidden"}})
    return observer


class _Notifier(Observer):
    def deliveries(self) -> dict[str, Deliveries]:
        return {"webhook": Deliveries(delivered=1, failed=1, dropped=0, pending=2)}


def test_the_metric_table_lists_every_exported_metric_with_its_type_and_labels():
    documented = documented_metrics()
    exported: dict[str, tuple[str, frozenset[str]]] = {}
    for family in exercised_observer().registry.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = frozenset(key for sample in family.samples for key in sample.labels) - {"le"}
        exported[name] = (family.type, labels)
    assert documented == exported


def _series_names(names: dict[str, tuple[str, frozenset[str]]]) -> set[str]:
    series = set(names)
    for name, (kind, _) in names.items():
        if kind == "histogram":
            series |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return series


def test_every_metric_named_in_the_operations_page_is_exported():
    """The alert rules and the text around them name only series an agent exports."""
    series = _series_names(documented_metrics())
    section = DOC.read_text().split("## Metrics and health", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"\bforewarn_[a-z_]+[a-z]", section))
    assert named and named <= series, named - series


# The longest a healthy watcher with default settings goes between two successful polls when
# nothing happens.
def _quiet_gap(name: str, settings: Any) -> float:
    if name == "local":
        return float(settings.flag_interval)
    if name == "aws":
        return float(max(settings.spot_interval, settings.scheduled_interval))
    if name == "gcp":
        return float(settings.timeout_sec + settings.read_timeout_margin)
    if name == "azure":
        return float(settings.interval)
    if name == "kubernetes":
        return float(settings.watch_timeout)
    if name == "digitalocean":
        return float(max(settings.idle_renew, settings.poll_interval))
    raise AssertionError(f"no quiet gap known for {name}: add it here")


_TERM = re.compile(
    r"time\(\) - forewarn_last_successful_poll_timestamp_seconds"
    r"\{provider(=|!~|=~)\"([^\"]*)\"\} > (\d+)"
)


def _stale_thresholds() -> list[tuple[str, str, float]]:
    (rule,) = [rule for rule in alert_rules() if rule["alert"] == "ForewarnPollsStale"]
    terms = [term.strip() for term in rule["expr"].strip().split("\nor ")]
    parsed = [_TERM.fullmatch(term) for term in terms]
    assert all(parsed), terms
    return [(m.group(1), m.group(2), float(m.group(3))) for m in parsed if m]


def _threshold(provider: str) -> float:
    """The stale-poll threshold that applies to `provider` (exactly one term matches)."""
    matching = []
    for op, pattern, threshold in _stale_thresholds():
        hit = re.fullmatch(pattern, provider) is not None
        if (op == "!~") != hit and (op != "=" or provider == pattern):
            matching.append(threshold)
    assert len(matching) == 1, (provider, matching)
    return matching[0]


def test_the_stale_poll_alert_does_not_fire_for_a_quiet_healthy_watcher(
    monkeypatch: pytest.MonkeyPatch,
):
    """`time() - forewarn_last_successful_poll_timestamp_seconds > 60` fired for every
    healthy DigitalOcean watcher on IDLE (one success each 1500 s) and for a Kubernetes
    watcher on a quiet node (one each 300 s watch)."""
    for key in [key for key in os.environ if key.startswith("FOREWARN_")]:
        monkeypatch.delenv(key)
    settings = load_settings()
    for name in REGISTRY.names():
        gap = _quiet_gap(name, settings.provider_settings(name))
        assert _threshold(name) > gap, name


def _stale(found: dict[tuple[str, str], float], now: float) -> set[str]:
    """The providers `ForewarnPollsStale` fires for, evaluated as Prometheus would."""
    gauge = "forewarn_last_successful_poll_timestamp_seconds"
    return {
        provider
        for (name, provider), seen in found.items()
        if name == gauge and now - seen > _threshold(provider)
    }


def test_the_alert_rules_fire_against_a_real_agent(tmp_path: Path):
    env = agent_env(
        tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0", FOREWARN_AWS_URL=f"http://{DEAD_LOOPBACK}"
    )
    rules = {rule["alert"]: rule for rule in alert_rules()}
    assert rules["ForewarnDeadlineNear"]["expr"] == "forewarn_nearest_deadline_seconds < 120"
    assert rules["ForewarnNotReady"]["expr"] == "forewarn_ready == 0"
    with AgentProcess(tmp_path, providers=("local", "aws"), env=env) as agent:
        url = metrics_url(agent)
        deadline = datetime.now(timezone.utc) + timedelta(seconds=90)
        reply = agent.control(
            {"op": "notify", "action": "terminate", "deadline": deadline.isoformat()}
        )
        assert reply["ok"], reply

        def scraped() -> dict[tuple[str, str], float] | None:
            found: dict[tuple[str, str], float] = {}
            for family in text_string_to_metric_families(get(url + "/metrics")[1]):
                for sample in family.samples:
                    found[(sample.name, sample.labels.get("provider", ""))] = sample.value
            local = ("forewarn_last_successful_poll_timestamp_seconds", "local")
            return found if found.get(local) else None

        found = eventually(scraped, what="a good local poll")
    assert found[("forewarn_nearest_deadline_seconds", "")] < 120
    assert found[("forewarn_ready", "")] == 0
    assert _stale(found, time.time()) == {"aws"}


Scraped = list[tuple[str, dict[str, str], float]]
Vector = dict[frozenset[tuple[str, str]], float]

_SELECTOR = r"forewarn_[a-z_]+(?:\{[^}]*\})?"
_DIFFERENCE = re.compile(rf"({_SELECTOR}) - (?:(ignoring|on)\(([a-z_, ]*)\) )?({_SELECTOR})")


def _select(text: str, scraped: Scraped) -> Vector:
    name, _, matchers = text.partition("{")
    wanted = dict(re.findall(r'([a-z_]+)="([^"]*)"', matchers))
    return {
        frozenset(labels.items()): v
        for sample, labels, v in scraped
        if sample == name and wanted.items() <= labels.items()
    }


def evaluate_difference(expr: str, scraped: Scraped) -> Vector:
    """`a - [ignoring(...)|on(...)] b` with Prometheus' one-to-one vector matching: a sample
    pairs with the one of the other side whose labels are equal (all of them, all but those
    ignored, or only those listed in `on`); one without a partner gives no result."""
    match = _DIFFERENCE.fullmatch(expr.strip())
    assert match, f"not `a - b` of two selectors: {expr}"
    left, right = _select(match.group(1), scraped), _select(match.group(4), scraped)
    modifier = match.group(2)
    listed = {name.strip() for name in (match.group(3) or "").split(",")}

    def key(labels: frozenset[tuple[str, str]]) -> frozenset[tuple[str, str]]:
        if modifier == "on":
            return frozenset(item for item in labels if item[0] in listed)
        if modifier == "ignoring":
            return frozenset(item for item in labels if item[0] not in listed)
        return labels

    partners = {key(labels): v for labels, v in right.items()}
    assert len(partners) == len(right), "many-to-one: Prometheus refuses it"
    return {
        key(labels): v - partners[key(labels)]
        for labels, v in left.items()
        if key(labels) in partners
    }


def test_the_documented_provider_terminates_expression_counts_them(tmp_path: Path):
    """The table said provider terminates are forewarn_notices_total{action="terminate"}
    minus the escalations: as PromQL the two sides differ in `action`, match no series, and
    the difference is empty."""
    row = next(line for line in DOC.read_text().splitlines() if "escalations_total` |" in line)
    expr = re.search(r"provider terminates are `([^`]+)`", row)
    assert expr, row
    env = agent_env(tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0", FOREWARN_EXIT_MARGIN="2s")
    with AgentProcess(tmp_path, providers=("local",), env=env) as agent:
        url = metrics_url(agent)
        soon = datetime.now(timezone.utc) + timedelta(seconds=4)
        later = datetime.now(timezone.utc) + timedelta(seconds=60)
        # The drain is escalated 2 s before its deadline; the terminate is the provider's.
        agent.control({"op": "notify", "action": "drain", "deadline": soon.isoformat()})
        agent.control({"op": "notify", "action": "terminate", "deadline": later.isoformat()})

        def escalated() -> Scraped | None:
            scraped = [
                (sample.name, sample.labels, sample.value)
                for family in text_string_to_metric_families(get(url + "/metrics")[1])
                for sample in family.samples
            ]
            escalations = [v for name, _, v in scraped if name == "forewarn_escalations_total"]
            return scraped if sum(escalations) == 1 else None

        scraped = eventually(escalated, what="the escalation")
    result = evaluate_difference(expr.group(1), scraped)
    assert {dict(labels)["reason"]: v for labels, v in result.items()}["manual"] == 1, result
