"""The watcher fault matrix (issue 15 item 6): every cloud watcher, inside the real agent (a
subprocess), reads its simulator through a fault source (`faultproxy.FaultProxy`). For each
fault the source misbehaves, then heals, and at the moment it heals a new notice is raised:
the agent must publish it within two of the watcher's retry periods (Azure: a failing poll's
deadline, its longest retry wait and the next poll's deadline; GCP: within its 30 s
preemption window), count the fault as a poll error, and grow by less than 20 MB (RSS and
its high-water mark: a 50 MB answer read whole would show).

Each provider runs the quick faults one after the other on one agent, and the 25 s outage on
an agent of its own, so the suite runs them in parallel (xdist) in about a minute.
The watchers run with short deadlines and retry periods here (they are settings); what the
matrix shows is that every fault is bounded by them.

DigitalOcean's notice is a mail: the proxy stands between the watcher and a real Dovecot
(IMAPS), so the HTTP-shaped faults reach it as garbage where a TLS handshake or an IMAP
greeting should be, and `big-body` as 50 MB of it. Its `bad-dates` is a mail, not an answer:
a reclaim mail whose Date and stated time do not parse, delivered while the mailbox works;
it must stop nothing. Each new notice is a new reclaim mail, delivered as the proxy heals.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from pathlib import Path
from typing import Any

import httpx
import pytest
from faultproxy import FAULTS, FaultProxy
from forewarn.protocol.timefmt import format_time, parse_time, utcnow
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.azure.simulate import AzureSimulator
from forewarn.providers.azure.watch import BACKOFF_JITTER, BACKOFF_STRETCH
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.kubernetes.simulate import KubernetesSimulator
from forewarn.providers.simulator import SimServer, Simulator
from forewarn.testing.dovecot import Dovecot, DovecotNotInstalled, MailUser
from support import DEAD_LOOPBACK, AgentProcess, Subscriber, agent_env

pytest.importorskip("prometheus_client")

QUICK_FAULTS = [fault for fault in FAULTS if fault != "outage"]
OUTAGE_SECONDS = 25.0
RSS_GROWTH_LIMIT = 20 * 1024 * 1024
GCP_WINDOW = 30.0
# How long an agent may take to answer its first status: a guard against a hang, not what the
# matrix measures. On two cores under the whole suite it is the CPU's share that sets it: the
# DigitalOcean agent spends ~1.5 CPU-s before it answers (its mail parser's patterns compile
# as it loads), 5.6-6.7 s of wall time at a load average of 10, and 20 s was too short in a
# full run ("agent not ready within 20s").
READY_TIMEOUT = 60.0
VM = "fault-vm"
NODE = "fault-node"

Matcher = Callable[[dict[str, Any]], bool]


@dataclass
class Adapter:
    """How the matrix drives one provider: its simulator, the agent's settings, a fresh
    notice, the bound on detecting it, and its answer shape with dates that do not parse."""

    name: str
    make_sim: Callable[[], Simulator]
    settings: dict[str, str]
    # Seconds within which a notice raised as the endpoint heals must be published.
    bound: float
    # The watcher's own overall request deadline: hang and slow-body faults last longer.
    deadline: float
    raise_notice: Callable[[Simulator, int], Matcher]
    settle: Callable[[Simulator, Subscriber, dict[str, Any]], None] = lambda sim, sub, n: None
    bad_dates: Callable[[str], bytes | None] = lambda path: None
    files: dict[str, str] = field(default_factory=dict)
    # Faults that are a normal answer for this contract, not a poll error.
    normal: frozenset[str] = frozenset()


def _next(sub: Subscriber, match: Matcher, timeout: float) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no matching notice within {timeout}s")
        notice = sub.notice(timeout=left)
        if match(notice):
            return notice


# AWS: a new scheduled event for each case (each has its own id).


def _aws_notice(sim: Simulator, case: int) -> Matcher:
    event_id = sim.raise_notice(
        "scheduled", {"code": "system-reboot", "not_before": "2030-01-02T03:04:05Z"}
    )
    return lambda n: n["id"] == f"aws/scheduled/{event_id}" and n["action"] == "drain"


def _aws_bad_dates(path: str) -> bytes | None:
    if "events/maintenance/scheduled" in path:
        event = {"EventId": "instance-event-bad", "Code": "system-reboot", "State": "active"}
        return json.dumps([{**event, "NotBefore": "someday", "NotAfter": "32 Foo 2019"}]).encode()
    if "events/recommendations/rebalance" in path:
        return b'{"noticeTime": "yesterday at noon"}'
    return None


# GCP: TERMINATE_ON_HOST_MAINTENANCE (a drain), withdrawn after each case.


def _gcp_notice(sim: Simulator, case: int) -> Matcher:
    sim.raise_notice("maintenance", {"type": "TERMINATE"})
    return lambda n: n["provider"] == "gcp" and n["action"] == "drain"


def _gcp_settle(sim: Simulator, sub: Subscriber, notice: dict[str, Any]) -> None:
    sim.withdraw("maintenance-event")
    _next(sub, lambda n: n["id"] == notice["id"] and n["action"] == "clear", 10)


def _gcp_bad_dates(path: str) -> bytes | None:
    if "upcoming-maintenance" in path:
        window = {"window_start_time": "next Tuesday", "maintenance_status": "PENDING"}
        return json.dumps({**window, "type": "SCHEDULED", "can_reschedule": True}).encode()
    return None


# Azure: a new Preempt event for each case.

AZURE_INTERVAL = 1.0
AZURE_TIMEOUT = 1.0
# As the source heals, a poll may be under way, failing (a 50 MB body, a hang): its deadline
# ends it. The watcher then waits its longest retry wait (the interval stretched, spread by
# its jitter) and the next poll answers within its deadline. Two intervals (2 s) was no
# bound: `big-body` was detected in 2.99 s in a full run.
AZURE_BOUND = 2 * AZURE_TIMEOUT + AZURE_INTERVAL * BACKOFF_STRETCH * (1 + BACKOFF_JITTER)


def _azure_notice(sim: Simulator, case: int) -> Matcher:
    event_id = sim.raise_notice("Preempt", {"resources": [VM], "not_before_seconds": 600})
    return lambda n: n["id"] == f"azure/{event_id}" and n["action"] == "terminate"


def _azure_bad_dates(path: str) -> bytes | None:
    if not path.startswith("/metadata/scheduledevents"):
        return None
    event = {"EventId": "bad-dates", "EventType": "Reboot", "EventStatus": "Scheduled"}
    event.update(Resources=[VM], NotBefore="Blursday, 32 Foo 20x6 25:61:00 GMT")
    return json.dumps({"DocumentIncarnation": 99999, "Events": [event]}).encode()


# Kubernetes: cordon (a drain), uncordoned after each case.


def _k8s_notice(sim: Simulator, case: int) -> Matcher:
    sim.raise_notice("cordon", {})
    return lambda n: n["id"] == f"kubernetes/{NODE}/cordon" and n["action"] == "drain"


def _k8s_settle(sim: Simulator, sub: Subscriber, notice: dict[str, Any]) -> None:
    sim.withdraw("cordon")
    _next(sub, lambda n: n["id"] == notice["id"] and n["action"] == "clear", 10)


def _k8s_bad_dates(path: str) -> bytes | None:
    if not path.startswith("/api/v1/nodes"):
        return None
    node = {
        "metadata": {"name": NODE, "resourceVersion": "1", "creationTimestamp": "whenever"},
        "spec": {"taints": [{"key": "x", "effect": "NoSchedule", "timeAdded": "not a time"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": 7}]},
    }
    listing = {"kind": "NodeList", "metadata": {"resourceVersion": "1"}, "items": [node]}
    return json.dumps(listing).encode()


ADAPTERS = {
    "aws": Adapter(
        "aws",
        ImdsSimulator,
        {
            "FOREWARN_AWS_SCHEDULED_INTERVAL": "0.5",
            "FOREWARN_AWS_ASG_INTERVAL": "0.5",
            "FOREWARN_AWS_TIMEOUT": "1",
        },
        bound=2 * 0.5,
        deadline=1.0,
        raise_notice=_aws_notice,
        bad_dates=_aws_bad_dates,
        # IMDS answers "no notice" with 404, HTML bodies included (as AEMM does).
        normal=frozenset({"html-404"}),
    ),
    "gcp": Adapter(
        "gcp",
        GcpSimulator,
        {
            "FOREWARN_GCP_TIMEOUT_SEC": "2",
            "FOREWARN_GCP_READ_TIMEOUT_MARGIN": "1",
            "FOREWARN_GCP_RETRY_DELAY": "0.5",
            "FOREWARN_GCP_UPCOMING_INTERVAL": "1",
        },
        bound=GCP_WINDOW,
        deadline=3.0,
        raise_notice=_gcp_notice,
        settle=_gcp_settle,
        bad_dates=_gcp_bad_dates,
    ),
    "azure": Adapter(
        "azure",
        lambda: AzureSimulator(vm_name=VM),
        {
            "FOREWARN_AZURE_INTERVAL": str(AZURE_INTERVAL),
            "FOREWARN_AZURE_REQUEST_TIMEOUT": str(AZURE_TIMEOUT),
            "FOREWARN_AZURE_APPROVE": "off",
        },
        bound=AZURE_BOUND,
        deadline=AZURE_TIMEOUT,
        raise_notice=_azure_notice,
        bad_dates=_azure_bad_dates,
        # An unparseable NotBefore is that event's own problem (logged once; the event goes
        # out without a deadline), never the poll's: one odd event must not hide the others.
        # The error this test used to count came from the proxy resetting the kept-alive
        # connection as the fault began, and was missing whenever no connection was open.
        normal=frozenset({"bad-dates"}),
    ),
    "kubernetes": Adapter(
        "kubernetes",
        lambda: KubernetesSimulator(node=NODE, token="t1", bookmark_interval=1),
        {
            "FOREWARN_KUBERNETES_WATCH_TIMEOUT": "2",
            "FOREWARN_KUBERNETES_RETRY_MAX": "1",
            "NODE_NAME": NODE,
        },
        bound=2 * 1.0,
        deadline=2 + 5.0,
        raise_notice=_k8s_notice,
        settle=_k8s_settle,
        bad_dates=_k8s_bad_dates,
        files={"FOREWARN_KUBERNETES_TOKEN_FILE": "t1"},
    ),
}


def _memory(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in bytes."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return tuple(int(fields[key].split()[0]) * 1024 for key in ("VmRSS", "VmHWM"))  # type: ignore[return-value]


class Rig:
    """A simulator, the fault proxy in front of it, and the agent reading it."""

    def __init__(self, adapter: Adapter, tmp_path: Path) -> None:
        self.adapter = adapter
        self.sim = adapter.make_sim()
        self.server = SimServer(self.sim).start()
        self.proxy = FaultProxy(("127.0.0.1", self.server.port), adapter.bad_dates)
        extra = dict(adapter.settings)
        for key, content in adapter.files.items():
            path = tmp_path / key.lower()
            path.write_text(content)
            extra[key] = str(path)
        extra[f"FOREWARN_{adapter.name.upper()}_URL"] = self.proxy.url
        env = agent_env(tmp_path, **extra)
        self.agent = AgentProcess(
            tmp_path,
            providers=(adapter.name,),
            args=("--metrics-address", "127.0.0.1:0", "--log-level", "debug"),
            env=env,
        ).start(timeout=READY_TIMEOUT)
        self.metrics = self.agent.metrics_url()
        self.sub = self.agent.subscriber()
        self.cases = 0

    def errors(self) -> float:
        text = httpx.get(f"{self.metrics}/metrics", trust_env=False, timeout=5).text
        labels = rf'\{{[^}}]*provider="{self.adapter.name}"[^}}]*\}}'
        pattern = rf"^forewarn_poll_errors_total{labels} (\S+)$"
        return sum(float(value) for value in re.findall(pattern, text, re.MULTILINE))

    def detect(self, timeout: float) -> tuple[float, dict[str, Any]]:
        """Raise a fresh notice now; the seconds until the agent publishes it."""
        self.cases += 1
        started = time.monotonic()
        match = self.adapter.raise_notice(self.sim, self.cases)
        notice = _next(self.sub, match, timeout)
        elapsed = time.monotonic() - started
        self.adapter.settle(self.sim, self.sub, notice)
        return elapsed, notice

    def start_fault(self, fault: str) -> None:
        self.proxy.set(fault)

    def close(self) -> None:
        self.sub.close()
        self.agent.stop()
        self.proxy.stop()
        self.server.stop()


# DigitalOcean: a reclaim mail in a real Dovecot, read through the proxy over IMAPS.

DROPLET_ID = "424242"
DO_PERIOD = 1.0  # retry_max and poll_interval: the watcher's retry period


def _reclaim_mail(deadline: str, date: str | None = None) -> bytes:
    message = EmailMessage()
    message["From"] = "DigitalOcean <no-reply@digitalocean.com>"
    message["Subject"] = "Your Spot Droplet will be reclaimed"
    message["Date"] = date or format_datetime(utcnow())
    message["Message-ID"] = make_msgid(domain="digitalocean.com")
    message.set_content(f"Droplet {DROPLET_ID} will be reclaimed at {deadline}.")
    return bytes(message)


DO_ADAPTER = Adapter(
    "digitalocean",
    make_sim=lambda: ImdsSimulator(),  # unused: the upstream is Dovecot
    settings={},
    # A retry period, then a new session: TLS handshake, LOGIN, SELECT and SEARCH in Dovecot.
    # Those took under 1 s alone but up to 1.6 s more under the whole suite on two cores
    # (2.03 s and 2.61 s against a bound of two periods, in two full runs).
    bound=3 * DO_PERIOD,
    deadline=2.0,  # imap_timeout
    raise_notice=lambda sim, case: lambda n: False,  # unused: see DoRig.detect
    # A mail with dates that do not parse is content the watcher judges, not a poll error.
    normal=frozenset({"bad-dates"}),
)


class DoRig:
    """Dovecot, the fault proxy in front of its IMAPS port, and the agent reading it."""

    def __init__(self, server: Dovecot, tmp_path: Path) -> None:
        self.adapter = DO_ADAPTER
        self.server = server
        self.user: MailUser = server.add_user()
        self.proxy = FaultProxy(("127.0.0.1", server.imaps_port))
        credentials = tmp_path / "imap.env"
        credentials.write_text(
            f"FOREWARN_IMAP_USER={self.user.name}\nFOREWARN_IMAP_PASSWORD={self.user.password}\n"
        )
        credentials.chmod(0o600)
        env = agent_env(
            tmp_path,
            FOREWARN_DIGITALOCEAN_URL=f"http://{DEAD_LOOPBACK}",
            FOREWARN_DIGITALOCEAN_DROPLET_ID=DROPLET_ID,
            FOREWARN_DIGITALOCEAN_IMAP_HOST="127.0.0.1",
            FOREWARN_DIGITALOCEAN_IMAP_PORT=str(self.proxy.port),
            FOREWARN_DIGITALOCEAN_IMAP_CA_FILE=str(server.cert),
            FOREWARN_DIGITALOCEAN_CREDENTIALS_FILE=str(credentials),
            FOREWARN_DIGITALOCEAN_RETRY_MAX=str(DO_PERIOD),
            FOREWARN_DIGITALOCEAN_POLL_INTERVAL=str(DO_PERIOD),
            FOREWARN_DIGITALOCEAN_IMAP_TIMEOUT=str(self.adapter.deadline),
        )
        self.agent = AgentProcess(
            tmp_path,
            providers=("digitalocean",),
            args=("--metrics-address", "127.0.0.1:0", "--log-level", "debug"),
            env=env,
        ).start(timeout=READY_TIMEOUT)
        self.metrics = self.agent.metrics_url()
        self.sub = self.agent.subscriber()
        self.cases = 0

    errors = Rig.errors

    def start_fault(self, fault: str) -> None:
        if fault != "bad-dates":
            self.proxy.set(fault)
            return
        mail = _reclaim_mail("32 Foo 20x6 25:61 UTC", date="Blursday, 32 Foo 20x6 25:61:00")
        self.server.append(self.user, mail)

    def detect(self, timeout: float) -> tuple[float, dict[str, Any]]:
        """Deliver a fresh reclaim mail now; the seconds until the agent publishes it."""
        self.cases += 1
        deadline = (utcnow() + timedelta(hours=1, minutes=self.cases)).replace(microsecond=0)
        # The TLS handshake and login are the test's own delivery, not the watcher's work:
        # the clock starts at the APPEND that makes the mail visible.
        conn = self.server.connect(self.user)
        try:
            started = time.monotonic()
            kind, data = conn.append("INBOX", None, None, _reclaim_mail(format_time(deadline)))
            assert kind == "OK", f"APPEND: {kind} {data!r}"
        finally:
            conn.logout()

        def match(notice: dict[str, Any]) -> bool:
            return (
                notice["provider"] == "digitalocean"
                and notice["action"] == "drain"
                and notice.get("deadline") is not None
                and parse_time(notice["deadline"]) == deadline
            )

        notice = _next(self.sub, match, timeout)
        return time.monotonic() - started, notice

    def close(self) -> None:
        self.sub.close()
        self.agent.stop()
        self.proxy.stop()


@pytest.fixture(scope="module")
def dovecot() -> Iterator[Dovecot]:
    try:
        server = Dovecot().start()
    except DovecotNotInstalled as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{error}: CI must run the DigitalOcean fault matrix")
        pytest.skip(str(error))
    yield server
    server.stop()


@pytest.fixture
def rig_for(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[[str], Any]]:
    """Each rig's agent serves its metrics on port 0, where the kernel puts it: a port probed
    free and handed to the agent could be taken by another xdist worker's server first."""
    rigs: list[Any] = []

    def make(name: str) -> Any:
        rig: Any
        if name == "digitalocean":
            rig = DoRig(request.getfixturevalue("dovecot"), tmp_path)
        else:
            rig = Rig(ADAPTERS[name], tmp_path)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        rig.close()


