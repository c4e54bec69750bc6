"""`forewarn drill aws`: a real spot interruption of one instance through AWS FIS.

It creates an experiment template with `aws:ec2:send-spot-instance-interruptions` (target
type `aws:ec2:spot-instance`, key `SpotInstances`), starts it, follows its state and prints
each change, and deletes the template afterwards. AWS sends the rebalance recommendation at
once and the interruption notice two minutes before `--duration` is up; then the instance is
stopped or terminated as its interruption behaviour says. Without `--yes` it prints what it
would do, the template included, and sends nothing. boto3 is imported only when acting.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from forewarn.protocol.errors import UsageError
from forewarn.protocol.timefmt import duration_arg, typed_duration

ROLE_NAME = "forewarn-fis-spot-interruption"
ACTION_ID = "aws:ec2:send-spot-instance-interruptions"
TARGET_TYPE = "aws:ec2:spot-instance"
TERMINAL = ("completed", "stopped", "failed", "cancelled")
MIN_SECONDS, MAX_SECONDS = 120, 900  # durationBeforeInterruption: 2 to 15 minutes
# IAM is eventually consistent: FIS may not see a role created seconds ago.
ROLE_RETRIES, ROLE_RETRY_SECONDS = 8, 5.0

TRUST_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "fis.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ],
}
ROLE_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": ["ec2:SendSpotInstanceInterruptions", "ec2:DescribeInstances"],
            "Resource": "*",
        }
    ],
}

_INSTANCE_ID = re.compile(r"^i-(?:[0-9a-f]{8}|[0-9a-f]{17})\Z")
_ROLE_ARN = re.compile(r"^arn:(aws[a-z-]*):iam::(\d{12}):role/[\w+=,.@/-]{1,512}\Z")
_DURATION = re.compile(r"^PT(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?\Z")
_REGION = re.compile(r"^[a-z]{2}(?:-[a-z]+)+-\d\Z")


@dataclass
class Plan:
    instance_id: str
    region: str
    duration: str
    role_arn: str | None  # None: created under ROLE_NAME
    poll: float

    @property
    def partition(self) -> str:
        if self.role_arn is not None:
            match = _ROLE_ARN.match(self.role_arn)
            if match:
                return match.group(1)
        if self.region.startswith("cn-"):
            return "aws-cn"
        return "aws-us-gov" if self.region.startswith("us-gov-") else "aws"

    def account(self, role_arn: str | None = None) -> str:
        match = _ROLE_ARN.match(role_arn or self.role_arn or "")
        return match.group(2) if match else "<account-id>"

    def role(self) -> str:
        return self.role_arn or f"arn:{self.partition}:iam::<account-id>:role/{ROLE_NAME}"

    def template(self, role_arn: str | None = None) -> dict[str, Any]:
        role = role_arn or self.role()
        instance_arn = (
            f"arn:{self.partition}:ec2:{self.region}:{self.account(role)}:"
            f"instance/{self.instance_id}"
        )
        return {
            "description": f"forewarn drill: spot interruption of {self.instance_id}",
            "roleArn": role,
            "stopConditions": [{"source": "none"}],
            "targets": {
                "spotInstance": {
                    "resourceType": TARGET_TYPE,
                    "resourceArns": [instance_arn],
                    "selectionMode": "ALL",
                }
            },
            "actions": {
                "interrupt": {
                    "actionId": ACTION_ID,
                    "description": "rebalance recommendation now, interruption notice two "
                    "minutes before the interruption",
                    "parameters": {"durationBeforeInterruption": self.duration},
                    "targets": {"SpotInstances": "spotInstance"},
                }
            },
            "tags": {"Name": "forewarn-drill", "forewarn:instance": self.instance_id},
        }


def duration_seconds(text: str) -> int:
    """Seconds in an ISO 8601 duration such as PT2M, PT600S or PT2M30S."""
    match = _DURATION.match(text)
    if not match or not any(match.groups()):
        raise UsageError(f"--duration: not an ISO 8601 duration such as PT2M or PT600S: {text!r}")
    hours, minutes, seconds = (int(group or 0) for group in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def fis_duration(text: str) -> str:
    """`--duration` as FIS takes it, ISO 8601: `PT2M` (in any case) as written, or a duration
    as every other flag takes it (`5m`, `2m30s`, `300`) written so (`PT5M`, `PT2M30S`).
    `--duration 5m` was refused as 'not an ISO 8601 duration'."""
    written = text.strip()
    if _DURATION.match(written.upper()):
        return written.upper()
    try:
        seconds = typed_duration(written)
    except ValueError:
        raise UsageError(
            f"--duration: not a duration such as 5m, 2m30s or PT2M (ISO 8601): {text!r}"
        ) from None
    if not math.isfinite(seconds) or seconds != int(seconds):
        raise UsageError(f"--duration: FIS takes whole seconds, got {text!r}")
    minutes, rest = divmod(int(seconds), 60)
    return "PT" + (f"{minutes}M" if minutes else "") + (f"{rest}S" if rest or not minutes else "")


def make_plan(args: argparse.Namespace, default_region: Callable[[], str | None]) -> Plan:
    if not _INSTANCE_ID.match(args.instance_id or ""):
        raise UsageError(f"--instance-id: not an EC2 instance id (i-...): {args.instance_id!r}")
    duration = fis_duration(args.duration)
    seconds = duration_seconds(duration)
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise UsageError(
            f"--duration: FIS allows 2 to 15 minutes (PT2M to PT15M), got {args.duration} "
            f"({seconds} s)"
        )
    if args.role_arn and args.create_role:
        raise UsageError("--role-arn and --create-role: give one, not both")
    if not args.role_arn and not args.create_role:
        raise UsageError(
            "--role-arn: FIS needs a role it can assume (trusting fis.amazonaws.com, allowed "
            "ec2:SendSpotInstanceInterruptions and ec2:DescribeInstances); give its ARN, or "
            "--create-role to create one"
        )
    if args.role_arn and not _ROLE_ARN.match(args.role_arn):
        raise UsageError(f"--role-arn: not an IAM role ARN: {args.role_arn!r}")
    region = args.region or default_region()
    if not region:
        raise UsageError(
            "--region: no region given and none configured (AWS_REGION, AWS_DEFAULT_REGION or "
            "~/.aws/config)"
        )
    if not _REGION.match(region):
        raise UsageError(f"--region: not an AWS region: {region!r}")
    if args.poll <= 0:
        raise UsageError(f"--poll: must be more than 0 seconds, got {args.poll}")
    return Plan(args.instance_id, region, duration, args.role_arn, args.poll)


def describe(plan: Plan, out: Callable[[str], None]) -> None:
    """Exactly what `--yes` would do."""
    seconds = duration_seconds(plan.duration)
    out(f"forewarn drill aws: spot interruption of {plan.instance_id} in {plan.region}")
    step = 1
    if plan.role_arn is None:
        out(f"{step}. create IAM role {ROLE_NAME} (kept afterwards), trusting:")
        out(json.dumps(TRUST_POLICY, indent=2))
        out(f"   with inline policy {ROLE_NAME}:")
        out(json.dumps(ROLE_POLICY, indent=2))
        step += 1
    out(f"{step}. create this FIS experiment template:")
    out(json.dumps(plan.template(), indent=2))
    out(f"{step + 1}. start the experiment: the instance gets a rebalance recommendation at once")
    out(
        f"   and the interruption notice {seconds - 120} s later, two minutes before it is "
        "interrupted (stopped or terminated by its interruption behaviour)"
    )
    out(f"{step + 2}. follow the experiment every {plan.poll:g} s, printing each state change")
    out(f"{step + 3}. delete the template")


@dataclass
class Clients:
    fis: Any
    iam: Any


def _clients(region: str) -> Clients:
    import boto3

    session = boto3.session.Session(region_name=region)
    return Clients(fis=session.client("fis"), iam=session.client("iam"))


def _default_region() -> str | None:
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        return region
    try:
        import boto3
    except ImportError:
        return None
    # Reads ~/.aws/config only; nothing is sent.
    found: str | None = boto3.session.Session().region_name
    return found


def create_role(iam: Any, out: Callable[[str], None]) -> str:
    try:
        role = iam.create_role(
            RoleName=ROLE_NAME,
            AssumeRolePolicyDocument=json.dumps(TRUST_POLICY),
            Description="Lets AWS FIS send spot interruptions (forewarn drill aws)",
        )["Role"]
        out(f"created role {role['Arn']}")
    except iam.exceptions.EntityAlreadyExistsException:
        role = iam.get_role(RoleName=ROLE_NAME)["Role"]
        out(f"role {role['Arn']} exists; using it")
    iam.put_role_policy(
        RoleName=ROLE_NAME, PolicyName=ROLE_NAME, PolicyDocument=json.dumps(ROLE_POLICY)
    )
    arn: str = role["Arn"]
    return arn


def execute(
    plan: Plan,
    clients: Clients,
    out: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Do the drill; 0 when the experiment completed."""
    from botocore.exceptions import ClientError

    fis = clients.fis
    fresh_role = plan.role_arn is None
    role_arn = plan.role_arn or create_role(clients.iam, out)
    template = plan.template(role_arn)
    for attempt in range(ROLE_RETRIES):
        try:
            created = fis.create_experiment_template(clientToken=str(uuid.uuid4()), **template)
            break
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code")
            if not (fresh_role and code == "ValidationException") or attempt + 1 == ROLE_RETRIES:
                raise
            out(f"FIS does not see the new role yet; retrying in {ROLE_RETRY_SECONDS:g} s")
            sleep(ROLE_RETRY_SECONDS)
    template_id = created["experimentTemplate"]["id"]
    out(f"created experiment template {template_id}")
    try:
        started = fis.start_experiment(
            clientToken=str(uuid.uuid4()),
            experimentTemplateId=template_id,
            tags={"Name": "forewarn-drill"},
        )["experiment"]
        experiment_id = started["id"]
        out(f"started experiment {experiment_id}")
        return _follow(fis, experiment_id, plan.poll, out, sleep)
    finally:
        fis.delete_experiment_template(id=template_id)
        out(f"deleted experiment template {template_id}")


