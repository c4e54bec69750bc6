"""One fault vocabulary, one control API, for every simulator: each kind over real HTTP
against all five, the control API's 400s, and the parsers under hypothesis."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.azure.simulate import AzureSimulator
from forewarn.providers.digitalocean.simulate import DropletMetadataSimulator
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.kubernetes.simulate import KubernetesSimulator
from forewarn.providers.sim_faults import FAULT_KINDS, FaultError, make_fault, parse_fault_flag
from forewarn.providers.simulator import SimServer, Simulator
from forewarn.testing import eventually
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples


@dataclass(frozen=True)
class Probe:
    """A request the provider's endpoint answers with 200 when nothing is wrong."""

    build: Callable[[], Simulator]
    path: str
    params: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


PROBES = {
    "aws": Probe(lambda: ImdsSimulator(imdsv1=True), "/latest/meta-data/instance-id"),
    "gcp": Probe(
        GcpSimulator, "/computeMetadata/v1/instance/id", headers={"Metadata-Flavor": "Google"}
    ),
    "azure": Probe(
        lambda: AzureSimulator(rate_limit=10_000),
        "/metadata/scheduledevents",
        {"api-version": "2020-07-01"},
        {"Metadata": "true"},
    ),
    "digitalocean": Probe(DropletMetadataSimulator, "/metadata/v1/id"),
    "kubernetes": Probe(KubernetesSimulator, "/api/v1/nodes/forewarn-sim-node"),
}


class Served:
    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.sim = probe.build()
        self.server = SimServer(self.sim).start()
        self.http = httpx.Client(base_url=self.server.url, trust_env=False, timeout=10)

    def get(self, timeout: float = 10) -> httpx.Response:
        return self.http.get(
            self.probe.path, params=self.probe.params, headers=self.probe.headers, timeout=timeout
        )

    def fault(self, **fields: Any) -> str:
        answer = self.http.post("/_sim/faults", json=fields)
        assert answer.status_code == 201, answer.text
        return str(answer.json()["id"])

    def close(self) -> None:
        self.http.close()
        self.server.stop()


@pytest.fixture(params=sorted(PROBES))
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    served = Served(PROBES[request.param])
    try:
        yield served
    finally:
        served.close()


# The simulators that raise notices: DigitalOcean's announces reclaims by mail, not here.
NOTICING = sorted(name for name, probe in PROBES.items() if probe.build().notice_kinds)


def test_the_probe_is_a_200_without_faults(served: Served) -> None:
    assert served.get().status_code == 200


def test_status_answers_with_the_provider_page_for_count_requests(served: Served) -> None:
    normal = served.get()
    served.fault(kind="status", status=503, count=2)
    failed = [served.get() for _ in range(2)]
    assert [answer.status_code for answer in failed] == [503, 503]
    assert failed[0].text  # the provider's own error page, not an empty body
    assert served.get().text == normal.text  # used up
    served.fault(kind="status", status=404, body="<html>gone</html>", content_type="text/html")
    custom = served.get()
    assert (custom.status_code, custom.text) == (404, "<html>gone</html>")
    assert custom.headers["content-type"] == "text/html"


def test_a_fault_lasts_its_duration(served: Served) -> None:
    asked = time.monotonic()
    served.fault(kind="status", status=500, duration=1.0)
    assert served.get().status_code == 500
    # Waited for, not slept past: a loaded machine's answers come late (the simulator is a
    # thread of this process), and the fault ends no sooner than its duration.
    eventually(lambda: served.get().status_code == 200, 10, "the fault's end", interval=0.05)
    assert time.monotonic() - asked >= 1.0


def test_hang_holds_the_request_until_withdrawn(served: Served) -> None:
    fault_id = served.fault(kind="hang")
    with pytest.raises(httpx.ReadTimeout):
        served.get(timeout=0.3)
    assert served.http.delete(f"/_sim/faults/{fault_id}").status_code == 200
    assert served.get().status_code == 200
    served.fault(kind="hang", seconds=0.4, count=1)
    started = time.monotonic()
    assert served.get().status_code == 200  # held, then answered
    assert time.monotonic() - started >= 0.35


