"""Google's own metadata client against the simulator.

google-auth reads GCE_METADATA_HOST when its module is imported, and its detection pings
GCE_METADATA_IP, so each check runs in a fresh interpreter whose environment points both at
the simulator (and nothing can reach the real address).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.simulator import SimServer
from support import agent_env

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import google.auth
    import google.auth.transport.requests as transport
    from google.auth import compute_engine
    from google.auth.compute_engine import _metadata

    request = transport.Request()
    out = {
        "root": _metadata._get_metadata_root(False),
        "ping": _metadata.ping(request, timeout=2, retry_count=1),
        "on_gce": _metadata.is_on_gce(request),
        "name": _metadata.get(request, "instance/name"),
        "zone": _metadata.get(request, "instance/zone"),
        "preemptible": _metadata.get(request, "instance/scheduling/preemptible"),
        "project": _metadata.get_project_id(request),
        "account": _metadata.get_service_account_info(request),
        "instance": _metadata.get(request, "instance/", recursive=True),
        # A long-poll through google-auth: a timeout above timeout_sec.
        "maintenance": _metadata.get(
            request,
            "instance/maintenance-event",
            params={"wait_for_change": "true", "last_etag": "0", "timeout_sec": "1"},
            timeout=5,
        ),
    }
    token, expiry = _metadata.get_service_account_token(request)
    out["token"] = token
    credentials = compute_engine.Credentials()
    credentials.refresh(request)
    out["credentials_token"] = credentials.token
    out["credentials_email"] = credentials.service_account_email
    default, project = google.auth.default(
        scopes=["https://www.googleapis.com/auth/cloud-platform"]
    )
    out["default_type"] = type(default).__name__
    out["default_project"] = project
    print(json.dumps(out))
    """
)


def _google_env(tmp_path: Path, server: SimServer) -> dict[str, str]:
    host = server.url.removeprefix("http://")
    env = agent_env(tmp_path, GCE_METADATA_HOST=host, GCE_METADATA_IP=host)
    env.pop("NO_GCE_CHECK", None)
    # No user credentials or gcloud configuration may be found instead of the metadata server.
    for key in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT"):
        env.pop(key, None)
    home = tmp_path / "home"
    home.mkdir()
    env.update(HOME=str(home), CLOUDSDK_CONFIG=str(home / "gcloud"))
    return env


def _run(env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_google_auth_metadata_helpers_read_the_simulator(
    tmp_path: Path, server: SimServer, sim: GcpSimulator
) -> None:
    out = _run(_google_env(tmp_path, server))
    assert out["root"] == f"{server.url}/computeMetadata/v1/"
    assert out["ping"] is True and out["on_gce"] is True
    assert out["name"] == "forewarn-sim-vm"
    assert out["zone"] == "projects/123456789012/zones/us-central1-a"
    assert out["preemptible"] == "FALSE"
    assert out["project"] == "forewarn-sim"
    assert out["account"]["email"].endswith("@developer.gserviceaccount.com")
    assert out["account"]["aliases"] == ["default"]
    assert out["instance"]["maintenanceEvent"] == "NONE"
    assert out["maintenance"] == "NONE"
    assert out["token"].startswith("ya29.forewarn-simulated")
    assert out["credentials_token"].startswith("ya29.forewarn-simulated")
    assert out["credentials_email"] == out["account"]["email"]
    assert out["default_type"] == "Credentials" and out["default_project"] == "forewarn-sim"
    # The answers came from this simulator.
    assert sim.requests["GET /computeMetadata/v1/instance/name"] == 1
    assert sim.requests["GET /"] >= 1
    assert sim.state()["tokens_issued"] >= 2


def test_google_auth_reads_a_preemption(
    tmp_path: Path, server: SimServer, sim: GcpSimulator
) -> None:
    sim.raise_notice("preempt", {})
    sim.raise_notice("maintenance", {"type": "TERMINATE"})
    host = server.url.removeprefix("http://")
    script = textwrap.dedent(
        """
        import google.auth.transport.requests as transport
        from google.auth.compute_engine import _metadata
        request = transport.Request()
        print(_metadata.get(request, "instance/preempted"),
              _metadata.get(request, "instance/maintenance-event"))
        """
    )
    env = _google_env(tmp_path, server)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["TRUE", "TERMINATE_ON_HOST_MAINTENANCE"]
    assert env["GCE_METADATA_IP"] == host


def test_the_agent_environment_never_points_google_auth_elsewhere(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="loopback"):
        agent_env(tmp_path, GCE_METADATA_IP="169.254.169.254")
