"""The AWS simulator as clients nobody here wrote see it: botocore's own IMDS fetchers,
directory listings, trailing slashes, the Server header, scheduled-event and identity fields."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from forewarn.providers.aws.imds import (
    IDENTITY_PATH,
    SCHEDULED_PATH,
    SPOT_PATH,
    TOKEN_HEADER,
    TOKEN_PATH,
    TTL_HEADER,
    parse_aws_date,
)
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.simulator import SimServer
from support import LazyModule

# Imported at first use, not while collecting (tests/test_collection_imports.py).
botocore_utils = LazyModule("botocore.utils")


@pytest.fixture
def http(server: SimServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, trust_env=False, timeout=5) as client:
        yield client


def get(http: httpx.Client, path: str) -> httpx.Response:
    token = http.put(TOKEN_PATH, headers={TTL_HEADER: "60"}).text
    return http.get(path, headers={TOKEN_HEADER: token})


def test_botocore_region_fetcher_reads_the_simulator(server: SimServer, sim: ImdsSimulator) -> None:
    # botocore asks for placement/availability-zone/ (with the slash) and cuts the last letter.
    fetcher = botocore_utils.InstanceMetadataRegionFetcher(
        timeout=2, num_attempts=1, base_url=server.url + "/", env={}
    )
    assert fetcher.retrieve_region() == "us-east-1"
    assert sim.requests["GET /latest/meta-data/placement/availability-zone/"] == 1
    assert sim.requests["PUT /latest/api/token"] >= 1  # IMDSv2, as botocore does it


def test_botocore_credential_fetcher_reads_role_credentials(
    server: SimServer, sim: ImdsSimulator
) -> None:
    fetcher = botocore_utils.InstanceMetadataFetcher(
        timeout=2, num_attempts=1, base_url=server.url + "/", env={}
    )
    credentials = fetcher.retrieve_iam_role_credentials()
    assert credentials["role_name"] == "forewarn-sim-role"
    assert credentials["access_key"].startswith("ASIA")
    assert credentials["secret_key"] and credentials["token"]
    assert credentials["expiry_time"].endswith("Z")
    assert sim.requests["GET /latest/meta-data/iam/security-credentials/"] == 1


def test_directories_list_their_children_as_imds_does(
    http: httpx.Client, sim: ImdsSimulator
) -> None:
    root = get(http, "/latest/meta-data/").text.splitlines()
    assert {"events/", "placement/", "instance-id", "iam/", "instance-life-cycle"} <= set(root)
    assert "spot/" not in root and "autoscaling/" not in root  # nothing there yet
    assert get(http, "/latest/meta-data/spot/").status_code == 404
    assert get(http, "/latest/meta-data/events/").text.splitlines() == ["maintenance/"]
    assert get(http, "/latest/meta-data/events/maintenance/").text.splitlines() == [
        "history",
        "scheduled",
    ]
    sim.raise_notice("spot", {})
    sim.raise_notice("rebalance", {})
    assert "spot/" in get(http, "/latest/meta-data/").text.splitlines()
    assert get(http, "/latest/meta-data/spot/").text.splitlines() == [
        "instance-action",
        "termination-time",
    ]
    assert get(http, "/latest/meta-data/events/").text.splitlines() == [
        "maintenance/",
        "recommendations/",
    ]
    assert get(http, "/latest/meta-data/events/recommendations/").text == "rebalance"
    assert get(http, "/latest/").text.splitlines() == ["dynamic", "meta-data"]


@pytest.mark.parametrize(
    "path",
    [SPOT_PATH, SCHEDULED_PATH, IDENTITY_PATH, "/latest/meta-data/placement/availability-zone"],
)
def test_a_trailing_slash_answers_like_the_path_without(
    http: httpx.Client, sim: ImdsSimulator, path: str
) -> None:
    sim.raise_notice("spot", {"time": "2026-12-01T09:00:00Z"})
    plain, slashed = get(http, path), get(http, path + "/")
    assert (
        (plain.status_code, plain.text) == (slashed.status_code, slashed.text) == (200, plain.text)
    )


def test_a_handler_polling_the_slash_form_sees_the_notice(
    http: httpx.Client, sim: ImdsSimulator
) -> None:
    assert get(http, SPOT_PATH + "/").status_code == 404
    sim.raise_notice("spot", {"action": "stop"})
    assert json.loads(get(http, SPOT_PATH + "/").text)["action"] == "stop"


def test_scheduled_events_carry_not_before_deadline(http: httpx.Client, sim: ImdsSimulator) -> None:
    sim.raise_notice("scheduled", {"code": "instance-stop", "not_before": 3600})
    (event,) = json.loads(get(http, SCHEDULED_PATH).text)
    assert set(event) == {
        "NotBefore",
        "NotAfter",
        "NotBeforeDeadline",
        "Code",
        "Description",
        "EventId",
        "State",
    }
    not_before = parse_aws_date(event["NotBefore"])
    assert parse_aws_date(event["NotBeforeDeadline"]) > not_before
    sim.change_notice(event["EventId"], {"not_before_deadline": "2030-01-01T00:00:00Z"})
    (event,) = json.loads(get(http, SCHEDULED_PATH).text)
    assert event["NotBeforeDeadline"] == "1 Jan 2030 00:00:00 GMT"


def test_the_identity_document_has_imds_fields(http: httpx.Client) -> None:
    document = json.loads(get(http, IDENTITY_PATH).text)
    assert set(document) == {
        "accountId",
        "architecture",
        "availabilityZone",
        "billingProducts",
        "devpayProductCodes",
        "marketplaceProductCodes",
        "imageId",
        "instanceId",
        "instanceType",
        "kernelId",
        "pendingTime",
        "privateIp",
        "ramdiskId",
        "region",
        "version",
    }
    assert document["billingProducts"] is None and document["version"] == "2017-09-30"


def _raw_headers(url: str, request: bytes) -> list[bytes]:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
        sock.sendall(request)
        data = b""
        deadline = time.monotonic() + 5
        while b"\r\n\r\n" not in data and time.monotonic() < deadline:
            data += sock.recv(4096)
    return data.split(b"\r\n\r\n")[0].split(b"\r\n")[1:]


def test_the_server_header_is_imds_own_without_a_trailing_space(server: SimServer) -> None:
    lines = _raw_headers(
        server.url,
        b"PUT /latest/api/token HTTP/1.1\r\nHost: x\r\n"
        b"X-aws-ec2-metadata-token-ttl-seconds: 60\r\nContent-Length: 0\r\n\r\n",
    )
    servers = [line for line in lines if line.lower().startswith(b"server:")]
    assert servers == [b"Server: EC2ws"]