def test_a_used_up_hang_still_lets_its_held_request_go_when_faults_end(served: Served) -> None:
    """A hang for one request (`count: 1`), held until withdrawn: once any other request had
    come in, the used-up fault was dropped from the list, so neither `DELETE /_sim/faults`
    nor its own id (404) could end it, and the held request stayed held for an hour (a test
    that healed its endpoint waited out its own timeout instead)."""
    fault_id = served.fault(kind="hang", count=1)
    held: list[int] = []
    thread = threading.Thread(target=lambda: held.append(served.get(timeout=30).status_code))
    thread.start()
    eventually(lambda: served.sim.faults() == [], timeout=5, what="the request held")
    assert served.get().status_code == 200  # the next one is not held
    assert fault_id not in {f["id"] for f in served.http.get("/_sim/faults").json()["faults"]}
    started = time.monotonic()
    assert served.http.delete("/_sim/faults").status_code == 200
    thread.join(timeout=5)
    assert held == [200] and time.monotonic() - started < 2
    # By its id too.
    fault_id = served.fault(kind="hang", count=1)
    thread = threading.Thread(target=lambda: held.append(served.get(timeout=30).status_code))
    thread.start()
    eventually(lambda: served.sim.faults() == [], timeout=5, what="the request held")
    assert served.get().status_code == 200
    assert served.http.delete(f"/_sim/faults/{fault_id}").status_code == 200
    thread.join(timeout=5)
    assert held == [200, 200]


def test_slow_sends_the_normal_body_at_the_rate(served: Served) -> None:
    normal = served.get().content
    rate = len(normal) / 0.6  # the whole body in about 0.6 s
    served.fault(kind="slow", rate=rate, count=1)
    started = time.monotonic()
    slow = served.get()
    assert slow.content == normal
    assert time.monotonic() - started >= 0.4


def test_slow_defaults_to_a_byte_a_second_until_withdrawn(served: Served) -> None:
    normal = served.get().content
    fault_id = served.fault(kind="slow")
    probe = served.probe
    received = b""
    with served.http.stream(
        "GET", probe.path, params=probe.params, headers=probe.headers
    ) as answer:
        chunks = answer.iter_raw(1)
        started = time.monotonic()
        while time.monotonic() - started < 1.2:
            received += next(chunks)
        assert 1 <= len(received) <= 3  # one byte a second
        # Withdrawing the fault sends the rest at once.
        assert served.http.delete(f"/_sim/faults/{fault_id}").status_code == 200
        received += b"".join(chunks)
    assert received == normal


def test_reset_resets_the_connection(served: Served) -> None:
    served.fault(kind="reset", count=1)
    with pytest.raises(httpx.TransportError):
        served.get()
    assert served.get().status_code == 200


def test_malformed_is_a_200_that_does_not_parse(served: Served) -> None:
    normal = served.get()
    served.fault(kind="malformed", count=1)
    bad = served.get()
    assert bad.status_code == 200 and b"\x00" in bad.content and bad.content != normal.content
    assert bad.headers["content-type"] == normal.headers["content-type"]


def test_oversize_sends_size_bytes(served: Served) -> None:
    served.fault(kind="oversize", size=3_000_000, count=1)
    big = served.get()
    assert big.status_code == 200 and len(big.content) == 3_000_000


def test_throttle_answers_429_above_the_rate(served: Served) -> None:
    served.fault(kind="throttle", rate=1)
    codes = [served.get().status_code for _ in range(6)]
    # One a second gets through; on a loaded machine a second may pass between requests.
    assert codes[0] == 200 and 429 in codes, codes
    (fault,) = served.http.get("/_sim/faults").json()["faults"]
    assert fault["answered"] == codes.count(429)
    for answer in (served.get() for _ in range(3)):
        if answer.status_code == 429:
            assert answer.text  # the provider's own page


def test_retry_after_sets_the_header_of_status_and_throttle(served: Served) -> None:
    served.fault(kind="status", status=503, retry_after=7, count=1)
    answer = served.get()
    assert (answer.status_code, answer.headers["Retry-After"]) == (503, "7")
    assert answer.text  # still the provider's own page
    served.fault(kind="throttle", rate=0, retry_after=3, count=1)
    answer = served.get()
    assert (answer.status_code, answer.headers["Retry-After"]) == (429, "3")
    assert "Retry-After" not in served.get().headers


