"""A notice past its deadline plus a grace: the agent asks its watcher (`forget`) whether the
provider still shows it. Reported again, it stays active, overdue, nothing sent
(tests/providers/test_overdue_notice.py); not reported, it is retired, and raised again if
its provider shows it later (issue 22 item 3). Real agent processes, real simulators, a
one-second grace.

Where it does not apply: DigitalOcean's reclaim is one mail, read once (nothing keeps
showing it); Kubernetes node notices have no deadline, so they never expire; an Azure event
retired while listed Started is under way until Azure removes it, and is retired once (an
Azure event retired while still Scheduled is raised again: tests/providers/azure).
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from contextlib import suppress
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients import CheckpointGuard
from forewarn.clients import guard as guard_module
from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.providers.aws.imds import SPOT_PATH
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.azure.simulate import AzureSimulator
from forewarn.providers.simulator import SimServer, Simulator
from support import AgentProcess, Subscriber, agent_env, eventually

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")


NOTICE_GRACE = 1
GRACE = ("--set", f"notice_grace={NOTICE_GRACE}", "--exit-margin", "1s")
VM = "reraise-vm"


def _next(sub: Subscriber, match: Callable[[dict[str, Any]], bool], timeout: float) -> Any:
    end = time.monotonic() + timeout
    seen = []
    while (left := end - time.monotonic()) > 0:
        try:
            notice = sub.notice(timeout=left)
        except TimeoutError:
            break
        seen.append((notice["action"], notice["id"]))
        if match(notice):
            return notice
    raise AssertionError(f"no matching notice within {timeout}s; saw {seen}")


def _wait_past(moment: datetime) -> None:
    """Until the wall clock (the agent's) is past `moment`."""
    while (left := (moment - utcnow()).total_seconds()) >= 0:
        time.sleep(left + 0.01)


def _agent(tmp_path: Path, provider: str, url: str, **settings: str) -> AgentProcess:
    env = agent_env(tmp_path, **{f"FOREWARN_{provider.upper()}_URL": url}, **settings)
    return AgentProcess(tmp_path, providers=(provider,), args=GRACE, env=env)


def _raised_retired_raised(sub: Subscriber, provider: str, action: str, timeout: float) -> None:
    first = _next(sub, lambda n: n["provider"] == provider and n["action"] == action, 15)
    cleared = _next(sub, lambda n: n["id"] == first["id"] and n["action"] == "clear", timeout)
    assert "grace" in cleared["detail"]["expired"]
    again = _next(sub, lambda n: n["id"] == first["id"] and n["action"] == action, timeout)
    assert again["seq"] > cleared["seq"] > first["seq"]
    assert again["deadline"] == cleared["deadline"]  # the deadline it had, not a new one


def _quiet(sub: Subscriber, seconds: float) -> list[tuple[str, str]]:
    """Every notice `sub` receives within the next `seconds`."""
    seen = []
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        try:
            notice = sub.notice(timeout=left)
        except TimeoutError:
            break
        seen.append((notice["action"], notice["id"]))
    return seen


def test_an_azure_started_event_still_listed_after_expiry_is_retired_once(
    tmp_path: Path, serve: Callable[[Simulator], SimServer]
) -> None:
    """A Started event is under way: Azure lists it until it is over (about ten minutes) and
    then removes it. Retired past its deadline plus the grace, it was raised again at every
    grace of that listing, a clear and the same terminate (deadline past) each round, each one
    stopping the job resumed since. It is retired once, and its removal sends nothing more."""
    sim = AzureSimulator(vm_name=VM, removal_after=3600)
    server = serve(sim)
    settings = {"FOREWARN_AZURE_APPROVE": "off", "FOREWARN_AZURE_INTERVAL": "0.25"}
    with (
        _agent(tmp_path, "azure", server.url, **settings) as agent,
        agent.subscriber() as sub,
    ):
        # Started at once (a hardware failure skips Scheduled); the VM kept running.
        event_id = sim.raise_notice("Reboot", {"resources": [VM], "status": "Started"})
        first = _next(sub, lambda n: n["provider"] == "azure", 15)
        assert (first["id"], first["action"]) == (f"azure/{event_id}", "terminate")
        cleared = _next(sub, lambda n: n["id"] == first["id"], 10)
        assert cleared["action"] == "clear" and "grace" in cleared["detail"]["expired"]
        # Several graces of polls that still list it.
        assert _quiet(sub, 4) == []
        assert agent.control({"op": "status"})["active"] == []
        assert "retired while listed Started; not raised again" in agent.output()
        sim.withdraw(event_id)  # over: already cleared, nothing more to send
        new_id = sim.raise_notice("Preempt", {"resources": [VM], "not_before_seconds": 30})
        assert _quiet(sub, 2) == [("terminate", f"azure/{new_id}")]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_an_azure_started_event_retired_is_not_raised_anew_by_a_restarted_agent(
    tmp_path: Path, serve: Callable[[Simulator], SimServer], sig: int
) -> None:
    """The agent retired a Started event Azure still lists, then stopped (SIGTERM, or SIGKILL
    with nothing written at exit); started again on the same state directory, it raised the
    event as new, its deadline the first poll's moment: a terminate to the job resumed since.
    The boot record keeps it retired while it stays listed Started."""
    sim = AzureSimulator(vm_name=VM, removal_after=3600)
    server = serve(sim)
    settings = {"FOREWARN_AZURE_APPROVE": "off", "FOREWARN_AZURE_INTERVAL": "0.25"}
    event_id = sim.raise_notice("Redeploy", {"resources": [VM], "status": "Started"})
    with (
        _agent(tmp_path, "azure", server.url, **settings) as agent,
        agent.subscriber() as sub,
    ):
        first = _next(sub, lambda n: n["provider"] == "azure", 15)
        _next(sub, lambda n: n["id"] == first["id"] and n["action"] == "clear", 10)
        agent.stop(sig)
    with (
        _agent(tmp_path, "azure", server.url, **settings) as agent,
        agent.subscriber() as sub,
    ):
        polls = sim.requests["GET /metadata/scheduledevents"]
        eventually(
            lambda: sim.requests["GET /metadata/scheduledevents"] >= polls + 8, 15, "8 polls"
        )
        assert _quiet(sub, 1) == [], agent.output()
        assert agent.control({"op": "status"})["active"] == []
        assert f"event {event_id} was retired while listed Started" in agent.output()


def test_an_azure_started_event_past_its_end_while_the_agent_was_down_is_retired_once(
    tmp_path: Path, serve: Callable[[Simulator], SimServer]
) -> None:
    """The agent stopped while a Started event's terminate was active and stayed down past its
    deadline plus the grace: the restarted agent retires it at start-up (a clear) and, Azure
    still listing it Started, does not raise it again (it did, with the deadline it had, and
    then at every grace), as an agent that never stopped does not."""
    sim = AzureSimulator(vm_name=VM, removal_after=3600)
    server = serve(sim)
    settings = {"FOREWARN_AZURE_APPROVE": "off", "FOREWARN_AZURE_INTERVAL": "0.25"}
    event_id = sim.raise_notice("Reboot", {"resources": [VM], "status": "Started"})
    with (
        _agent(tmp_path, "azure", server.url, **settings) as agent,
        agent.subscriber() as sub,
    ):
        first = _next(sub, lambda n: n["provider"] == "azure", 15)
        assert first["action"] == "terminate"
        agent.stop(signal.SIGTERM)
    # The scenario: the agent stays down until the wall clock is past the deadline plus the
    # grace (a fixed 1.5 s guessed it, 0.6 s to spare in a quiet run).
    _wait_past(parse_time(first["deadline"]) + timedelta(seconds=NOTICE_GRACE))
    with (
        _agent(tmp_path, "azure", server.url, **settings) as agent,
        agent.subscriber() as sub,
    ):
        polls = sim.requests["GET /metadata/scheduledevents"]
        eventually(
            lambda: sim.requests["GET /metadata/scheduledevents"] >= polls + 8, 15, "8 polls"
        )
        seen = _quiet(sub, 1)
        assert ("terminate", f"azure/{event_id}") not in seen, seen
        assert agent.control({"op": "status"})["active"] == []
        assert "retired while listed Started before the restart" in agent.output()


def test_a_job_that_trains_under_an_acted_on_overdue_terminate_is_not_stopped_by_it(
    tmp_path: Path,
    serve: Callable[[Simulator], SimServer],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An earlier job saved and exited for a spot interruption; the machine stayed, and IMDS
    kept showing it past its deadline. The next job rightly trains on (README: acted on, deadline
    past: it asks nothing). Each expiry re-raise used to come with a new `noticed_at` and without
    the earlier job's save, so that job was made to save and exit at every re-raise; now the
    notice stays, overdue, and nothing is sent again for the job to decide on."""
    sim = ImdsSimulator()
    server = serve(sim)
    fast = {"FOREWARN_AWS_SPOT_INTERVAL": "0.2", "FOREWARN_AWS_ASG_INTERVAL": "0"}
    with (
        _agent(tmp_path, "aws", server.url, **fast) as agent,
        agent.subscriber() as sub,
    ):
        sim.raise_notice("spot", {"time": 2})  # seen before its time, so raised again
        first = _next(sub, lambda n: n["action"] == "terminate", 15)
        ack = {"op": "ack", "notice_id": first["id"], "client": "job-1", "flush_seconds": 0.1}
        assert agent.control(ack)["ok"]  # the earlier job saved for it
        # The next job starts once the notice is overdue: past its deadline plus the grace.
        eventually(lambda: f"notice {first['id']} is overdue" in agent.output(), 15, "it overdue")
        # The job starts now, by the wall clock and by the boot clock the agent ages on.
        monkeypatch.setattr("forewarn.clients.guard.process_started", time.time)
        monkeypatch.setattr(
            "forewarn.clients.guard.process_started_boot", guard_module.steady_seconds
        )
        caplog.set_level(logging.WARNING, logger="forewarn.clients")
        guard = CheckpointGuard(
            events=agent.events,
            control=agent.control_endpoint,
            flag_file=None,
            handle_signals=False,
            exit_margin=0.1,
        )
        try:
            acted_on = "an earlier client acted on it"
            eventually(
                lambda: any(acted_on in r.getMessage() for r in caplog.records),
                15,
                "the job to find the terminate acted on",
            )
            # Three more graces: no clear and no new round for it (the job's subscription
            # replays it to every subscriber once, as it was), and the job trains on.
            seen = [n for n in _quiet(sub, 3 * NOTICE_GRACE + 1) if n[1] == first["id"]]
            assert seen in ([], [("terminate", first["id"])]), seen
            assert not guard.should_exit and not guard.due(1), caplog.text
            assert sum(acted_on in r.getMessage() for r in caplog.records) == 1, caplog.text
        finally:
            guard.close()


def test_an_aws_scheduled_event_inside_its_window_stays_one_terminate_until_not_after(
    tmp_path: Path, serve: Callable[[Simulator], SimServer]
) -> None:
    """A scheduled reboot may come at any moment from NotBefore to NotAfter (hours). It was
    retired at NotBefore plus the grace and raised again at the next poll, so for the whole
    window every grace (5 min by default) sent a clear and the same terminate again: a clear
    in the middle of the window, and a webhook and a log line per round. It now stays one
    terminate until NotAfter plus the grace."""
    sim = ImdsSimulator()
    server = serve(sim)
    now = time.time()
    sim.raise_notice(
        "scheduled", {"event_id": "instance-event-0a", "not_before": 2, "not_after": 3600}
    )
    sim.raise_notice(
        "scheduled", {"event_id": "instance-event-0b", "not_before": 2, "not_after": 5}
    )
    fast = {"FOREWARN_AWS_SCHEDULED_INTERVAL": "0.2", "FOREWARN_AWS_ASG_INTERVAL": "0"}
    with (
        _agent(tmp_path, "aws", server.url, **fast) as agent,
        agent.subscriber() as sub,
    ):
        long_id, short_id = "aws/scheduled/instance-event-0a", "aws/scheduled/instance-event-0b"
        _next(sub, lambda n: n["id"] == long_id and n["action"] == "terminate", 15)
        # The short window ends (NotAfter plus the 1 s grace): retired, and, listed unchanged
        # past its window, not raised again (f748d8b: it was, every grace).
        cleared = _next(sub, lambda n: n["id"] == short_id and n["action"] == "clear", 15)
        assert "end of its window" in cleared["detail"]["expired"]
        seen = []
        while True:
            try:
                seen.append(sub.notice(timeout=0.5))
            except TimeoutError:
                if time.time() - now > 2 + 1 + 2:  # well past the long one's NotBefore + grace
                    break
        assert [n for n in seen if n["id"] == long_id and n["action"] == "clear"] == []
        assert [n for n in seen if n["id"] == short_id] == []
        active = agent.control({"op": "status"})["active"]
        assert any(n["id"] == long_id and n["action"] == "terminate" for n in active), active


def test_an_aws_spot_interruption_already_past_when_first_seen_is_raised_once(
    tmp_path: Path, serve: Callable[[Simulator], SimServer]
) -> None:
    """The agent started after the interruption time (or the node's clock is ahead): IMDS
    shows a time ten minutes gone. It is one terminate with that past deadline, retired after
    the grace, and not raised again while IMDS shows it unchanged: it was raised again at every
    grace, a clear and a terminate each round, and every job started in between was stopped."""
    sim = ImdsSimulator()
    server = serve(sim)
    sim.raise_notice("spot", {"time": -600})
    fast = {"FOREWARN_AWS_SPOT_INTERVAL": "0.2", "FOREWARN_AWS_ASG_INTERVAL": "0"}
    with (
        _agent(tmp_path, "aws", server.url, **fast) as agent,
        agent.subscriber() as sub,
    ):
        first = _next(sub, lambda n: n["provider"] == "aws" and n["action"] == "terminate", 15)
        assert parse_time(first["deadline"]) < parse_time(first["noticed_at"])
        cleared = _next(sub, lambda n: n["id"] == first["id"] and n["action"] == "clear", 10)
        assert "grace" in cleared["detail"]["expired"]
        polls = sim.requests[f"GET {SPOT_PATH}"]
        # Several grace periods of polls that still show it.
        eventually(lambda: sim.requests[f"GET {SPOT_PATH}"] >= polls + 20, 15, "20 more polls")
        seen = []
        with suppress(AssertionError):
            seen.append(_next(sub, lambda n: True, 1.5))
        assert seen == []
        assert agent.control({"op": "status"})["active"] == []
        assert "already past when first seen; not raised again" in agent.output()
        # A real change is a new interruption, raised at once.
        sim.raise_notice("spot", {"time": 120})
        again = _next(sub, lambda n: n["action"] == "terminate", 10)
        assert again["id"] != first["id"] and parse_time(again["deadline"]) > parse_time(
            again["noticed_at"]
        )


def test_an_aws_spot_interruption_already_past_stays_retired_across_an_agent_restart(
    tmp_path: Path, serve: Callable[[Simulator], SimServer]
) -> None:
    """The stale interruption of the test above, retired once: a restarted agent had
    forgotten that and raised it again, a terminate that stopped every job started since."""
    sim = ImdsSimulator()
    server = serve(sim)
    sim.raise_notice("spot", {"time": -600})
    fast = {"FOREWARN_AWS_SPOT_INTERVAL": "0.2", "FOREWARN_AWS_ASG_INTERVAL": "0"}
    with (
        _agent(tmp_path, "aws", server.url, **fast) as agent,
        agent.subscriber() as sub,
    ):
        first = _next(sub, lambda n: n["provider"] == "aws" and n["action"] == "terminate", 15)
        _next(sub, lambda n: n["id"] == first["id"] and n["action"] == "clear", 10)
        eventually(lambda: "not raised again" in agent.output(), what="its retirement")
    with (
        _agent(tmp_path, "aws", server.url, **fast) as agent,
        agent.subscriber() as sub,
    ):
        polls = sim.requests[f"GET {SPOT_PATH}"]
        eventually(lambda: sim.requests[f"GET {SPOT_PATH}"] >= polls + 20, 15, "20 more polls")
        seen = []
        with suppress(AssertionError):
            seen.append(_next(sub, lambda n: True, 1.5))
        assert seen == [], agent.output()
        assert agent.control({"op": "status"})["active"] == []
        assert "retired before the agent restarted" in agent.output()
        # A real change is still a new interruption, raised at once.
        sim.raise_notice("spot", {"time": 120})
        again = _next(sub, lambda n: n["action"] == "terminate", 10)
        assert again["id"] != first["id"]


def test_an_aws_spot_interruption_seen_before_its_time_is_overdue_after_a_restart(
    tmp_path: Path, serve: Callable[[Simulator], SimServer]
) -> None:
    """Seen before its time, then the agent restarted after it: the restarted watcher saw it
    first with a past time and took it for a stale one, so it was retired and not raised
    again, unlike the same interruption without a restart. Now the restarted agent, asking
    its watcher at the end of the grace, hears it still shown: overdue, kept, nothing sent
    (taken for stale, the watcher would not report it, and it would be cleared)."""
    sim = ImdsSimulator()
    server = serve(sim)
    fast = {"FOREWARN_AWS_SPOT_INTERVAL": "0.2", "FOREWARN_AWS_ASG_INTERVAL": "0"}
    with (
        _agent(tmp_path, "aws", server.url, **fast) as agent,
        agent.subscriber() as sub,
    ):
        polls = sim.requests[f"GET {SPOT_PATH}"]
        eventually(lambda: sim.requests[f"GET {SPOT_PATH}"] > polls, what="the agent's polls")
        sim.raise_notice("spot", {"time": 4})  # seen in time even on a loaded machine
        first = _next(sub, lambda n: n["provider"] == "aws" and n["action"] == "terminate", 15)
        assert parse_time(first["deadline"]) > parse_time(first["noticed_at"])
    eventually(
        lambda: parse_time(first["deadline"]) < utcnow(),
        what="its time to pass while the agent is down",
    )
    with (
        _agent(tmp_path, "aws", server.url, **fast) as agent,
        agent.subscriber() as sub,
    ):
        overdue = f"notice {first['id']} is overdue"
        eventually(lambda: overdue in agent.output(), 15, "it overdue")
        # A restart slower than the grace retires the restored notice at start (one clear,
        # raised again at the watcher's first answer); past that, no clear and no new round.
        assert ("clear", first["id"]) not in _quiet(sub, 3 * NOTICE_GRACE + 1)
        assert [n["id"] for n in agent.control({"op": "status"})["active"]] == [first["id"]]
