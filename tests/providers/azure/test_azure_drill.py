"""`forewarn drill azure`: the simulateEviction request, via respx and a fake credential."""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import respx
from forewarn.providers.azure import drill

SUB = "00000000-1111-2222-3333-444444444444"
VM_URL = (
    f"https://management.azure.com/subscriptions/{SUB}/resourceGroups/train-rg/providers/"
    "Microsoft.Compute/virtualMachines/gpu-spot-0/simulateEviction"
)
VMSS_URL = (
    f"https://management.azure.com/subscriptions/{SUB}/resourceGroups/train-rg/providers/"
    "Microsoft.Compute/virtualMachineScaleSets/gpuset/virtualMachines/7/simulateEviction"
)


@dataclass
class Token:
    token: str
    expires_on: int = 2_000_000_000


class FakeCredential:
    def __init__(self, fail: bool = False) -> None:
        self.scopes: list[tuple[str, ...]] = []
        self.fail = fail

    def get_token(self, *scopes: str, **kwargs: Any) -> Token:
        self.scopes.append(scopes)
        if self.fail:
            raise RuntimeError(
                "DefaultAzureCredential failed to retrieve a token from the included "
                "credentials.\nAttempted credentials:\n\tEnvironmentCredential: incomplete"
            )
        return Token("s3cret-token")


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    drill.add_arguments(parser)
    return parser.parse_args(list(argv))


VM_ARGS = ("--subscription", SUB, "--resource-group", "train-rg", "--vm", "gpu-spot-0")


@respx.mock(assert_all_called=False)
def test_without_yes_prints_the_request_and_sends_nothing(
    respx_mock: respx.MockRouter, capsys: pytest.CaptureFixture[str]
) -> None:
    route = respx_mock.post(url__startswith="https://management.azure.com/")
    credential = FakeCredential()
    assert drill.run(parse(*VM_ARGS), credential=credential) == 0
    out = capsys.readouterr().out
    assert f"POST {VM_URL}?api-version={drill.DEFAULT_API_VERSION}" in out
    assert "https://management.azure.com/.default" in out and "--yes" in out
    assert not route.called and credential.scopes == []


@respx.mock
def test_vm_eviction_posts_with_the_token_and_expects_204(
    capsys: pytest.CaptureFixture[str],
) -> None:
    route = respx.post(VM_URL, params={"api-version": "2024-11-01"}).mock(
        return_value=httpx.Response(204)
    )
    credential = FakeCredential()
    args = parse(*VM_ARGS, "--api-version", "2024-11-01", "--yes")
    assert drill.run(args, credential=credential) == 0
    assert credential.scopes == [("https://management.azure.com/.default",)]
    request = route.calls.last.request
    assert request.headers["Authorization"] == "Bearer s3cret-token"
    assert request.content == b""
    out = capsys.readouterr().out
    assert "Preempt" in out and "30 s" in out and "terminate" in out
    assert "s3cret-token" not in out  # never print credentials


@respx.mock
def test_vmss_instance_eviction(capsys: pytest.CaptureFixture[str]) -> None:
    route = respx.post(VMSS_URL).mock(return_value=httpx.Response(204))
    args = parse(
        "--subscription", SUB, "--resource-group", "train-rg", "--vmss", "gpuset",
        "--instance-id", "7", "--yes",
    )  # fmt: skip
    assert drill.run(args, credential=FakeCredential()) == 0
    assert route.called
    assert "gpuset_7" in capsys.readouterr().out


@respx.mock
def test_an_answer_other_than_204_fails(capsys: pytest.CaptureFixture[str]) -> None:
    respx.post(VM_URL).mock(
        return_value=httpx.Response(409, json={"error": {"code": "OperationNotAllowed"}})
    )
    assert drill.run(parse(*VM_ARGS, "--yes"), credential=FakeCredential()) == 1
    err = capsys.readouterr().err
    assert "409" in err and "OperationNotAllowed" in err


@respx.mock
def test_transport_and_credential_failures(capsys: pytest.CaptureFixture[str]) -> None:
    respx.post(VM_URL).mock(side_effect=httpx.ConnectError("no route"))
    assert drill.run(parse(*VM_ARGS, "--yes"), credential=FakeCredential()) == 1
    assert "request failed" in capsys.readouterr().err
    assert drill.run(parse(*VM_ARGS, "--yes"), credential=FakeCredential(fail=True)) == 2
    # One line: the first of the credential chain's message, and how to sign in.
    err = capsys.readouterr().err
    assert err.startswith("forewarn: drill azure: no Azure credentials") and "az login" in err
    assert len(err.strip().splitlines()) == 1


def test_argument_errors(capsys: pytest.CaptureFixture[str]) -> None:
    base = ("--subscription", SUB, "--resource-group", "g")
    assert drill.run(parse(*base, "--vmss", "gpuset")) == 2
    assert "--instance-id" in capsys.readouterr().err
    assert drill.run(parse(*base, "--vm", "a", "--instance-id", "3")) == 2
    with pytest.raises(SystemExit):
        parse(*base)  # neither --vm nor --vmss
    with pytest.raises(SystemExit):
        parse(*base, "--vm", "a", "--vmss", "b")


def test_timeout_is_a_duration_like_every_other_drills(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Before: a float, so `--timeout 2m` was refused while the GCP drill takes it, and
    # `--timeout -1` or `nan` was taken and, with --yes, ended in "unexpected ValueError"
    # from httpx once the token had been fetched.
    assert parse(*VM_ARGS, "--timeout", "2m").timeout == 120
    assert parse(*VM_ARGS).timeout == 30
    for bad in ("0", "-1", "nan", "soon"):
        with pytest.raises(SystemExit):
            parse(*VM_ARGS, "--timeout", bad)
        assert "--timeout" in capsys.readouterr().err


def test_names_are_quoted_in_the_url() -> None:
    url = drill.eviction_url("s", "my rg", vm="a/b")
    assert "/resourceGroups/my%20rg/" in url and "/virtualMachines/a%2Fb/" in url


def test_azure_identity_is_imported_only_inside_the_drill() -> None:
    code = (
        "import sys\n"
        "import forewarn.providers.azure, forewarn.providers.azure.drill\n"
        "import forewarn.providers.azure.watch, forewarn.providers.azure.simulate\n"
        "import forewarn.agent.config\n"
        "print('azure.identity' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_cli_dry_run(tmp_path: object) -> None:
    from support import agent_env, run_forewarn

    result = run_forewarn(
        "drill",
        "azure",
        *VM_ARGS,
        env=agent_env(tmp_path),  # type: ignore[arg-type]
    )
    assert result.returncode == 0, result.stderr
    assert "simulateEviction" in result.stdout and "dry run" in result.stdout


@respx.mock
def test_default_credential_comes_from_azure_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    import azure.identity

    made: list[FakeCredential] = []

    def factory() -> FakeCredential:
        made.append(FakeCredential())
        return made[-1]

    monkeypatch.setattr(azure.identity, "DefaultAzureCredential", factory)
    respx.post(VM_URL).mock(return_value=httpx.Response(204))
    assert drill.run(parse(*VM_ARGS, "--yes")) == 0
    assert made and made[0].scopes == [("https://management.azure.com/.default",)]