def test_faults_are_listed_in_state_and_cleared(served: Served) -> None:
    served.fault(kind="status", status=500, path="/nowhere")
    state = served.http.get("/_sim/state").json()
    assert [fault["kind"] for fault in state["faults"]] == ["status"]
    assert served.http.delete("/_sim/faults").json() == {"removed": 1}
    assert served.http.get("/_sim/faults").json() == {"faults": []}


def test_a_fault_with_after_starts_later(served: Served) -> None:
    asked = time.monotonic()
    answer = served.http.post("/_sim/faults", json={"kind": "status", "status": 502, "after": 1.0})
    assert answer.status_code == 202
    assert served.get().status_code == 200
    eventually(lambda: served.get().status_code == 502, 10, "the fault's start", interval=0.05)
    assert time.monotonic() - asked >= 1.0


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"kind": "earthquake"}, "kind"),
        ({}, "kind"),
        ({"kind": "status", "status": 99}, "status"),
        ({"kind": "status", "status": "500"}, "status"),
        ({"kind": "hang", "seconds": -1}, "seconds"),
        ({"kind": "slow", "rate": 0}, "rate"),
        ({"kind": "oversize", "size": 0}, "size"),
        ({"kind": "status", "count": 0}, "count"),
        ({"kind": "status", "path": "latest"}, "path"),
        ({"kind": "status", "colour": "red"}, "colour"),
        ({"kind": "status", "after": -3}, "after"),
        ({"kind": "status", "after": 1e300}, "after"),
        ({"kind": "status", "retry_after": 1.5}, "retry_after"),
        ({"kind": "throttle", "retry_after": -1}, "retry_after"),
    ],
)
def test_a_bad_fault_is_a_400_naming_what_was_wrong(
    served: Served, body: dict[str, Any], named: str
) -> None:
    answer = served.http.post("/_sim/faults", json=body)
    assert answer.status_code == 400
    assert named in answer.json()["error"]


@settings(max_examples=examples(100), deadline=None)
@given(after=st.floats() | st.integers(-(10**20), 10**20) | st.booleans() | st.text(max_size=4))
def test_after_is_a_bounded_number_of_seconds_or_a_sim_error(after: Any) -> None:
    """A scheduled notice's `after` reached threading.Timer unbounded: 1e300 (or Infinity in
    JSON) killed the timer's thread with OverflowError after the 202, and nothing was raised."""
    from forewarn.providers.simulator import MAX_AFTER, SimError, check_after

    try:
        seconds = check_after(after)
    except SimError as error:
        assert "after: expected a duration" in str(error)
        return
    assert 0 <= seconds <= MAX_AFTER


@pytest.mark.parametrize("served", NOTICING, indirect=True)
def test_a_notice_scheduled_too_far_ahead_is_a_400(served: Served) -> None:
    kind = served.sim.notice_kinds[0]
    for after in (1e300, 10**12, -1):
        answer = served.http.post("/_sim/notices", json={"kind": kind, "after": after})
        assert answer.status_code == 400 and "after" in answer.json()["error"], answer.text


def test_bad_control_bodies_are_400s(served: Served) -> None:
    for route in ("/_sim/faults", "/_sim/notices"):
        not_json = served.http.post(route, content=b"{oops")
        assert not_json.status_code == 400 and "JSON" in not_json.json()["error"]
        not_object = served.http.post(route, json=[1, 2])
        assert not_object.status_code == 400 and "object" in not_object.json()["error"]
    unknown = served.http.post("/_sim/notices", json={"kind": "volcano"})
    assert unknown.status_code == 400 and "volcano" in unknown.json()["error"]
    assert served.http.delete("/_sim/faults/fault-0").status_code == 404


def test_aws_hop_limit_never_answers_the_token_put() -> None:
    served = Served(Probe(ImdsSimulator, "/latest/api/token"))
    try:
        served.fault(kind="hop-limit")
        with pytest.raises(httpx.ReadTimeout):
            served.http.put(
                "/latest/api/token",
                headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"},
                timeout=0.5,
            )
        # Only the PUT: a GET (IMDSv1 refused here) still answers at once.
        assert served.http.get("/latest/meta-data/instance-id").status_code == 401
        (fault,) = served.http.get("/_sim/faults").json()["faults"]
        assert (fault["kind"], fault["as"], fault["method"]) == ("hop-limit", "hang", "PUT")
    finally:
        served.close()


