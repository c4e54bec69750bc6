"""The IMDS simulator over real HTTP: IMDS's paths, status codes, headers and payloads."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from forewarn.providers.aws.imds import (
    ASG_PATH,
    HISTORY_PATH,
    IDENTITY_PATH,
    REBALANCE_PATH,
    SCHEDULED_PATH,
    SPOT_PATH,
    TERMINATION_TIME_PATH,
    TOKEN_HEADER,
    TOKEN_PATH,
    TTL_HEADER,
    parse_aws_date,
)
from forewarn.providers.aws.simulate import (
    COMMAND,
    SPOT_ACTIONS,
    ImdsSimulator,
    add_arguments,
    drill_script,
)
from forewarn.providers.simulator import SimServer
from hypothesis import given, settings
from hypothesis import strategies as st
from support import agent_env, eventually, forewarn_cmd


@pytest.fixture
def http(server: SimServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, trust_env=False, timeout=5) as client:
        yield client


def token(http: httpx.Client, ttl: int = 60) -> str:
    response = http.put(TOKEN_PATH, headers={TTL_HEADER: str(ttl)})
    assert response.status_code == 200
    return response.text


def get(http: httpx.Client, path: str) -> httpx.Response:
    return http.get(path, headers={TOKEN_HEADER: token(http)})


def test_a_token_is_text_with_its_ttl_header(http: httpx.Client) -> None:
    response = http.put(TOKEN_PATH, headers={TTL_HEADER: "21600"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain"
    assert response.headers[TTL_HEADER] == "21600" and len(response.text) > 20


@pytest.mark.parametrize("ttl", [None, "0", "21601", "-5", "ten"])
def test_a_missing_or_out_of_range_ttl_is_400(http: httpx.Client, ttl: str | None) -> None:
    headers = {TTL_HEADER: ttl} if ttl is not None else {}
    assert http.put(TOKEN_PATH, headers=headers).status_code == 400


def test_a_token_put_through_a_proxy_is_refused(http: httpx.Client) -> None:
    headers = {TTL_HEADER: "60", "X-Forwarded-For": "10.0.0.1"}
    assert http.put(TOKEN_PATH, headers=headers).status_code == 403


def test_only_latest_issues_tokens(http: httpx.Client) -> None:
    assert http.put("/2021-03-23/api/token", headers={TTL_HEADER: "60"}).status_code == 403
    assert http.get(TOKEN_PATH).status_code == 405


def test_tokens_are_enforced_by_default(http: httpx.Client) -> None:
    response = http.get(IDENTITY_PATH)
    assert response.status_code == 401
    assert http.get(IDENTITY_PATH, headers={TOKEN_HEADER: "made-up"}).status_code == 401
    assert get(http, IDENTITY_PATH).status_code == 200


def test_tokens_coexist(http: httpx.Client) -> None:
    """AWS: any number of tokens may be in use at once; a new one revokes none (the agent's
    renewal and a job's own SDK each hold theirs)."""
    tokens = [token(http) for _ in range(3)]
    assert len(set(tokens)) == 3
    for held in tokens:
        assert http.get(IDENTITY_PATH, headers={TOKEN_HEADER: held}).status_code == 200


def test_an_expired_token_is_401(http: httpx.Client) -> None:
    short = token(http, ttl=1)
    assert http.get(IDENTITY_PATH, headers={TOKEN_HEADER: short}).status_code == 200
    eventually(
        lambda: http.get(IDENTITY_PATH, headers={TOKEN_HEADER: short}).status_code == 401,
        timeout=5,
        what="the one-second token to expire",
    )


def test_imdsv1_mode_answers_without_a_token_but_still_checks_one_sent() -> None:
    with SimServer(ImdsSimulator(imdsv1=True)) as server:
        response = httpx.get(server.url + IDENTITY_PATH, trust_env=False)
        assert response.status_code == 200
        bad = httpx.get(server.url + IDENTITY_PATH, headers={TOKEN_HEADER: "x"}, trust_env=False)
        assert bad.status_code == 401


@pytest.mark.parametrize("path", [SPOT_PATH, REBALANCE_PATH, ASG_PATH, TERMINATION_TIME_PATH])
def test_no_notice_is_404_with_imds_html_page(http: httpx.Client, path: str) -> None:
    response = get(http, path)
    assert response.status_code == 404
    assert response.headers["content-type"] == "text/html" and "404 - Not Found" in response.text


def test_nothing_scheduled_is_an_empty_array(http: httpx.Client) -> None:
    response = get(http, SCHEDULED_PATH)
    assert response.status_code == 200 and json.loads(response.text) == []


def test_notices_are_text_plain_json(http: httpx.Client, sim: ImdsSimulator) -> None:
    sim.raise_notice("spot", {"action": "stop", "time": "2026-11-30T03:12:00Z"})
    sim.raise_notice("rebalance", {"noticeTime": "2026-11-30T03:10:00Z"})
    sim.raise_notice("asg", {})
    spot = get(http, SPOT_PATH)
    assert spot.headers["content-type"] == "text/plain"
    assert json.loads(spot.text) == {"action": "stop", "time": "2026-11-30T03:12:00Z"}
    assert get(http, TERMINATION_TIME_PATH).status_code == 404  # terminate only
    assert json.loads(get(http, REBALANCE_PATH).text) == {"noticeTime": "2026-11-30T03:10:00Z"}
    assert get(http, ASG_PATH).text == "Terminated"


def test_a_spot_notice_defaults_to_two_minutes_ahead(
    http: httpx.Client, sim: ImdsSimulator
) -> None:
    sim.raise_notice("spot", {})
    payload = json.loads(get(http, SPOT_PATH).text)
    lead = parse_aws_date(payload["time"]).timestamp() - time.time()
    assert payload["action"] == "terminate" and 115 < lead <= 121
    assert get(http, TERMINATION_TIME_PATH).text == payload["time"]


@pytest.mark.parametrize(("action", "lead"), [("terminate", 120), ("stop", 120), ("hibernate", 0)])
def test_a_spot_notice_s_time_is_rfc_3339_utc_two_minutes_ahead_but_for_hibernate(
    http: httpx.Client, sim: ImdsSimulator, action: str, lead: int
) -> None:
    """AWS: stop and terminate come ~2 min ahead, hibernation starts when announced; `time`
    is UTC in RFC 3339 with `Z` ("2017-09-18T08:22:00Z")."""
    sim.raise_notice("spot", {"action": action})
    payload = json.loads(get(http, SPOT_PATH).text)
    assert payload["action"] == action
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", payload["time"]), payload
    assert abs(parse_aws_date(payload["time"]).timestamp() - time.time() - lead) < 5


def test_drift_recomputes_the_time_per_request(http: httpx.Client, sim: ImdsSimulator) -> None:
    sim.raise_notice("spot", {"drift": True})
    first = json.loads(get(http, SPOT_PATH).text)["time"]
    eventually(
        lambda: json.loads(get(http, SPOT_PATH).text)["time"] != first,
        timeout=5,
        what="a later time",
    )


def test_scheduled_events_use_imds_dates_and_move_to_history(
    http: httpx.Client, sim: ImdsSimulator
) -> None:
    event_id = sim.raise_notice("scheduled", {"code": "instance-stop", "not_before": 3600})
    (event,) = json.loads(get(http, SCHEDULED_PATH).text)
    assert event["EventId"] == event_id and event["State"] == "active"
    assert event["Code"] == "instance-stop"
    assert abs(parse_aws_date(event["NotBefore"]).timestamp() - time.time() - 3600) < 5
    assert re.fullmatch(r"\d{1,2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT", event["NotBefore"])
    assert sim.withdraw(event_id)
    assert json.loads(get(http, SCHEDULED_PATH).text) == []
    (past,) = json.loads(get(http, HISTORY_PATH).text)
    assert past["State"] == "canceled" and past["Description"].startswith("[Canceled] ")


def test_the_control_api_raises_changes_and_withdraws(http: httpx.Client) -> None:
    raised = http.post("/_sim/notices", json={"kind": "scheduled", "code": "system-reboot"})
    assert raised.status_code == 201
    event_id = raised.json()["id"]
    changed = http.patch(f"/_sim/notices/{event_id}", json={"state": "completed"})
    assert changed.status_code == 200
    assert json.loads(get(http, SCHEDULED_PATH).text)[0]["State"] == "completed"
    assert http.post("/_sim/notices", json={"kind": "spot", "action": "nap"}).status_code == 400
    assert http.post("/_sim/notices", json={"kind": "volcano"}).status_code == 400
    assert http.post("/_sim/notices", json={"kind": "rebalance"}).json() == {"id": "rebalance"}
    assert http.delete("/_sim/notices/rebalance").status_code == 200
    assert http.delete("/_sim/notices/rebalance").status_code == 404
    state = http.get("/_sim/state").json()
    assert state["provider"] == "aws" and state["rebalance"] is None
    assert state["requests"]["PUT /latest/api/token"] == 1


def test_faults_answer_what_they_are_told_until_withdrawn(
    http: httpx.Client, sim: ImdsSimulator
) -> None:
    fault = sim.add_fault("status", path=SPOT_PATH, status=503, count=1)
    assert get(http, SPOT_PATH).status_code == 503
    assert get(http, SPOT_PATH).status_code == 404  # used up
    fault = sim.add_fault("status", path=SPOT_PATH, status=200, body="{oops")
    assert get(http, SPOT_PATH).text == "{oops"
    assert sim.remove_fault(fault)
    assert get(http, SPOT_PATH).status_code == 404


def test_revoked_tokens_are_401(http: httpx.Client, sim: ImdsSimulator) -> None:
    held = token(http)
    sim.raise_notice("revoke-tokens", {})
    assert http.get(IDENTITY_PATH, headers={TOKEN_HEADER: held}).status_code == 401


def test_scripted_notices_arrive_on_time() -> None:
    args = argparse.ArgumentParser()
    add_arguments(args)
    sim = COMMAND.start(
        args.parse_args(
            [
                *("--spot-after", "0.2", "--action", "hibernate"),
                *("--rebalance-after", "0.1", "--scheduled", "instance-stop@2h"),
            ]
        )
    )
    try:
        assert len(sim.scheduled) == 1 and sim.spot is None
        eventually(lambda: sim.spot is not None and sim.rebalance is not None, timeout=5)
        assert sim.spot is not None and sim.spot[0] == "hibernate" and sim.rebalance is not None
    finally:
        sim.cancel_scripts()


def test_drill_script_raises_a_drain_and_a_terminate(sim: ImdsSimulator) -> None:
    script = drill_script()
    drain_kind, drain_fields = script["drain"]
    terminate_kind, terminate_fields = script["terminate"]
    sim.raise_notice(drain_kind, dict(drain_fields))
    sim.raise_notice(terminate_kind, dict(terminate_fields))
    assert sim.rebalance is not None and sim.spot is not None and sim.spot[0] == "terminate"
    assert script["env"] == {}


def test_forewarn_simulate_aws_serves_until_signalled(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = agent_env(tmp_path)
    proc = subprocess.Popen(
        forewarn_cmd("simulate", "aws", "--port", "0", "--spot-after", "0s"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        # Once listening, stdout's first line is the URL alone.
        assert line.startswith("http://127.0.0.1:"), line
        url = line.strip()
        with httpx.Client(base_url=url, trust_env=False, timeout=5) as http:
            deadline = time.monotonic() + 5
            while get(http, SPOT_PATH).status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert json.loads(get(http, SPOT_PATH).text)["action"] == "terminate"
    finally:
        proc.terminate()
        assert proc.wait(5) == 0


def test_bad_scripted_flags_exit_2(tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = subprocess.run(
        forewarn_cmd("simulate", "aws", "--scheduled", "volcano@1h"),
        env=agent_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and "volcano" in result.stderr


@pytest.mark.parametrize(
    ("method", "fields", "named"),
    [
        ("POST", {"state": "cancelled"}, "state"),
        ("POST", {"state": "Active"}, "state"),
        ("POST", {"description": 5}, "description"),
        ("PATCH", {"state": "cancelled"}, "state"),
        ("PATCH", {"code": "system-rebot"}, "code"),
        ("PATCH", {"code": 5}, "code"),
        ("PATCH", {"description": ["x"]}, "description"),
    ],
)
def test_a_scheduled_event_state_or_code_imds_never_sends_is_a_400(
    http: httpx.Client, method: str, fields: dict[str, object], named: str
) -> None:
    # IMDS's State is active, completed or canceled, and Code one of five: `"cancelled"` (the
    # British spelling) or a misspelt code was served as given, so a handler's test ran
    # against an event AWS never lists. POST checked the code, PATCH nothing.
    event_id = http.post("/_sim/notices", json={"kind": "scheduled"}).json()["id"]
    if method == "POST":
        answer = http.post("/_sim/notices", json={"kind": "scheduled", **fields})
    else:
        answer = http.patch(f"/_sim/notices/{event_id}", json=fields)
    assert answer.status_code == 400 and named in answer.json()["error"], answer.text
    (event,) = json.loads(get(http, SCHEDULED_PATH).text)
    assert event["State"] == "active" and event["Code"] == "system-reboot"


@settings(max_examples=50, deadline=None)
@given(
    first=st.sampled_from(SPOT_ACTIONS),
    then=st.sampled_from(SPOT_ACTIONS),
    minutes=st.integers(min_value=1, max_value=600),
)
def test_a_spot_patch_keeps_what_it_does_not_name(first: str, then: str, minutes: int) -> None:
    # A PATCH of the action alone reset the notice's time to two minutes from the PATCH.
    sim = ImdsSimulator()
    at = (sim.now() + timedelta(minutes=minutes)).replace(microsecond=0)
    sim.raise_notice("spot", {"action": first, "time": at.isoformat()})
    sim.change_notice("spot", {"action": then})
    written = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert sim.state()["spot"] == {"action": then, "time": written}
    sim.change_notice("spot", {"lead": 30})
    spot = sim.state()["spot"]
    assert spot["action"] == then and spot["time"] != written
