"""The metadata simulator over real HTTP: the real server's checks, ETags and waits."""

from __future__ import annotations

import argparse
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.providers.gcp import simulate
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.simulator import SimServer
from hypothesis import given, settings
from hypothesis import strategies as st
from support import SimControl, forewarn_cmd

FLAVOR = {"Metadata-Flavor": "Google"}


@pytest.fixture
def client(server: SimServer) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=server.url + "/computeMetadata/v1", headers=FLAVOR, trust_env=False, timeout=10
    ) as http:
        yield http


def test_refuses_requests_without_the_flavor_header(server: SimServer) -> None:
    url = server.url + "/computeMetadata/v1/instance/name"
    response = httpx.get(url, trust_env=False)
    assert response.status_code == 403
    assert "Metadata-Flavor" in response.text
    assert httpx.get(url, headers={"Metadata-Flavor": "google-ish"}).status_code == 403


def test_refuses_forwarded_requests(server: SimServer) -> None:
    response = httpx.get(
        server.url + "/computeMetadata/v1/instance/name",
        headers={**FLAVOR, "X-Forwarded-For": "10.0.0.1"},
        trust_env=False,
    )
    assert response.status_code == 403


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("instance/name", "forewarn-sim-vm"),
        ("instance/zone", "projects/123456789012/zones/us-central1-a"),
        ("instance/scheduling/preemptible", "FALSE"),
        ("instance/scheduling/on-host-maintenance", "TERMINATE"),
        ("instance/preempted", "FALSE"),
        ("instance/maintenance-event", "NONE"),
        ("project/project-id", "forewarn-sim"),
    ],
)
def test_serves_the_keys(client: httpx.Client, path: str, value: str) -> None:
    response = client.get(path)
    assert response.status_code == 200
    assert response.text == value
    assert response.headers["Metadata-Flavor"] == "Google"
    assert response.headers["ETag"]


def test_every_answer_has_an_etag(client: httpx.Client) -> None:
    for path, status in [
        ("instance/name", 200),
        ("instance/nothing-here", 404),
        ("instance/?wait_for_change=true", 400),
        ("instance/scheduling", 301),
    ]:
        response = client.get(path)
        assert response.status_code == status, path
        assert response.headers.get("ETag"), path