def test_aws_throttle_defaults_to_the_documented_rate() -> None:
    fault = make_fault({"kind": "throttle"}, ImdsSimulator.fault_presets, 256.0)
    assert (fault.status, fault.rate) == (429, 256.0)


def test_oversize_defaults_to_50_mb() -> None:
    served = Served(PROBES["aws"])
    try:
        served.fault(kind="oversize", count=1)
        assert len(served.get(timeout=60).content) == 50 * 1024 * 1024
    finally:
        served.close()


# The parsers, under hypothesis: they answer or raise FaultError, nothing else.

_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=3),
)


@settings(max_examples=examples(300), deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                *("kind", "path", "method", "status", "body", "content_type", "seconds"),
                *("rate", "size", "count", "duration", "retry_after", "other"),
            ]
        ),
        _VALUES,
    ),
    st.sampled_from([*FAULT_KINDS, "hop-limit"]),
)
def test_make_fault_accepts_or_names_the_field(fields: dict[str, Any], kind: str) -> None:
    for candidate in (fields, {**fields, "kind": kind}):
        try:
            fault = make_fault(candidate, ImdsSimulator.fault_presets, 5.0)
        except FaultError as error:
            assert str(error)
        else:
            assert fault.kind in FAULT_KINDS and fault.path.startswith("/")
            assert fault.describe()["id"] == fault.id


@settings(max_examples=examples(300), deadline=None)
@given(st.text(max_size=60))
def test_parse_fault_flag_parses_or_says_why(text: str) -> None:
    try:
        fields = parse_fault_flag(text)
    except FaultError as error:
        assert str(error)
    else:
        assert isinstance(fields["kind"], str)


def test_notice_and_fault_kinds_are_taken_in_any_case(served: Served) -> None:
    # A notice kind was checked in any case, then passed on as given: only Azure's simulator
    # took `PREEMPT`; AWS answered 400 "unknown notice kind 'SPOT'" after the check passed.
    fault = served.http.post("/_sim/faults", json={"kind": "Status", "status": 503, "count": 1})
    assert fault.status_code == 201, fault.text
    assert served.get().status_code == 503
    if not served.sim.notice_kinds:
        return
    kind = served.sim.notice_kinds[0]
    for spelling in (kind.upper(), kind.lower()):
        answer = served.http.post("/_sim/notices", json={"kind": spelling})
        assert answer.status_code == 201, (spelling, answer.text)
        served.http.delete(f"/_sim/notices/{answer.json()['id']}")


