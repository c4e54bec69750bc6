"""The simulator's server-side tables: the `Accept` header read as the API server reads it,
and kubectl's ages."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from forewarn.providers.kubernetes.tables import event_cells, human_duration, table_version
from hypothesis import given
from hypothesis import strategies as st

KUBECTL_ACCEPT = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,"
    "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)


def test_kubectls_accept_asks_for_a_v1_table_and_a_plain_client_for_none() -> None:
    assert table_version(KUBECTL_ACCEPT) == "v1"
    assert table_version("application/json;as=Table;v=v1beta1;g=meta.k8s.io") == "v1beta1"
    assert table_version("application/json") is None
    assert table_version(None) is None
    # Another group's Table, or one of a version the server has not, is no Table.
    assert table_version("application/json;as=Table;v=v1;g=example.com") is None
    assert table_version("application/json;as=Table;v=v2;g=meta.k8s.io") is None


@given(st.text(max_size=200))
def test_any_accept_header_gives_a_known_version_or_none(accept: str) -> None:
    assert table_version(accept) in ("v1", "v1beta1", None)


@given(st.text(alphabet=",; =", max_size=8), st.sampled_from(["v1", "v1beta1"]))
def test_a_table_range_among_others_is_found(noise: str, version: str) -> None:
    wanted = f"application/json;as=Table;v={version};g=meta.k8s.io"
    assert table_version(f"{noise},{wanted},{noise}") == version


def test_ages_are_printed_as_kubectl_prints_them() -> None:
    # apimachinery's duration.HumanDuration, at each of its boundaries.
    cases = {
        -5: "<invalid>",
        0: "0s",
        119: "119s",
        120: "2m",
        185: "3m5s",
        600: "10m",
        3 * 3600: "3h",
        3 * 3600 + 60 * 5: "3h5m",
        8 * 3600: "8h",
        48 * 3600: "2d",
        50 * 3600: "2d2h",
        8 * 86400: "8d",
        2 * 365 * 86400 + 3 * 86400: "2y3d",
        9 * 365 * 86400: "9y",
    }
    got = {seconds: human_duration(timedelta(seconds=seconds)) for seconds in cases}
    assert got == cases


def test_an_events_cells_read_its_times_as_the_api_servers_printer_does() -> None:
    now = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)
    core = {
        "metadata": {"name": "e"},
        "involvedObject": {"kind": "Node", "name": "n", "fieldPath": ""},
        "type": "Normal",
        "reason": "R",
        "message": " m \n",
        "source": {"component": "kubelet", "host": "n"},
        "firstTimestamp": "2026-12-07T11:00:00Z",
        "lastTimestamp": "2026-12-07T11:58:00Z",
        "count": 4,
    }
    assert event_cells(core, now) == [
        "2m",
        "Normal",
        "R",
        "node/n",
        "",
        "kubelet, n",
        "m",
        "60m",
        4,
        "e",
    ]
    # events.k8s.io/v1's: no first or last timestamp, its eventTime; a series' last time.
    new = {**core, "firstTimestamp": None, "lastTimestamp": None, "count": 0, "source": {}}
    new |= {"eventTime": "2026-12-07T11:57:00.000000Z", "reportingComponent": "forewarn"}
    assert event_cells(new, now)[:1] + event_cells(new, now)[5:] == [
        "3m",
        "forewarn",
        "m",
        "3m",
        1,
        "e",
    ]
    series = {**new, "series": {"count": 7, "lastObservedTime": "2026-12-07T11:59:30.000000Z"}}
    assert event_cells(series, now)[0] == "30s" and event_cells(series, now)[8] == 7
    assert event_cells({**new, "eventTime": None}, now)[0] == "<unknown>"
