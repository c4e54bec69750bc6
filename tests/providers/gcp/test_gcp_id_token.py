"""google-auth's ID-token credentials and universe-domain lookup against the GCP simulator,
in a fresh interpreter pointed at it through GCE_METADATA_HOST and GCE_METADATA_IP (both on
127.0.0.1, so nothing leaves loopback), and the one Server header."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.simulator import SimServer
from test_gcp_google_auth import _google_env

AUDIENCE = "https://forewarn.example/api"

SCRIPT = textwrap.dedent(
    f"""
    import json
    import google.auth.transport.requests as transport
    from google.auth import compute_engine, jwt
    from google.auth.compute_engine import _metadata

    request = transport.Request()
    credentials = compute_engine.IDTokenCredentials(
        request, target_audience={AUDIENCE!r}, use_metadata_identity_endpoint=True
    )
    credentials.refresh(request)
    print(json.dumps({{
        "token": credentials.token,
        "claims": jwt.decode(credentials.token, verify=False),
        "expiry": credentials.expiry.isoformat(),
        "valid": credentials.valid,
        "universe": _metadata.get_universe_domain(request),
        "credentials_universe": compute_engine.Credentials().universe_domain,
    }}))
    """
)


def test_google_auth_id_token_credentials_work_against_the_simulator(
    tmp_path: Path, server: SimServer, sim: GcpSimulator
) -> None:
    env = _google_env(tmp_path, server)
    assert env["GCE_METADATA_HOST"].startswith("127.0.0.1:")
    assert env["GCE_METADATA_IP"] == env["GCE_METADATA_HOST"]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    claims = out["claims"]
    assert claims["aud"] == AUDIENCE and claims["iss"] == "https://accounts.google.com"
    assert claims["email"].endswith("@developer.gserviceaccount.com")
    assert claims["exp"] - claims["iat"] == 3600
    assert claims["google"]["compute_engine"]["instance_name"] == "forewarn-sim-vm"
    assert out["valid"] is True
    assert out["universe"] == out["credentials_universe"] == "googleapis.com"
    assert sim.state()["id_tokens_issued"] == 1


def test_identity_needs_an_audience_and_is_never_long_polled(server: SimServer) -> None:
    base = server.url + "/computeMetadata/v1/instance/service-accounts/default/identity"
    flavor = {"Metadata-Flavor": "Google"}
    missing = httpx.get(base, headers=flavor)
    assert missing.status_code == 400 and "audience" in missing.text
    waited = httpx.get(base, params={"audience": "a", "wait_for_change": "true"}, headers=flavor)
    assert waited.status_code == 400
    token = httpx.get(base, params={"audience": "a"}, headers=flavor)
    assert token.status_code == 200 and token.text.count(".") == 2
    assert "google" not in json.loads(_b64decode(token.text.split(".")[1]))
    unknown = httpx.get(
        base.replace("default", "nobody@x"), params={"audience": "a"}, headers=flavor
    )
    assert unknown.status_code == 404


def _b64decode(part: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def test_universe_domain_and_exactly_one_server_header(server: SimServer) -> None:
    answer = httpx.get(
        server.url + "/computeMetadata/v1/universe/universe-domain",
        headers={"Metadata-Flavor": "Google"},
    )
    assert answer.text == "googleapis.com"
    assert answer.headers.get_list("server") == ["Metadata Server for VM"]
    refused = httpx.get(server.url + "/computeMetadata/v1/instance/id")  # no flavor header
    assert refused.status_code == 403
    assert refused.headers.get_list("server") == ["Metadata Server for VM"]