def _follow(
    fis: Any,
    experiment_id: str,
    poll: float,
    out: Callable[[str], None],
    sleep: Callable[[float], None],
) -> int:
    began = time.monotonic()
    last: tuple[str, str] | None = None
    try:
        while True:
            state = fis.get_experiment(id=experiment_id)["experiment"]["state"]
            status, reason = state.get("status", "?"), state.get("reason", "")
            if (status, reason) != last:
                last = (status, reason)
                suffix = f": {reason}" if reason else ""
                out(f"+{time.monotonic() - began:6.1f}s  experiment {status}{suffix}")
            if status in TERMINAL:
                return 0 if status == "completed" else 1
            sleep(poll)
    except KeyboardInterrupt:
        out(f"interrupted: stopping experiment {experiment_id}")
        fis.stop_experiment(id=experiment_id)
        return 130


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instance-id", required=True, help="the spot instance to interrupt")
    parser.add_argument("--region", help="its region (default: the configured AWS region)")
    parser.add_argument("--role-arn", help="an IAM role FIS can assume")
    parser.add_argument(
        "--create-role", action="store_true", help=f"create the FIS role ({ROLE_NAME})"
    )
    parser.add_argument(
        "--duration",
        default="PT2M",
        help="durationBeforeInterruption, 2 to 15 minutes: a duration (5m, 2m30s) or ISO 8601 "
        "(PT5M) (default PT2M: the interruption notice comes at once)",
    )
    parser.add_argument(
        # A duration, as every other flag takes (`--poll 5s` was "invalid float value").
        "--poll",
        type=duration_arg,
        default=5.0,
        help="seconds or a duration between state checks (default 5s)",
    )
    parser.add_argument("--yes", action="store_true", help="act; without it, only print the plan")


