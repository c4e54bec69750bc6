"""`forewarn drill aws`: the exact FIS and IAM requests (botocore Stubber), and nothing sent
without --yes."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from forewarn.providers.aws import drill
from support import LazyModule, agent_env, run_forewarn

# Imported at first use, not while collecting (tests/test_collection_imports.py).
boto3 = LazyModule("boto3")
botocore_stub = LazyModule("botocore.stub")

INSTANCE = "i-0123456789abcdef0"
ROLE = "arn:aws:iam::123456789012:role/fis-spot"
INSTANCE_ARN = f"arn:aws:ec2:eu-west-1:123456789012:instance/{INSTANCE}"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    drill.add_arguments(parser)
    return parser.parse_args(list(argv))


class Stubbed:
    def __init__(self) -> None:
        session = boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name="eu-west-1"
        )
        self.clients = drill.Clients(fis=session.client("fis"), iam=session.client("iam"))
        self.fis = botocore_stub.Stubber(self.clients.fis)
        self.iam = botocore_stub.Stubber(self.clients.iam)

    def created_and_started(self, template_id: str, template: dict[str, Any]) -> None:
        self.fis.add_response(
            "create_experiment_template", {"experimentTemplate": {"id": template_id}}, template
        )
        self.fis.add_response(
            "start_experiment",
            {"experiment": {"id": "EXP1", "state": {"status": "initiating"}}},
            {
                "clientToken": botocore_stub.ANY,
                "experimentTemplateId": template_id,
                "tags": {"Name": "forewarn-drill"},
            },
        )

    def state(self, status: str, reason: str = "") -> None:
        self.fis.add_response(
            "get_experiment",
            {"experiment": {"id": "EXP1", "state": {"status": status, "reason": reason}}},
            {"id": "EXP1"},
        )


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stubbed]:
    stub = Stubbed()
    monkeypatch.setattr(drill, "_clients", lambda region: stub.clients)
    with stub.fis, stub.iam:
        yield stub
        stub.fis.assert_no_pending_responses()
        stub.iam.assert_no_pending_responses()


def expected_template(role: str = ROLE, duration: str = "PT2M") -> dict[str, Any]:
    return {
        "clientToken": botocore_stub.ANY,
        "description": f"forewarn drill: spot interruption of {INSTANCE}",
        "roleArn": role,
        "stopConditions": [{"source": "none"}],
        "targets": {
            "spotInstance": {
                "resourceType": "aws:ec2:spot-instance",
                "resourceArns": [INSTANCE_ARN],
                "selectionMode": "ALL",
            }
        },
        "actions": {
            "interrupt": {
                "actionId": "aws:ec2:send-spot-instance-interruptions",
                "description": botocore_stub.ANY,
                "parameters": {"durationBeforeInterruption": duration},
                "targets": {"SpotInstances": "spotInstance"},
            }
        },
        "tags": {"Name": "forewarn-drill", "forewarn:instance": INSTANCE},
    }


def test_the_drill_creates_starts_follows_and_deletes(
    stubbed: Stubbed, capsys: pytest.CaptureFixture[str]
) -> None:
    stubbed.created_and_started("EXT1", expected_template(duration="PT3M"))
    for status in ("initiating", "running", "running", "completed"):
        stubbed.state(status, "Experiment completed." if status == "completed" else "")
    stubbed.fis.add_response("delete_experiment_template", {}, {"id": "EXT1"})
    args = parse(
        "--instance-id",
        INSTANCE,
        "--region",
        "eu-west-1",
        "--role-arn",
        ROLE,
        "--duration",
        "PT3M",
        "--poll",
        "0.001",
        "--yes",
    )
    assert drill.run(args) == 0
    out = capsys.readouterr().out
    assert "created experiment template EXT1" in out and "started experiment EXP1" in out
    changes = [line for line in out.splitlines() if "experiment " in line and "s  " in line]
    assert [line.split("experiment ", 1)[1] for line in changes] == [
        "initiating",
        "running",
        "completed: Experiment completed.",
    ]
    assert out.rstrip().endswith("deleted experiment template EXT1")


def test_a_failed_experiment_still_deletes_the_template(
    stubbed: Stubbed, capsys: pytest.CaptureFixture[str]
) -> None:
    stubbed.created_and_started("EXT2", expected_template())
    stubbed.state("failed", "Target resolution returned empty set")
    stubbed.fis.add_response("delete_experiment_template", {}, {"id": "EXT2"})
    args = parse(
        "--instance-id",
        INSTANCE,
        "--region",
        "eu-west-1",
        "--role-arn",
        ROLE,
        "--poll",
        "1",
        "--yes",
    )
    assert drill.run(args) == 1
    out = capsys.readouterr().out
    assert "experiment failed: Target resolution returned empty set" in out
    assert "deleted experiment template EXT2" in out


def test_create_role_makes_the_fis_role_first(stubbed: Stubbed) -> None:
    role_arn = "arn:aws:iam::123456789012:role/" + drill.ROLE_NAME
    stubbed.iam.add_response(
        "create_role",
        {
            "Role": {
                "Path": "/",
                "RoleName": drill.ROLE_NAME,
                "RoleId": "AROAEXAMPLEEXAMPLE01",
                "Arn": role_arn,
                "CreateDate": "2026-11-30T03:00:00Z",
            }
        },
        {
            "RoleName": drill.ROLE_NAME,
            "AssumeRolePolicyDocument": json.dumps(drill.TRUST_POLICY),
            "Description": botocore_stub.ANY,
        },
    )
    stubbed.iam.add_response(
        "put_role_policy",
        {},
        {
            "RoleName": drill.ROLE_NAME,
            "PolicyName": drill.ROLE_NAME,
            "PolicyDocument": json.dumps(drill.ROLE_POLICY),
        },
    )
    # A brand-new role is not visible to FIS at once: one refusal, then success.
    stubbed.fis.add_client_error(
        "create_experiment_template",
        service_error_code="ValidationException",
        service_message="Unable to assume role",
        expected_params=expected_template(role=role_arn),
    )
    stubbed.created_and_started("EXT3", expected_template(role=role_arn))
    stubbed.state("completed")
    stubbed.fis.add_response("delete_experiment_template", {}, {"id": "EXT3"})
    plan = drill.make_plan(
        parse("--instance-id", INSTANCE, "--region", "eu-west-1", "--create-role", "--yes"),
        lambda: None,
    )
    slept: list[float] = []
    assert drill.execute(plan, stubbed.clients, out=lambda line: None, sleep=slept.append) == 0
    assert slept == [drill.ROLE_RETRY_SECONDS]


def test_without_yes_nothing_is_sent(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_clients(region: str) -> None:
        raise AssertionError("a client was made without --yes")

    monkeypatch.setattr(drill, "_clients", no_clients)
    args = parse("--instance-id", INSTANCE, "--region", "eu-west-1", "--role-arn", ROLE)
    assert drill.run(args) == 0
    out = capsys.readouterr().out
    start = out.index("{")
    template, _ = json.JSONDecoder().raw_decode(out[start:])
    expected = expected_template()
    del expected["clientToken"]
    template["actions"]["interrupt"]["description"] = botocore_stub.ANY
    assert template == expected
    assert "Nothing was sent" in out


def test_the_command_line_prints_the_plan_and_exits_0(tmp_path: Path) -> None:
    env = agent_env(
        tmp_path, AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent"
    )
    result = run_forewarn(
        "drill",
        "aws",
        "--instance-id",
        INSTANCE,
        "--region",
        "eu-west-1",
        "--create-role",
        "--duration",
        "PT10M",
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "create IAM role forewarn-fis-spot-interruption" in result.stdout
    assert '"durationBeforeInterruption": "PT10M"' in result.stdout
    assert "interruption notice 480 s later" in result.stdout
    assert "Nothing was sent" in result.stdout


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (("--instance-id", "vm-1", "--role-arn", ROLE), "--instance-id"),
        (("--instance-id", INSTANCE + "\n", "--role-arn", ROLE), "--instance-id"),
        (("--instance-id", INSTANCE, "--role-arn", ROLE, "--duration", "PT1M"), "2 to 15 minutes"),
        (("--instance-id", INSTANCE, "--role-arn", ROLE, "--duration", "PT16M"), "2 to 15"),
        (("--instance-id", INSTANCE, "--role-arn", ROLE, "--duration", "2 mins ago"), "ISO 8601"),
        (("--instance-id", INSTANCE), "--role-arn"),
        (("--instance-id", INSTANCE, "--role-arn", "fis-role"), "not an IAM role ARN"),
        (("--instance-id", INSTANCE, "--role-arn", ROLE, "--create-role"), "not both"),
        (("--instance-id", INSTANCE, "--role-arn", ROLE, "--region", "mars"), "--region"),
    ],
)
def test_bad_input_exits_2_naming_the_flag(
    argv: tuple[str, ...], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = parse(*argv, *(() if "--region" in argv else ("--region", "eu-west-1")), "--yes")
    assert drill.run(args) == 2
    assert fragment in capsys.readouterr().err


def test_poll_takes_a_duration_as_every_other_flag() -> None:
    # `--poll 5s` was refused: "invalid float value: '5s'".
    assert parse("--instance-id", INSTANCE, "--poll", "5s").poll == 5.0
    assert parse("--instance-id", INSTANCE, "--poll", "1m").poll == 60.0


@pytest.mark.parametrize(("text", "seconds"), [("PT2M", 120), ("PT600S", 600), ("PT2M30S", 150)])
def test_durations(text: str, seconds: int) -> None:
    assert drill.duration_seconds(text) == seconds


def test_boto3_is_imported_only_when_acting() -> None:
    code = (
        "import sys, argparse\n"
        "import forewarn.providers.aws, forewarn.providers.aws.drill as d\n"
        "import forewarn.providers.aws.watch, forewarn.providers.aws.simulate\n"
        "p = argparse.ArgumentParser(); d.add_arguments(p)\n"
        "a = p.parse_args(['--instance-id', 'i-0123456789abcdef0', '--region', 'eu-west-1',"
        " '--role-arn', 'arn:aws:iam::123456789012:role/r'])\n"
        "assert d.run(a) == 0\n"
        "assert 'boto3' not in sys.modules and 'botocore' not in sys.modules, 'SDK loaded'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
