"""`forewarn drill gcp`: the request it prints, the one it sends (verified with respx, with
mock credentials), and how it follows the zonal operation."""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Any

import google.auth
import httpx
import pytest
import respx
from forewarn.providers.gcp import drill
from support import run_forewarn

API = "https://compute.googleapis.com"
INSTANCE = f"{API}/compute/v1/projects/my-proj/zones/us-central1-a/instances/gpu-1"
OPERATIONS = f"{API}/compute/v1/projects/my-proj/zones/us-central1-a/operations"


class FakeCredentials:
    service_account_email = "drill@my-proj.iam.gserviceaccount.com"

    def __init__(self) -> None:
        self.token: str | None = None
        self.refreshed = 0

    def refresh(self, request: Any) -> None:
        self.refreshed += 1
        self.token = "fake-token"


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> FakeCredentials:
    fake = FakeCredentials()
    scopes_seen: list[Any] = []

    def default(scopes: Any = None, **_: Any) -> tuple[FakeCredentials, str]:
        scopes_seen.append(scopes)
        return fake, "my-proj"

    monkeypatch.setattr(google.auth, "default", default)
    fake.scopes_seen = scopes_seen  # type: ignore[attr-defined]
    return fake


def _args(*extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    drill.add_arguments(parser)
    return parser.parse_args(
        ["--project", "my-proj", "--zone", "us-central1-a", "--instance", "gpu-1", *extra]
    )


@respx.mock(assert_all_mocked=True)
def test_without_yes_it_prints_and_sends_nothing(
    respx_mock: respx.MockRouter,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_credentials(**_: Any) -> None:
        raise AssertionError("credentials were loaded without --yes")

    monkeypatch.setattr(google.auth, "default", no_credentials)
    assert drill.run(_args()) == 0
    out = capsys.readouterr().out
    assert f"POST {INSTANCE}/simulateMaintenanceEvent?requestId=" in out
    assert "--yes" in out
    assert not respx_mock.calls


@respx.mock(assert_all_mocked=True, assert_all_called=True)
def test_with_yes_it_posts_and_follows_the_operation(
    respx_mock: respx.MockRouter,
    credentials: FakeCredentials,
    capsys: pytest.CaptureFixture[str],
) -> None:
    post = respx_mock.post(f"{INSTANCE}/simulateMaintenanceEvent").mock(
        return_value=httpx.Response(
            200, json={"kind": "compute#operation", "name": "operation-1", "status": "PENDING"}
        )
    )
    statuses = iter(["PENDING", "RUNNING", "RUNNING", "DONE"])
    get = respx_mock.get(f"{OPERATIONS}/operation-1").mock(
        side_effect=lambda request: httpx.Response(
            200, json={"name": "operation-1", "status": next(statuses)}
        )
    )
    assert drill.run(_args("--yes", "--poll-interval", "0.01")) == 0
    sent = post.calls.last.request
    assert sent.headers["Authorization"] == "Bearer fake-token"
    assert sent.url.params["requestId"]
    assert "withExtendedNotifications" not in sent.url.params
    assert sent.content == b""
    assert credentials.scopes_seen == [[drill.SCOPE]]  # type: ignore[attr-defined]
    assert all(call.request.headers["Authorization"] == "Bearer fake-token" for call in get.calls)
    out = capsys.readouterr().out
    assert "credentials: FakeCredentials (drill@my-proj.iam.gserviceaccount.com)" in out
    assert "fake-token" not in out
    lines = [line for line in out.splitlines() if "operation-1:" in line]
    assert [line.split("operation-1: ")[1] for line in lines] == ["PENDING", "RUNNING", "DONE"]


@respx.mock(assert_all_mocked=True)
def test_extended_notifications_flag(
    respx_mock: respx.MockRouter, credentials: FakeCredentials
) -> None:
    post = respx_mock.post(f"{INSTANCE}/simulateMaintenanceEvent").mock(
        return_value=httpx.Response(200, json={"name": "op-2", "status": "DONE"})
    )
    assert drill.run(_args("--yes", "--with-extended-notifications")) == 0
    assert post.calls.last.request.url.params["withExtendedNotifications"] == "true"


@respx.mock(assert_all_mocked=True)
def test_refusal_and_operation_errors_exit_1(
    respx_mock: respx.MockRouter,
    credentials: FakeCredentials,
    capsys: pytest.CaptureFixture[str],
) -> None:
    route = respx_mock.post(f"{INSTANCE}/simulateMaintenanceEvent")
    route.mock(
        return_value=httpx.Response(
            403, json={"error": {"code": 403, "message": "Required 'compute.instances.x'"}}
        )
    )
    assert drill.run(_args("--yes")) == 1
    # The error line goes to stderr, as every `forewarn:` line does: on stdout, a drill run
    # with its output sent to a log ended with exit 1 and nothing said on the terminal.
    out, err = capsys.readouterr()
    assert err.startswith("forewarn: drill gcp: ") and "Required 'compute.instances.x'" in err
    assert "forewarn:" not in out
    failed = {"code": "UNSUPPORTED", "message": "not supported on this VM"}
    route.mock(
        return_value=httpx.Response(
            200, json={"name": "op-3", "status": "DONE", "error": {"errors": [failed]}}
        )
    )
    assert drill.run(_args("--yes")) == 1
    assert "not supported on this VM" in capsys.readouterr().out


@pytest.mark.parametrize(
    "answer",
    [[], "DONE", {"name": "op-4", "status": "DONE", "error": "quota"}],
    ids=["array", "string", "error-string"],
)
def test_an_answer_that_is_no_operation_exits_1_without_a_traceback(
    answer: Any, credentials: FakeCredentials, capsys: pytest.CaptureFixture[str]
) -> None:
    # JSON that is not an Operation object (an --api root that is not Compute Engine's, a
    # proxy) ended the drill with AttributeError and a traceback.
    with respx.mock(assert_all_mocked=True) as respx_mock:
        respx_mock.post(f"{INSTANCE}/simulateMaintenanceEvent").mock(
            return_value=httpx.Response(200, json=answer)
        )
        assert drill.run(_args("--yes", "--poll-interval", "0.01")) == 1
    err = capsys.readouterr().err
    assert err.startswith("forewarn: drill gcp: ") and len(err.splitlines()) == 1, err


def test_forewarn_drill_gcp_command_prints_without_yes(env: dict[str, str]) -> None:
    done = run_forewarn(
        "drill", "gcp", "--project", "p", "--zone", "z", "--instance", "vm", env=env
    )
    assert done.returncode == 0, done.stderr
    assert "/projects/p/zones/z/instances/vm/simulateMaintenanceEvent" in done.stdout
    missing = run_forewarn("drill", "gcp", "--zone", "z", "--instance", "vm", env=env)
    assert missing.returncode == 2 and "--project" in missing.stderr


@pytest.mark.parametrize("flag", ["--poll-interval", "--timeout"])
def test_a_zero_poll_interval_or_timeout_exits_2(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # --poll-interval 0 read the operation in a tight loop against the Compute Engine API
    # (rate-limited per project) once sent; drill aws refuses --poll 0.
    from forewarn.agent.cli import main

    argv = ["drill", "gcp", "--project", "p", "--zone", "z", "--instance", "vm", flag, "0"]
    try:
        code = main(argv)
    except SystemExit as done:
        code = int(done.code or 0)
    out, err = capsys.readouterr()
    assert code == 2 and out == "", out
    assert err.startswith("forewarn: ") and flag in err and len(err.splitlines()) == 1, err


def test_google_auth_is_imported_only_by_the_drill() -> None:
    code = (
        "import sys\n"
        "import forewarn.providers.gcp, forewarn.providers.gcp.watch\n"
        "import forewarn.providers.gcp.simulate, forewarn.providers.gcp.drill\n"
        "assert not [m for m in sys.modules if m.startswith('google')], 'google-auth loaded'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_no_google_credentials_or_google_auth_exits_2_as_the_other_clouds_drills(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README: missing cloud credentials for a drill are bad input, exit 2, as `drill
    aws`, `azure` and `kubernetes` do. `drill gcp --yes` without Application Default
    Credentials (or without google-auth) exited 1, as a refused request does, so a script
    could not tell 'set up credentials' from 'Google said no'."""
    import google.auth.exceptions

    def no_credentials(scopes: Any = None, **_: Any) -> Any:
        raise google.auth.exceptions.DefaultCredentialsError(
            "Your default credentials were not found"
        )

    monkeypatch.setattr(google.auth, "default", no_credentials)
    with respx.mock(assert_all_mocked=True):  # nothing may be sent
        assert drill.run(_args("--yes")) == 2
    err = capsys.readouterr().err
    assert err.startswith("forewarn: drill gcp: no usable Google credentials: ")
    assert len(err.splitlines()) == 1, err

    monkeypatch.setitem(sys.modules, "google.auth", None)
    with respx.mock(assert_all_mocked=True):
        assert drill.run(_args("--yes")) == 2
    err = capsys.readouterr().err
    assert err.startswith("forewarn: drill gcp: google-auth is missing: "), err