def run(args: argparse.Namespace) -> int:
    try:
        plan = make_plan(args, _default_region)
    except UsageError as error:
        print(f"forewarn: drill aws: {error}", file=sys.stderr)
        return 2
    describe(plan, print)
    if not args.yes:
        print("Nothing was sent. Run again with --yes to do it.")
        return 0
    try:
        clients = _clients(plan.region)
    except ImportError:
        from forewarn.protocol.install import extra_hint

        print(f"forewarn: drill aws: boto3 is needed: {extra_hint('aws')}", file=sys.stderr)
        return 2
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        return execute(plan, clients)
    except NoCredentialsError:
        print(
            "forewarn: drill aws: no AWS credentials found; run `aws configure` or "
            "`aws sso login`, set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or "
            "run where an instance role applies",
            file=sys.stderr,
        )
        return 2  # like a missing flag: the user must supply something before it can run
    except (ClientError, BotoCoreError) as error:
        print(f"forewarn: drill aws: {error}", file=sys.stderr)
        return 1


__all__ = [
    "ACTION_ID",
    "ROLE_NAME",
    "TARGET_TYPE",
    "Clients",
    "Plan",
    "add_arguments",
    "describe",
    "duration_seconds",
    "execute",
    "fis_duration",
    "make_plan",
    "run",
]