def _met(rig: Any, fault: str) -> int:
    """How often the watcher has met `fault`: its poll errors; for a fault that is a normal
    answer of its contract, the connections the proxy served it on (DigitalOcean's bad dates,
    a mail: the mails its watcher judged)."""
    if fault not in rig.adapter.normal:
        return int(rig.errors())
    if fault == "bad-dates" and isinstance(rig, DoRig):
        return rig.agent.output().count(" judged in ")
    return int(rig.proxy.met)


def _times(fault: str) -> int:
    """How often the watcher must meet a fault before it heals: a hang or a dribble once (only
    the watcher's own deadline frees it), a mail once (it is read once); the others twice, the
    second after a retry wait, so the watcher is in its backoff as the source heals."""
    return 1 if fault in ("hang", "slow-body", "bad-dates") else 2


# A guard against a hang, not a measure: a watcher meets each fault within a deadline and a
# retry wait or two.
MEET_TIMEOUT = 30.0


def _run_fault(rig: Any, fault: str, outage: float | None = None) -> dict[str, Any]:
    """Start `fault`, wait until the watcher has met it (or for the `outage`'s length), heal,
    and time the next notice. The fault lasted a fixed 2.5 s (its deadline and 1.5 s for a
    hang) before: most of the matrix's run was those waits."""
    before = _met(rig, fault)
    rig.start_fault(fault)
    if outage is not None:
        time.sleep(outage)  # the scenario: the endpoint is down this long
    end = time.monotonic() + MEET_TIMEOUT
    while _met(rig, fault) < before + _times(fault):
        if time.monotonic() > end:
            raise AssertionError(f"{rig.adapter.name} {fault}: not met within {MEET_TIMEOUT}s")
        time.sleep(0.1)
    rig.proxy.set(None)
    seconds, _ = rig.detect(timeout=max(35.0, rig.adapter.bound * 3))
    return {"fault": fault, "seconds": seconds}