def test_directory_listing_recursive_and_alt(client: httpx.Client) -> None:
    listing = client.get("instance/scheduling/").text.split()
    assert "preemptible" in listing and "on-host-maintenance" in listing
    assert "scheduling/" in client.get("instance/").text.split()
    tree = client.get("instance/", params={"recursive": "true"}).json()
    assert tree["maintenanceEvent"] == "NONE"
    assert tree["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert tree["serviceAccounts"]["default"]["scopes"]
    assert client.get("instance/name", params={"alt": "json"}).json() == "forewarn-sim-vm"
    text = client.get("instance/scheduling", params={"recursive": "true", "alt": "text"}).text
    assert "preemptible FALSE" in text.splitlines()


def test_wait_on_a_directory_needs_recursive(client: httpx.Client, sim: GcpSimulator) -> None:
    response = client.get("instance/", params={"wait_for_change": "true"})
    assert response.status_code == 400
    assert (
        client.get(
            "instance/service-accounts/default/token", params={"wait_for_change": "true"}
        ).status_code
        == 400
    )
    etag = client.get("instance/", params={"recursive": "true"}).headers["ETag"]
    threading.Timer(0.2, sim.raise_notice, ("maintenance", {"type": "MIGRATE"})).start()
    changed = client.get(
        "instance/", params={"recursive": "true", "wait_for_change": "true", "last_etag": etag}
    )
    assert changed.json()["maintenanceEvent"] == "MIGRATE_ON_HOST_MAINTENANCE"
    assert changed.headers["ETag"] != etag


def test_wait_with_a_stale_etag_answers_at_once(client: httpx.Client) -> None:
    started = time.monotonic()
    response = client.get(
        "instance/maintenance-event",
        params={"wait_for_change": "true", "last_etag": "0", "timeout_sec": "30"},
    )
    assert response.text == "NONE"
    assert time.monotonic() - started < 5


def test_wait_with_the_current_etag_blocks_until_timeout(client: httpx.Client) -> None:
    etag = client.get("instance/maintenance-event").headers["ETag"]
    started = time.monotonic()
    response = client.get(
        "instance/maintenance-event",
        params={"wait_for_change": "true", "last_etag": etag, "timeout_sec": "1"},
    )
    assert time.monotonic() - started >= 0.9
    assert (response.text, response.headers["ETag"]) == ("NONE", etag)


def test_wait_returns_on_change(client: httpx.Client, sim: GcpSimulator) -> None:
    etag = client.get("instance/preempted").headers["ETag"]
    threading.Timer(0.2, sim.raise_notice, ("preempt", {})).start()
    started = time.monotonic()
    response = client.get(
        "instance/preempted",
        params={"wait_for_change": "true", "last_etag": etag, "timeout_sec": "30"},
    )
    assert response.text == "TRUE"
    assert time.monotonic() - started < 5


def test_a_value_set_back_gets_a_new_etag(client: httpx.Client, sim: GcpSimulator) -> None:
    before = client.get("instance/maintenance-event").headers["ETag"]
    sim.raise_notice("maintenance", {"type": "TERMINATE"})
    sim.withdraw("maintenance-event")
    after = client.get("instance/maintenance-event")
    assert after.text == "NONE" and after.headers["ETag"] != before


def test_a_restart_forgets_the_etags_and_answers_a_waiting_long_poll_at_once(
    server: SimServer, client: httpx.Client, sim: GcpSimulator
) -> None:
    """`POST /_sim/restart`: each key's ETag goes back to its boot one for its value, the
    values stay; a long-poll waiting with an ETag from before answers at once."""
    boot = client.get("instance/maintenance-event").headers["ETag"]
    sim.raise_notice("maintenance", {"type": "MIGRATE"})
    sim.withdraw("maintenance-event")
    held = client.get("instance/maintenance-event").headers["ETag"]
    assert held != boot
    threading.Timer(0.2, httpx.post, (server.url + "/_sim/restart",)).start()
    started = time.monotonic()
    answer = client.get(
        "instance/maintenance-event",
        params={"wait_for_change": "true", "last_etag": held, "timeout_sec": "30"},
    )
    assert time.monotonic() - started < 5
    assert (answer.text, answer.headers["ETag"]) == ("NONE", boot)
    assert httpx.get(server.url + "/_sim/state").json()["restarts"] == 1


_ROUTES = ("/_sim/restart", "/_sim/restart/", "/_sim/restar", "/_sim/restart/x")


@settings(max_examples=40, deadline=None)
@given(
    method=st.sampled_from(["POST", "GET", "PUT", "PATCH", "DELETE"]),
    route=st.sampled_from(_ROUTES),
    body=st.binary(max_size=64),
)
def test_the_restart_route_takes_any_request_without_a_500(
    method: str, route: str, body: bytes
) -> None:
    """`POST /_sim/restart` ignores its body and restarts; anything else there is the
    control API's 404 (or its 405), never a 500, and restarts nothing. The values stay."""
    sim = GcpSimulator()
    sim.raise_notice("maintenance", {"type": "TERMINATE"})
    with SimServer(sim) as server:
        answer = httpx.request(method, server.url + route, content=body, trust_env=False)
    restarts = 1 if (method, route) == ("POST", "/_sim/restart") else 0
    if restarts:
        assert (answer.status_code, answer.json()) == (200, {"restarts": 1})
    else:
        assert 400 <= answer.status_code < 500 and "error" in answer.json(), answer.text
    assert sim.restarts == restarts
    assert sim.value("instance/maintenance-event") == "TERMINATE_ON_HOST_MAINTENANCE"


def test_bad_timeout_sec_is_refused(client: httpx.Client) -> None:
    params = {"wait_for_change": "true", "timeout_sec": "1.5"}
    assert client.get("instance/preempted", params=params).status_code == 400


def test_token_is_fake_json(client: httpx.Client, sim: GcpSimulator) -> None:
    token = client.get("instance/service-accounts/default/token").json()
    assert token["access_token"].startswith("ya29.forewarn-simulated")
    assert token["token_type"] == "Bearer" and token["expires_in"] > 0
    assert sim.state()["tokens_issued"] == 1


def test_root_answers_like_the_real_server(server: SimServer) -> None:
    response = httpx.get(server.url + "/", headers=FLAVOR, trust_env=False)
    assert response.status_code == 200 and response.headers["Metadata-Flavor"] == "Google"


def test_control_api_kinds(server: SimServer, client: httpx.Client) -> None:
    control = server.url + "/_sim/notices"
    assert httpx.post(control, json={"kind": "preempt"}).json() == {"id": "preempted"}
    assert client.get("instance/preempted").text == "TRUE"
    reply = httpx.post(control, json={"kind": "maintenance", "type": "MIGRATE"})
    assert reply.json() == {"id": "maintenance-event"}
    assert client.get("instance/maintenance-event").text == "MIGRATE_ON_HOST_MAINTENANCE"
    httpx.patch(control + "/maintenance-event", json={"type": "TERMINATE"}).raise_for_status()
    assert client.get("instance/maintenance-event").text == "TERMINATE_ON_HOST_MAINTENANCE"
    httpx.post(control, json={"kind": "upcoming", "start_in": 3600}).raise_for_status()
    window = client.get("instance/upcoming-maintenance", params={"alt": "json"}).json()
    assert window["maintenance_status"] == "PENDING" and window["window_start_time"]
    for notice in ("preempted", "maintenance-event", "upcoming-maintenance"):
        assert httpx.delete(f"{control}/{notice}").status_code == 200
    assert client.get("instance/preempted").text == "FALSE"
    assert client.get("instance/maintenance-event").text == "NONE"
    assert client.get("instance/upcoming-maintenance", params={"alt": "json"}).json() == {}
    assert httpx.delete(f"{control}/preempted").status_code == 404
    bad = httpx.post(control, json={"kind": "maintenance", "type": "REBOOT"})
    assert bad.status_code == 400 and "TERMINATE" in bad.json()["error"]
    assert httpx.post(control, json={"kind": "volcano"}).status_code == 400
    state = httpx.get(server.url + "/_sim/state").json()
    assert state["provider"] == "gcp" and state["maintenance-event"] == "NONE"


def test_maintenance_returns_to_none_after_its_duration(
    server: SimServer, client: httpx.Client
) -> None:
    httpx.post(
        server.url + "/_sim/notices",
        json={"kind": "maintenance", "type": "MIGRATE", "duration": 0.2},
    ).raise_for_status()
    assert client.get("instance/maintenance-event").text == "MIGRATE_ON_HOST_MAINTENANCE"
    deadline = time.monotonic() + 5
    while client.get("instance/maintenance-event").text != "NONE":
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _next_maintenance_value(client: httpx.Client, timeout_sec: int) -> str:
    """`instance/maintenance-event` once it changes, or as it is after `timeout_sec`."""
    etag = client.get("instance/maintenance-event").headers["ETag"]
    params = {"wait_for_change": "true", "last_etag": etag, "timeout_sec": str(timeout_sec)}
    return client.get("instance/maintenance-event", params=params).text


def test_a_new_maintenance_event_is_not_ended_by_the_last_ones_duration(
    server: SimServer, client: httpx.Client
) -> None:
    # The MIGRATE's return to NONE, due 0.2 s later, ended the TERMINATE raised after it.
    control = SimControl(server.url)
    control.raise_("maintenance", type="MIGRATE", duration=0.2)
    control.raise_("maintenance", type="TERMINATE")
    assert _next_maintenance_value(client, 2) == "TERMINATE_ON_HOST_MAINTENANCE"


def test_a_maintenance_event_returns_to_none_across_a_restart_of_the_server() -> None:
    """Stopping the server cancelled the event's scheduled return to NONE with its scripts:
    a test restarting the simulator mid-event never saw NONE again."""
    sim = GcpSimulator()
    with SimServer(sim) as server:
        SimControl(server.url).raise_("maintenance", type="MIGRATE", duration=0.3)
    with (
        SimServer(sim) as server,
        httpx.Client(
            base_url=server.url + "/computeMetadata/v1", headers=FLAVOR, trust_env=False
        ) as client,
    ):
        value = client.get("instance/maintenance-event").text
        if value != "NONE":  # not yet: the return to NONE is still to come
            assert value == "MIGRATE_ON_HOST_MAINTENANCE"
            assert _next_maintenance_value(client, 3) == "NONE"


def test_a_patch_changes_only_the_maintenance_fields_it_names(
    server: SimServer, client: httpx.Client
) -> None:
    # PATCH {"duration": S} turned a MIGRATE into a TERMINATE (the type's default).
    control = SimControl(server.url)
    control.raise_("maintenance", type="MIGRATE")
    control.change("maintenance-event", duration=0.2)
    assert client.get("instance/maintenance-event").text == "MIGRATE_ON_HOST_MAINTENANCE"
    assert _next_maintenance_value(client, 5) == "NONE"
    # And a new type keeps the end the event had.
    control.raise_("maintenance", type="MIGRATE", duration=0.2)
    control.change("maintenance-event", type="TERMINATE")
    assert client.get("instance/maintenance-event").text == "TERMINATE_ON_HOST_MAINTENANCE"
    assert _next_maintenance_value(client, 5) == "NONE"


def test_a_patch_changes_only_the_window_fields_it_names(
    server: SimServer, client: httpx.Client
) -> None:
    # PATCH {"maintenance_status": "ONGOING"} put the window at 7 days from now, PENDING
    # status and reasons back to their defaults: every field not named was rebuilt.
    control = SimControl(server.url)
    control.raise_("upcoming", start_in=3600, window=600, maintenance_reasons=["FAILURE_GPU"])
    before = client.get("instance/upcoming-maintenance", params={"alt": "json"}).json()
    control.change("upcoming-maintenance", maintenance_status="ONGOING")
    after = client.get("instance/upcoming-maintenance", params={"alt": "json"}).json()
    assert after == {**before, "maintenance_status": "ONGOING"}
    control.change("upcoming-maintenance", window=1200)
    moved = client.get("instance/upcoming-maintenance", params={"alt": "json"}).json()
    start = parse_time(moved["window_start_time"])
    assert moved["window_start_time"] == before["window_start_time"]
    assert parse_time(moved["window_end_time"]) - start == timedelta(seconds=1200)
    assert moved["maintenance_status"] == "ONGOING"
    control.change("upcoming-maintenance", start_in=60)
    soon = client.get("instance/upcoming-maintenance", params={"alt": "json"}).json()
    start = parse_time(soon["window_start_time"])
    assert abs((start - utcnow()).total_seconds() - 60) < 30
    assert parse_time(soon["window_end_time"]) - start == timedelta(seconds=1200)
    assert soon["maintenance_reasons"] == ["FAILURE_GPU"]
    bad = httpx.patch(server.url + "/_sim/notices/upcoming-maintenance", json={"strat_in": 5})
    assert bad.status_code == 400 and "strat_in" in bad.json()["error"]


def test_faults(server: SimServer, client: httpx.Client) -> None:
    control = server.url + "/_sim/faults"

    def fault(**fields: object) -> str:
        answer = httpx.post(control, json=fields)
        assert answer.status_code == 201, answer.text
        return str(answer.json()["id"])

    unavailable = fault(kind="status", status=503, duration=30)
    answer = client.get("instance/preempted")
    assert answer.status_code == 503 and answer.headers["Metadata-Flavor"] == "Google"
    httpx.delete(f"{control}/{unavailable}").raise_for_status()
    garbage = fault(kind="malformed", duration=30)
    answer = client.get("instance/preempted")
    assert answer.status_code == 200 and answer.text not in ("TRUE", "FALSE")
    httpx.delete(f"{control}/{garbage}").raise_for_status()
    fault(kind="hang", seconds=1, duration=30)
    with pytest.raises(httpx.ReadTimeout):
        client.get("instance/preempted", timeout=0.3)
    httpx.delete(control).raise_for_status()
    assert client.get("instance/preempted").text == "FALSE"


@pytest.mark.parametrize(
    ("form", "status", "body"),
    [("empty", 200, "{}"), ("404", 404, None), ("none", 200, "NONE"), ("503", 503, None)],
)
def test_upcoming_nothing_scheduled_forms(form: str, status: int, body: str | None) -> None:
    with SimServer(GcpSimulator(upcoming_none=form)) as server:
        response = httpx.get(
            server.url + "/computeMetadata/v1/instance/upcoming-maintenance?alt=json",
            headers=FLAVOR,
        )
    assert response.status_code == status
    if body is not None:
        assert response.text == body


def test_scripted_events_from_flags() -> None:
    parser = argparse.ArgumentParser()
    simulate.add_arguments(parser)
    args = parser.parse_args(
        [
            "--preempt-after",
            "0.1s",
            "--maintenance-after",
            "0.1",
            "--maintenance-kind",
            "MIGRATE",
            "--maintenance-duration",
            "0.3s",
            "--preemptible",
            "--preemption-notice-duration",
            "120s",
        ]
    )
    sim = simulate.COMMAND.start(args)
    try:
        assert sim.value("instance/scheduling/preemptible") == "TRUE"
        assert sim.value("instance/scheduling/preemption-notice-duration") == "120s"
        deadline = time.monotonic() + 5
        while sim.value("instance/maintenance-event") != "MIGRATE_ON_HOST_MAINTENANCE":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        while sim.value("instance/preempted") != "TRUE":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        while sim.value("instance/maintenance-event") != "NONE":
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        sim.cancel_scripts()


def test_bad_flags_are_refused() -> None:
    parser = argparse.ArgumentParser()
    simulate.add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--preempt-after", "soon"])
    with pytest.raises(ValueError, match="on_host_maintenance"):
        GcpSimulator(on_host_maintenance="REBOOT")


def test_a_spot_vm_that_live_migrates_is_refused(env: dict[str, str]) -> None:
    """Compute Engine has no such VM: a Spot or preemptible VM can only stop for host
    maintenance (onHostMaintenance TERMINATE, automaticRestart FALSE). Served, it had
    `instance/scheduling/` say MIGRATE beside preemptible TRUE, and the watcher gave its
    upcoming windows no deadline, as for a VM that keeps running through them."""
    with pytest.raises(ValueError, match="Spot"):
        GcpSimulator(preemptible=True, on_host_maintenance="MIGRATE")
    done = subprocess.run(
        forewarn_cmd("simulate", "gcp", "--preemptible", "--on-host-maintenance", "MIGRATE"),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("forewarn: simulate gcp: ") and "TERMINATE" in done.stderr
    assert done.stdout == ""


def test_forewarn_simulate_gcp_command(env: dict[str, str]) -> None:
    proc = subprocess.Popen(
        forewarn_cmd("simulate", "gcp", "--port", "0", "--preempt-after", "0.2"),
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
        deadline = time.monotonic() + 10
        while True:
            value = httpx.get(url + "/computeMetadata/v1/instance/preempted", headers=FLAVOR)
            if value.text == "TRUE":
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_the_machine_type_is_a_flag() -> None:
    # The 60 s TERMINATE_ON_HOST_MAINTENANCE of a VM without GPUs could only be rehearsed
    # from Python: `forewarn simulate gcp` always served a2-highgpu-1g.
    parser = argparse.ArgumentParser()
    simulate.add_arguments(parser)
    sim = simulate.COMMAND.start(parser.parse_args(["--machine-type", "N2-Standard-8"]))
    assert sim.value("instance/machine-type").endswith("/machineTypes/n2-standard-8")
    default = simulate.COMMAND.start(parser.parse_args([]))
    assert default.value("instance/machine-type").endswith("/machineTypes/a2-highgpu-1g")
    for bad in ("", "n2 standard", "projects/1/machineTypes/n2-standard-8"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--machine-type", bad])


def test_one_maintenance_reason_is_a_list_of_one() -> None:
    # `--notice upcoming,maintenance_reasons=FAILURE_GPU` published the reasons
    # ["F", "A", "I", "L", ...]: list() of the text.
    from forewarn.agent.cli import build_parser
    from forewarn.providers.simulator import SimError

    argv = ["simulate", "gcp", "--notice", "upcoming,maintenance_reasons=FAILURE_GPU"]
    sim = simulate.COMMAND.start(build_parser("simulate").parse_args(argv))
    assert sim.upcoming is not None and sim.upcoming["maintenance_reasons"] == ["FAILURE_GPU"]
    sim.raise_notice("upcoming", {"maintenance_reasons": ["PLANNED_UPDATE", "FAILURE_GPU"]})
    assert sim.upcoming["maintenance_reasons"] == ["PLANNED_UPDATE", "FAILURE_GPU"]
    sim.change_notice("upcoming-maintenance", {"maintenance_reasons": "PLANNED_NETWORK_UPDATE"})
    assert sim.upcoming["maintenance_reasons"] == ["PLANNED_NETWORK_UPDATE"]
    with pytest.raises(SimError, match="maintenance_reasons"):
        sim.raise_notice("upcoming", {"maintenance_reasons": [1, 2]})


def test_a_moved_window_keeps_its_latest_start(server: SimServer, client: httpx.Client) -> None:
    # `latest_window_start_time` is the latest the window may start, a reschedule included
    # (Compute Engine's UpcomingMaintenance: "The latest time for the planned maintenance
    # window to start"): a window moved by PATCH start_in kept none, its bound moved a week
    # past each new start. Moved past it, the bound is the new start (never before it).
    control = SimControl(server.url)
    control.raise_("upcoming", start_in=3600)
    before = client.get("instance/upcoming-maintenance", params={"alt": "json"}).json()
    control.change("upcoming-maintenance", start_in=7200)
    moved = client.get("instance/upcoming-maintenance", params={"alt": "json"}).json()
    assert moved["window_start_time"] != before["window_start_time"]
    assert moved["latest_window_start_time"] == before["latest_window_start_time"]
    control.change("upcoming-maintenance", start_in=30 * 86400)
    far = client.get("instance/upcoming-maintenance", params={"alt": "json"}).json()
    assert far["latest_window_start_time"] == far["window_start_time"]