def _raw(served: Served, request: bytes) -> tuple[int, bytes]:
    """Send `request` as written on the wire; the status and body of the answer."""
    port = int(served.server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data, f"no answer to {request[:60]!r}"
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@pytest.mark.parametrize(
    ("length", "status", "says"),
    [("abc", 400, "Content-Length"), ("-5", 400, "Content-Length"), ("99999999999", 413, "bytes")],
)
def test_a_bad_or_huge_content_length_is_a_4xx_not_a_dropped_connection(
    served: Served, length: str, status: int, says: str
) -> None:
    # A bad length escaped as ValueError, a huge one was read into memory: the client saw the
    # connection close with no answer at all.
    got, body = _raw(
        served, f"POST /_sim/notices HTTP/1.1\r\nContent-Length: {length}\r\n\r\n{{}}".encode()
    )
    assert got == status and says in json.loads(body)["error"], body


def test_a_chunked_control_body_is_read(served: Served) -> None:
    # Clients that stream a body (Go's, curl -T -) send it chunked: it was ignored (a 400
    # "needs kind") and its chunks were then parsed as the next request.
    payload = json.dumps({"kind": "status", "status": 503, "count": 1}).encode()
    half = len(payload) // 2
    chunks = b"%x\r\n%s\r\n%x;ext=1\r\n%s\r\n0\r\n\r\n" % (
        half,
        payload[:half],
        len(payload) - half,
        payload[half:],
    )
    got, body = _raw(
        served, b"POST /_sim/faults HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks
    )
    assert got == 201 and json.loads(body)["id"].startswith("fault-"), body
    assert served.get().status_code == 503


@pytest.mark.parametrize("size", ["0x%x", "+%x", "%x_", " %x", "0_%x"])
def test_a_chunk_size_other_than_hex_digits_is_refused_by_name(served: Served, size: str) -> None:
    # RFC 9112's chunk-size is HEXDIG alone; `int(line, 16)` also took `0x10`, `1_0`, a sign
    # and space, so the simulator read bodies no other server reads (found: H254's grep).
    payload = json.dumps({"kind": "status", "status": 503, "count": 1}).encode()
    chunks = (size % len(payload)).encode() + b"\r\n" + payload + b"\r\n0\r\n\r\n"
    got, body = _raw(
        served, b"POST /_sim/faults HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks
    )
    assert got == 400 and "chunk size" in json.loads(body)["error"], (got, body)


@pytest.mark.parametrize("length", ["\u00b2", "\u00b9\u00b2", "+2", "2_0"])
def test_a_content_length_other_than_digits_is_refused_by_name(served: Served, length: str) -> None:
    # A header is read as Latin-1: `str.isdigit` took its `²` and `¹²`, then `int` refused
    # them with a ValueError that no answer followed. RFC 9110's Content-Length is 1*DIGIT.
    got, body = _raw(
        served,
        f"POST /_sim/notices HTTP/1.1\r\nContent-Length: {length}\r\n\r\n{{}}".encode("latin-1"),
    )
    assert got == 400 and "Content-Length" in json.loads(body)["error"], (got, body)


def test_a_fault_ended_before_its_after_never_starts(served: Served) -> None:
    # The 202 of a fault with "after" gives its id, but DELETE of that id was a 404 and
    # DELETE /_sim/faults ended nothing: the fault started later anyway, in a test that had
    # cleaned up.
    def later(status: int) -> str:
        answer = served.http.post(
            "/_sim/faults", json={"kind": "status", "status": status, "after": 0.3}
        )
        assert answer.status_code == 202, answer.text
        return str(answer.json()["id"])

    ended = later(502)
    assert served.http.delete(f"/_sim/faults/{ended}").status_code == 200
    later(504)
    assert served.http.delete("/_sim/faults").json() == {"removed": 1}
    kept = later(503)  # fires after the two ended ones would have
    eventually(lambda: served.get().status_code == 503, timeout=10, what="the kept fault")
    faults = served.http.get("/_sim/faults").json()["faults"]
    assert [fault["id"] for fault in faults] == [kept]


def test_a_fault_given_after_is_listed_as_pending_until_it_starts(served: Served) -> None:
    # A fault given with "after" was in neither GET /_sim/faults nor /_sim/state until it
    # started: a test (or a person at curl) could not see what was coming, nor find the id
    # `DELETE /_sim/faults/<id>` ends it by when the 202 was not at hand.
    answer = served.http.post("/_sim/faults", json={"kind": "status", "status": 503, "after": 60})
    assert answer.status_code == 202, answer.text
    fault_id = answer.json()["id"]
    for listed in (
        served.http.get("/_sim/faults").json()["faults"],
        served.http.get("/_sim/state").json()["faults"],
    ):
        assert [(f["id"], f["kind"], f["status"], f["pending"]) for f in listed] == [
            (fault_id, "status", 503, True)
        ], listed
        assert 55 < listed[0]["starts_in"] <= 60, listed
        starts_at = parse_time(listed[0]["starts_at"])
        assert 55 < (starts_at - utcnow()).total_seconds() <= 61, listed
    assert served.get().status_code == 200  # pending: not in force yet
    assert served.http.delete(f"/_sim/faults/{fault_id}").status_code == 200
    assert served.http.get("/_sim/faults").json() == {"faults": []}
    # One in force is listed as not pending, with no start to come.
    live = served.fault(kind="status", status=500, path="/nowhere")
    listed = served.http.get("/_sim/faults").json()["faults"]
    assert [(f["id"], f["pending"]) for f in listed] == [(live, False)], listed
    assert "starts_at" not in listed[0] and "starts_in" not in listed[0]


def test_a_pending_fault_is_listed_as_in_force_once_it_starts() -> None:
    sim = Simulator()
    fault_id = sim.add_fault("status", after=0.05, status=502)
    try:
        assert [(f["id"], f["pending"]) for f in sim.faults()] == [(fault_id, True)]
        eventually(
            lambda: [(f["id"], f["pending"]) for f in sim.faults()] == [(fault_id, False)],
            timeout=5,
            what="the fault started",
        )
    finally:
        sim.cancel_scripts()


def test_a_stopped_server_lists_no_pending_fault_that_will_never_start() -> None:
    # Stopping the server cancels every timer: a fault still listed as pending would never
    # start, whatever its `starts_at` said.
    sim = Simulator()
    sim.add_fault("hang", after=30)
    assert [f["pending"] for f in sim.faults()] == [True]
    SimServer(sim).start().stop()
    assert sim.faults() == []


@pytest.mark.parametrize(
    ("name", "body", "named"),
    [
        ("aws", {"kind": "spot", "lead": 1e308}, "lead"),
        ("aws", {"kind": "spot", "lead": 1e12}, "lead"),
        ("aws", {"kind": "spot", "time": 1e300}, "time"),
        ("aws", {"kind": "rebalance", "lead": 1e300}, "lead"),
        ("aws", {"kind": "scheduled", "not_before": 1e20}, "not_before"),
        ("aws", {"kind": "scheduled", "not_before": "99999999999h"}, "not_before"),
        ("gcp", {"kind": "upcoming", "start_in": 1e308}, "start_in"),
        ("gcp", {"kind": "upcoming", "window": 1e308}, "window"),
        ("gcp", {"kind": "maintenance", "duration": 1e308}, "duration"),
    ],
)
def test_a_number_of_seconds_too_large_for_a_date_is_a_400(
    name: str, body: dict[str, Any], named: str
) -> None:
    # These reached timedelta or a timer unchecked: a 500 "simulator error: Python int too
    # large to convert to C int", or (GCP's maintenance duration) a 201 and a timer thread
    # that died with OverflowError.
    served = Served(PROBES[name])
    try:
        answer = served.http.post("/_sim/notices", json=body)
        assert answer.status_code == 400 and named in answer.json()["error"], answer.text
    finally:
        served.close()


def test_a_slow_body_speeds_up_when_the_fault_s_duration_ends(served: Served) -> None:
    # A `hang` lets its held requests go when `duration` ends; a `slow` body kept trickling
    # at its rate (a byte a second: hours for a page) long after the fault was over.
    normal = served.get().content
    served.fault(kind="slow", rate=1, duration=0.5)
    started = time.monotonic()
    assert served.get(timeout=10).content == normal
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("served", NOTICING, indirect=True)
def test_a_notice_given_after_is_listed_and_can_be_called_off(served: Served) -> None:
    # A notice given with "after" showed nowhere until it was raised, and `DELETE
    # /_sim/notices/<id>` could not call it off (404: "no notice"), then it was raised all the
    # same: a handler test that scheduled a spot interruption in a minute, then ended its
    # case, left it to fire into the next case run against the same simulator.
    kind = served.sim.notice_kinds[0]
    answer = served.http.post("/_sim/notices", json={"kind": kind, "after": 60})
    assert answer.status_code == 202, answer.text
    pending_id = answer.json()["id"]
    [listed] = served.http.get("/_sim/state").json()["pending_notices"]
    assert (listed["id"], listed["kind"]) == (pending_id, kind), listed
    assert 55 < listed["starts_in"] <= 60, listed
    assert 55 < (parse_time(listed["starts_at"]) - utcnow()).total_seconds() <= 61, listed
    gone = served.http.delete(f"/_sim/notices/{pending_id}")
    assert gone.status_code == 200, gone.text
    assert served.http.get("/_sim/state").json()["pending_notices"] == []

    # Called off, it is not raised when its time comes: a fault due later than it has
    # started, and the provider's state is as before.
    def notices() -> dict[str, Any]:
        state = served.http.get("/_sim/state").json()
        return {k: v for k, v in state.items() if k not in ("requests", "faults")}

    soon = served.http.post("/_sim/notices", json={"kind": kind, "after": 0.1}).json()["id"]
    assert served.http.delete(f"/_sim/notices/{soon}").status_code == 200
    before = notices()
    later = served.http.post("/_sim/faults", json={"kind": "status", "path": "/x", "after": 0.3})
    fault_id = later.json()["id"]
    eventually(
        lambda: [(f["id"], f["pending"]) for f in served.sim.faults()] == [(fault_id, False)],
        timeout=5,
        what="the later fault started",
    )
    assert notices() == before


@pytest.mark.parametrize("served", NOTICING, indirect=True)
def test_a_notice_given_after_and_raised_is_withdrawn_by_its_scheduled_id(
    served: Served,
) -> None:
    # A handler test's cleanup, `DELETE /_sim/notices/<the id its 202 gave>`, ran after the
    # notice had been raised: 404 "no notice 'scheduled-1'", and the interruption stayed to be
    # read by the next case run against the same simulator. The id the notice was raised
    # under is given nowhere else: the scheduled id withdraws it.
    kind = served.sim.notice_kinds[0]
    pending_id = served.http.post("/_sim/notices", json={"kind": kind, "after": 0}).json()["id"]
    eventually(
        lambda: served.http.get("/_sim/state").json()["pending_notices"] == [],
        timeout=5,
        what="the notice raised",
    )
    gone = served.http.delete(f"/_sim/notices/{pending_id}")
    assert gone.status_code == 200, gone.text
    raised_as = gone.json()["withdrawn"]
    assert raised_as != pending_id and gone.json()["scheduled"] == pending_id
    assert served.http.delete(f"/_sim/notices/{pending_id}").status_code == 404


@pytest.mark.parametrize("served", NOTICING, indirect=True)
def test_a_notice_being_raised_is_withdrawn_by_its_scheduled_id(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Check 37a (load 12): the notice left the pending list before it was raised and its
    # raised id recorded, and a DELETE by its scheduled id in between answered 404 "no notice
    # 'scheduled-1'". Here the raise takes 0.5 s, as a loaded machine's may.
    raise_notice = served.sim.raise_notice
    raising = threading.Event()

    def slowly(kind: str, fields: dict[str, Any]) -> str:
        raising.set()
        time.sleep(0.5)
        return raise_notice(kind, fields)

    monkeypatch.setattr(served.sim, "raise_notice", slowly)
    kind = served.sim.notice_kinds[0]
    pending_id = served.http.post("/_sim/notices", json={"kind": kind, "after": 0}).json()["id"]
    assert raising.wait(5)
    gone = served.http.delete(f"/_sim/notices/{pending_id}")
    assert gone.status_code == 200, gone.text
    assert gone.json()["scheduled"] == pending_id and gone.json()["withdrawn"] != pending_id


def test_a_faults_seconds_take_a_duration_as_text_as_its_after_does(served: Served) -> None:
    # `{"kind": "status", "after": "2m", "duration": "1m"}`: the "after" beside it was read as
    # two minutes, the "duration" was a 400 ("a number ..., got '1m'"), and so was a hang's
    # "seconds": "30s", though `--fault status,duration=1m` takes it, as every duration of
    # forewarn does.
    answer = served.http.post(
        "/_sim/faults",
        json={"kind": "hang", "path": "/x", "after": "2m", "duration": "1m", "seconds": "30s"},
    )
    assert answer.status_code == 202, answer.text
    [listed] = served.http.get("/_sim/faults").json()["faults"]
    assert (listed["duration"], listed["seconds"]) == (60.0, 30.0), listed
    bad = served.http.post("/_sim/faults", json={"kind": "status", "duration": "soon"})
    assert bad.status_code == 400 and "duration" in bad.json()["error"], bad.text


@given(
    st.sampled_from(["seconds", "duration"]),
    st.from_regex(r"\A\d{1,3}(\.\d{1,2})?(ms|s|m|h)\Z"),
)
def test_a_faults_seconds_as_text_are_those_of_the_duration_or_a_fault_error(
    key: str, text: str
) -> None:
    from forewarn.protocol.timefmt import parse_duration

    try:
        fault = make_fault({"kind": "hang", key: text}, {}, 5.0)
    except FaultError as error:
        assert key in str(error)  # out of the field's range, said so
    else:
        assert getattr(fault, key) == parse_duration(text)