def _report(name: str, rows: list[dict[str, Any]], bound: float) -> str:
    lines = [f"{name}: bound {bound:g}s"]
    for row in rows:
        lines.append(
            f"  {row['fault']:<10} detected {row['seconds']:6.2f}s  "
            f"rss +{row['rss'] / 2**20:5.1f} MiB  peak +{row['peak'] / 2**20:5.1f} MiB"
        )
    return "\n".join(lines)


def _check(name: str, rows: list[dict[str, Any]], bound: float) -> None:
    table = _report(name, rows, bound)
    print(table)
    for row in rows:
        assert row["seconds"] <= bound, table
        assert row["rss"] < RSS_GROWTH_LIMIT and row["peak"] < RSS_GROWTH_LIMIT, table


@pytest.mark.slow(35)
@pytest.mark.parametrize("name", [*sorted(ADAPTERS), "digitalocean"])
def test_every_fault_is_survived_and_the_next_notice_is_seen(
    name: str, rig_for: Callable[[str], Rig]
) -> None:
    rig = rig_for(name)
    rig.detect(timeout=20)  # the path works, and the agent's memory has settled
    assert rig.agent.proc is not None
    rss0, peak0 = _memory(rig.agent.proc.pid)
    rows = []
    for fault in QUICK_FAULTS:
        row = _run_fault(rig, fault)
        rss, peak = _memory(rig.agent.proc.pid)
        rows.append({**row, "rss": rss - rss0, "peak": peak - peak0})
    _check(name, rows, rig.adapter.bound)


@pytest.mark.slow(27)
@pytest.mark.parametrize("name", [*sorted(ADAPTERS), "digitalocean"])
def test_a_25_second_outage(name: str, rig_for: Callable[[str], Rig]) -> None:
    rig = rig_for(name)
    rig.detect(timeout=20)
    assert rig.agent.proc is not None
    rss0, peak0 = _memory(rig.agent.proc.pid)
    row = _run_fault(rig, "outage", outage=OUTAGE_SECONDS)
    rss, peak = _memory(rig.agent.proc.pid)
    _check(name, [{**row, "rss": rss - rss0, "peak": peak - peak0}], rig.adapter.bound)
