"""A faithful EC2 instance metadata service on loopback: `forewarn simulate aws`.

It serves IMDS's notice paths with IMDS's status codes, headers and text/plain payloads:
IMDSv2 tokens enforced (401 without one, unless `imdsv1`), TTL checked (400 outside
1-21600), token PUTs through a proxy (X-Forwarded-For) refused (403), and 404 with IMDS's
HTML page when there is no notice. Notices are raised by script (`--spot-after` ...) or by
the shared control API (`POST /_sim/notices`), with these kinds:

- `spot` (id `spot`): `action` (terminate, stop, hibernate), `time` (RFC 3339) or `lead`
  (seconds, default 120; hibernate 0), `drift`;
- `rebalance` (id `rebalance`): `noticeTime` (RFC 3339, default now), `drift`;
- `scheduled` (id: its EventId): `code`, `not_before` (a time, a duration or seconds from
  now; default 1 h), `not_after`, `state`, `description`, `event_id`;
- `asg` (id `asg`): `state` (default `Terminated`);
- `revoke-tokens`: every token issued so far becomes invalid (as after expiry).

Faults are the shared vocabulary (`POST /_sim/faults`, see `providers/sim_faults.py`), with
IMDS's own error pages, plus one named fault: `hop-limit` (the token PUT is never answered,
as from a bridged container when the hop limit is 1); `throttle` lets IMDS's rate through.

`drift: true` recomputes the time on every request (now + lead), as amazon-ec2-metadata-mock
does. Withdrawing a scheduled event moves it to the history path as canceled, like AWS.
"""

from __future__ import annotations

import argparse
import json
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from http import HTTPStatus
from typing import Any, ClassVar

from forewarn.protocol.timefmt import duration_arg, format_time, parse_duration, parse_time

from ..sim_cli import Scripted, SimulatorCommand
from ..simulator import (
    MAX_LEAD,
    SimError,
    SimRequest,
    SimResponse,
    Simulator,
    refuse_unknown_fields,
    seconds_field,
    written_seconds,
    yes_or_no,
)
from .imds import (
    LIFECYCLE_STATES,
    SCHEDULED_CODES,
    SPOT_ACTIONS,
    TOKEN_HEADER,
    TOKEN_PATH,
    TTL_HEADER,
    format_aws_date,
    parse_aws_date,
)
from .tokenttl import MAX_TOKEN_TTL, MIN_TOKEN_TTL

DEFAULT_INSTANCE_ID = "i-0123456789abcdef0"
DEFAULT_REGION = "us-east-1"
SPOT_LEAD = 120.0
DEFAULT_ROLE = "forewarn-sim-role"
ACCOUNT = "123456789012"
INSTANCE_TYPE = "g5.xlarge"
PRIVATE_IP = "10.0.0.10"
# AWS publishes no request rate for IMDS; what it documents is 1024 packets a second per
# network interface to its link-local services, and a kept-alive IMDS request is about four
# packets (request, answer, two ACKs): about 256 requests a second.
THROTTLE_RATE = 256.0
# IMDS's own answers say who they are with this header.
SERVER = "EC2ws"

# The fields of each notice kind (the control API's and --notice's).
NOTICE_FIELDS: dict[str, tuple[str, ...]] = {
    "spot": ("action", "time", "lead", "drift"),
    "rebalance": ("noticeTime", "lead", "drift"),
    "scheduled": (
        *("code", "not_before", "not_after", "not_before_deadline"),
        *("state", "description", "event_id"),
    ),
    "asg": ("state",),
    "revoke-tokens": (),
}

DATE_FIELDS = {
    "not_before": "NotBefore",
    "not_after": "NotAfter",
    "not_before_deadline": "NotBeforeDeadline",
}

Tree = dict[str, Any]  # a directory: name -> Tree or the leaf's text

_DESCRIPTIONS = {
    "instance-reboot": "scheduled reboot",
    "system-reboot": "scheduled reboot",
    "system-maintenance": "scheduled maintenance",
    "instance-retirement": "scheduled instance retirement",
    "instance-stop": "scheduled stop",
}


def _html(status: int, title: str) -> SimResponse:
    """IMDS's own error page (its 404 and 401 bodies are HTML, not the notice format)."""
    page = (
        '<?xml version="1.0" encoding="iso-8859-1"?>\n'
        '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"\n'
        '\t"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">\n'
        '<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">\n'
        f" <head>\n  <title>{status} - {title}</title>\n </head>\n"
        f" <body>\n  <h1>{status} - {title}</h1>\n </body>\n</html>\n"
    )
    return SimResponse(status, page, "text/html")


def _text(payload: str) -> SimResponse:
    return SimResponse(200, payload, "text/plain")


def _seconds(moment: datetime) -> datetime:
    return moment.astimezone(timezone.utc).replace(microsecond=0)


def _imds_time(epoch: float) -> str:
    """IMDS's times in credentials and the identity document: RFC 3339, whole seconds."""
    return format_time(_seconds(datetime.fromtimestamp(epoch, timezone.utc)))


def _time_value(value: Any, what: str, now: datetime) -> datetime:
    """A time given as RFC 3339, an IMDS date, or seconds from `now` (the provider's clock)."""
    if isinstance(value, bool):
        raise SimError(f"{what}: expected a time or a number of seconds, got {value!r}")
    if isinstance(value, (int, float)):
        return now + timedelta(seconds=_within_lead(float(value), what))
    if isinstance(value, str):
        try:
            return parse_time(value)
        except ValueError:
            pass
        try:
            return parse_aws_date(value)
        except ValueError:
            pass
        try:
            seconds = parse_duration(value)
        except ValueError:
            pass
        else:
            return now + timedelta(seconds=_within_lead(seconds, what))
    raise SimError(f"{what}: not a time, a duration or seconds from now: {value!r}")


def _within_lead(seconds: float, what: str) -> float:
    if not abs(seconds) <= MAX_LEAD:
        raise SimError(f"{what}: at most {written_seconds(MAX_LEAD)} from now, got {seconds!r} s")
    return seconds


def _number(fields: dict[str, Any], key: str, default: float) -> float:
    return seconds_field(fields.get(key, default), key, MAX_LEAD)


# A scheduled event's State as IMDS lists it (history entries are canceled or completed).
SCHEDULED_STATES = ("active", "completed", "canceled")


def _scheduled_text(key: str, value: Any) -> str:
    """A scheduled event's `state`, `code` or `description`, checked: a State or Code IMDS
    never sends (`"cancelled"`, a misspelt code) was served as given, and a handler's test
    ran against an event AWS never lists."""
    allowed = {"state": SCHEDULED_STATES, "code": SCHEDULED_CODES}.get(key)
    if allowed is not None and value not in allowed:
        raise SimError(f"{key}: one of {', '.join(allowed)}, got {value!r}")
    if not isinstance(value, str):
        raise SimError(f"{key}: expected a string, got {value!r}")
    return value


def _asg_state(fields: dict[str, Any]) -> str:
    state = fields.get("state", "Terminated")
    if state not in LIFECYCLE_STATES:
        raise SimError(f"state: one of {', '.join(LIFECYCLE_STATES)}, got {state!r}")
    return str(state)


@dataclass
class _Timed:
    """A spot action or rebalance time: fixed, or recomputed per request (`drift`)."""

    fixed: datetime | None
    lead: float

    def at(self, now: datetime) -> str:
        moment = self.fixed if self.fixed is not None else now + timedelta(seconds=self.lead)
        return format_time(_seconds(moment))


class ImdsSimulator(Simulator):
    name = "aws"
    server_header = SERVER
    notice_kinds = ("spot", "rebalance", "scheduled", "asg", "revoke-tokens")
    fault_presets: ClassVar[dict[str, dict[str, Any]]] = {
        # From a bridged container the token answer (IP TTL 1) dies on the way: the PUT is
        # never answered and the SDK times out.
        "hop-limit": {"kind": "hang", "path": TOKEN_PATH, "method": "PUT"},
    }
    throttle_rate = THROTTLE_RATE

    def __init__(
        self,
        *,
        imdsv1: bool = False,
        instance_id: str = DEFAULT_INSTANCE_ID,
        region: str = DEFAULT_REGION,
    ) -> None:
        super().__init__()
        self.imdsv1 = imdsv1
        self.instance_id = instance_id
        self.region = region
        self.tokens: dict[str, float] = {}  # token -> expiry (time.time())
        # Tokens handed out so far: `requests` counts a PUT when it arrives, before its token
        # exists, so a revocation timed by that count can miss the token still being issued.
        self.tokens_issued = 0
        self.spot: tuple[str, _Timed] | None = None
        self.rebalance: _Timed | None = None
        self.scheduled: dict[str, dict[str, Any]] = {}
        self.history: list[dict[str, Any]] = []
        self.asg_state: str | None = None
        self.role = DEFAULT_ROLE

    # IMDS itself.

    def error_page(self, status: int) -> SimResponse:
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
        return _html(status, phrase or "Error")

    def handle(self, request: SimRequest) -> SimResponse:
        if request.path == TOKEN_PATH:
            return self._token(request)
        if request.path.endswith("/api/token"):
            # Only /latest/api/token issues tokens; versioned paths are refused by design.
            return _html(403, "Forbidden")
        if request.method not in ("GET", "HEAD"):
            return _html(405, "Method Not Allowed")
        denied = self._check_token(request)
        if denied is not None:
            return denied
        with self.lock:
            return self._serve(request.path)

    def _token(self, request: SimRequest) -> SimResponse:
        if request.method != "PUT":
            return _html(405, "Method Not Allowed")
        if request.header("X-Forwarded-For") is not None:
            return _html(403, "Forbidden")
        ttl_text = (request.header(TTL_HEADER) or "").strip()
        if (
            not (ttl_text.isascii() and ttl_text.isdigit())
            or not MIN_TOKEN_TTL <= int(ttl_text) <= MAX_TOKEN_TTL
        ):
            return _html(400, "Bad Request")
        ttl = int(ttl_text)
        token = secrets.token_urlsafe(42)
        with self.lock:
            now = time.time()
            self.tokens = {t: expiry for t, expiry in self.tokens.items() if expiry > now}
            self.tokens[token] = now + ttl
            self.tokens_issued += 1
        return SimResponse(200, token, "text/plain", headers={TTL_HEADER: str(ttl)})

    def _check_token(self, request: SimRequest) -> SimResponse | None:
        token = request.header(TOKEN_HEADER)
        if token is None:
            return None if self.imdsv1 else _html(401, "Unauthorized")
        with self.lock:
            expiry = self.tokens.get(token)
        # A token that is sent is always checked, even where IMDSv1 is allowed.
        if expiry is None or expiry <= time.time():
            return _html(401, "Unauthorized")
        return None

    def _serve(self, path: str) -> SimResponse:
        """A leaf as text/plain, a directory as IMDS lists it (one child a line, directories
        with a trailing slash); a trailing slash answers like the path without it."""
        if path != "/latest" and not path.startswith("/latest/"):
            return _html(404, "Not Found")
        node: Tree | str = self._tree(self.now())
        for part in (p for p in path[len("/latest") :].split("/") if p):
            child = node.get(part) if isinstance(node, dict) else None
            if child is None:
                return _html(404, "Not Found")
            node = child
        if isinstance(node, dict):
            if not node:
                return _html(404, "Not Found")
            # Under meta-data, directories end with a slash; /latest/ lists its three
            # categories without one, as IMDS does.
            top = not path.strip("/").removeprefix("latest")
            names = [
                key + ("/" if isinstance(value, dict) and not top else "")
                for key, value in node.items()
                if value != {}
            ]
            return _text("\n".join(names))
        return _text(node)

    def _tree(self, now: datetime) -> Tree:
        """What IMDS serves now; a directory with nothing in it is not there (404)."""
        spot: Tree = {}
        if self.spot is not None:
            action, timed = self.spot
            spot["instance-action"] = json.dumps({"action": action, "time": timed.at(now)})
            if action == "terminate":
                spot["termination-time"] = timed.at(now)
        recommendations: Tree = {}
        if self.rebalance is not None:
            recommendations["rebalance"] = json.dumps({"noticeTime": self.rebalance.at(now)})
        autoscaling: Tree = {}
        if self.asg_state is not None:
            autoscaling["target-lifecycle-state"] = self.asg_state
        meta: Tree = {
            "ami-id": "ami-0123456789abcdef0",
            "ami-launch-index": "0",
            "autoscaling": autoscaling,
            "events": {
                "maintenance": {
                    "history": json.dumps(self.history, indent=2),
                    "scheduled": json.dumps(list(self.scheduled.values()), indent=2),
                },
                "recommendations": recommendations,
            },
            "hostname": "ip-10-0-0-10.ec2.internal",
            "iam": {
                "info": json.dumps(self._iam_info(), indent=2),
                "security-credentials": {self.role: json.dumps(self._credentials(), indent=2)},
            },
            "instance-id": self.instance_id,
            "instance-life-cycle": "spot",
            "instance-type": INSTANCE_TYPE,
            "local-ipv4": PRIVATE_IP,
            "placement": {
                "availability-zone": self.region + "a",
                "region": self.region,
            },
            "spot": spot,
        }
        return {
            "dynamic": {"instance-identity": {"document": json.dumps(self._identity(), indent=2)}},
            "meta-data": meta,
        }

    def _iam_info(self) -> dict[str, Any]:
        return {
            "Code": "Success",
            "LastUpdated": _imds_time(self.started_at),
            "InstanceProfileArn": f"arn:aws:iam::{ACCOUNT}:instance-profile/{self.role}",
            "InstanceProfileId": "AIPAFOREWARNSIMULATOR0",
        }

    def _credentials(self) -> dict[str, Any]:
        """Fake role credentials shaped as IMDS's, valid six hours from now."""
        now = time.time()
        return {
            "Code": "Success",
            "LastUpdated": _imds_time(now),
            "Type": "AWS-HMAC",
            "AccessKeyId": "ASIAFOREWARNSIMULATOR",
            "SecretAccessKey": "forewarn-simulated-secret-access-key",
            "Token": "forewarn-simulated-session-token",
            "Expiration": _imds_time(now + 6 * 3600),
        }

    def _identity(self) -> dict[str, Any]:
        """The instance identity document with IMDS's fields (null where IMDS has null)."""
        return {
            "accountId": ACCOUNT,
            "architecture": "x86_64",
            "availabilityZone": self.region + "a",
            "billingProducts": None,
            "devpayProductCodes": None,
            "marketplaceProductCodes": None,
            "imageId": "ami-0123456789abcdef0",
            "instanceId": self.instance_id,
            "instanceType": INSTANCE_TYPE,
            "kernelId": None,
            "pendingTime": _imds_time(self.started_at),
            "privateIp": PRIVATE_IP,
            "ramdiskId": None,
            "region": self.region,
            "version": "2017-09-30",
        }

    # Control API.

    def raise_notice(self, kind: str, fields: dict[str, Any]) -> str:
        if kind in NOTICE_FIELDS:
            refuse_unknown_fields(kind, fields, NOTICE_FIELDS[kind])
        if kind == "spot":
            return self._raise_spot(fields)
        if kind == "rebalance":
            timed = self._timed(fields, "noticeTime", 0.0)
            with self.lock:
                self.rebalance = timed
            return "rebalance"
        if kind == "scheduled":
            return self._raise_scheduled(fields)
        if kind == "asg":
            state = _asg_state(fields)
            with self.lock:
                self.asg_state = state
            return "asg"
        if kind == "revoke-tokens":
            with self.lock:
                self.tokens.clear()
            return "revoke-tokens"
        raise SimError(f"aws: unknown notice kind {kind!r}; use {', '.join(self.notice_kinds)}")

    def _timed(self, fields: dict[str, Any], time_key: str, default_lead: float) -> _Timed:
        lead = _number(fields, "lead", default_lead)
        if yes_or_no(fields.get("drift", False), "drift"):
            return _Timed(None, lead)
        if time_key in fields:
            return _Timed(_time_value(fields[time_key], time_key, self.now()), lead)
        return _Timed(self.now() + timedelta(seconds=lead), lead)

    def check_notice(self, kind: str, fields: dict[str, Any]) -> None:
        if kind in NOTICE_FIELDS:
            refuse_unknown_fields(kind, fields, NOTICE_FIELDS[kind])
        if kind == "spot":
            self._spot(fields)
        elif kind == "rebalance":
            self._timed(fields, "noticeTime", 0.0)
        elif kind == "scheduled":
            self._scheduled_event(fields)
        elif kind == "asg":
            _asg_state(fields)

    def _spot(self, fields: dict[str, Any]) -> tuple[str, _Timed]:
        action = fields.get("action", "terminate")
        if action not in SPOT_ACTIONS:
            raise SimError(f"action: one of {', '.join(SPOT_ACTIONS)}, got {action!r}")
        # Hibernation starts at once: AWS gives no two-minute lead for it.
        return action, self._timed(fields, "time", 0.0 if action == "hibernate" else SPOT_LEAD)

    def _raise_spot(self, fields: dict[str, Any]) -> str:
        spot = self._spot(fields)
        with self.lock:
            self.spot = spot
        return "spot"

    def _raise_scheduled(self, fields: dict[str, Any]) -> str:
        event = self._scheduled_event(fields)
        with self.lock:
            self.scheduled[event["EventId"]] = event
        return str(event["EventId"])

    def _scheduled_event(self, fields: dict[str, Any]) -> dict[str, Any]:
        code = _scheduled_text("code", fields.get("code", "system-reboot"))
        not_before = _time_value(fields.get("not_before", 3600), "not_before", self.now())
        not_after = (
            _time_value(fields["not_after"], "not_after", self.now())
            if "not_after" in fields
            else not_before + timedelta(hours=2)
        )
        deadline = (
            _time_value(fields["not_before_deadline"], "not_before_deadline", self.now())
            if "not_before_deadline" in fields
            else not_before + timedelta(days=2)
        )
        event_id = fields.get("event_id") or f"instance-event-{secrets.token_hex(9)[:17]}"
        if not isinstance(event_id, str):
            raise SimError(f"event_id: expected a string, got {event_id!r}")
        event = {
            "NotBefore": format_aws_date(not_before),
            "Code": code,
            "Description": _scheduled_text(
                "description", fields.get("description", _DESCRIPTIONS[code])
            ),
            "EventId": event_id,
            "NotAfter": format_aws_date(not_after),
            "NotBeforeDeadline": format_aws_date(deadline),
            "State": _scheduled_text("state", fields.get("state", "active")),
        }
        return event

    def change_notice(self, notice_id: str, fields: dict[str, Any]) -> None:
        with self.lock:
            if notice_id in self.scheduled:
                event = self.scheduled[notice_id]
                keys = {"state": "State", "code": "Code", "description": "Description"}
                changed = dict(event)  # all checked before any is applied
                for key, value in fields.items():
                    if key in keys:
                        changed[keys[key]] = _scheduled_text(key, value)
                    elif key in DATE_FIELDS:
                        changed[DATE_FIELDS[key]] = format_aws_date(
                            _time_value(value, key, self.now())
                        )
                    else:
                        raise SimError(f"scheduled events have no field {key!r}")
                event.update(changed)
                return
            if notice_id == "spot" and self.spot is not None:
                # A change keeps what it does not name: the action, and the time unless a
                # time, lead or drift is given (a PATCH of the action alone reset the time to
                # two minutes from the PATCH, a terminate 8 minutes early for a 10-minute stop).
                refuse_unknown_fields("spot", fields, NOTICE_FIELDS["spot"])
                action, timed = self._spot({"action": self.spot[0], **fields})
                if not fields.keys() & {"time", "lead", "drift"}:
                    timed = self.spot[1]
                self.spot = (action, timed)
                return
            if notice_id in ("rebalance", "asg") and self._present(notice_id):
                self.raise_notice(notice_id, fields)
                return
        raise SimError(f"no notice {notice_id!r}", 404)

    def _present(self, notice_id: str) -> bool:
        return {
            "spot": self.spot is not None,
            "rebalance": self.rebalance is not None,
            "asg": self.asg_state is not None,
        }[notice_id]

    def withdraw(self, notice_id: str) -> bool:
        with self.lock:
            if notice_id == "spot" and self.spot is not None:
                self.spot = None
            elif notice_id == "rebalance" and self.rebalance is not None:
                self.rebalance = None
            elif notice_id == "asg" and self.asg_state is not None:
                self.asg_state = None
            elif notice_id in self.scheduled:
                event = self.scheduled.pop(notice_id)
                event["State"] = "canceled"
                event["Description"] = f"[Canceled] {event['Description']}"
                self.history.append(event)
            else:
                return False
        return True

    def state(self) -> dict[str, Any]:
        now = self.now()
        return {
            "imdsv1": self.imdsv1,
            "tokens": len(self.tokens),
            "spot": ({"action": self.spot[0], "time": self.spot[1].at(now)} if self.spot else None),
            "rebalance": {"noticeTime": self.rebalance.at(now)} if self.rebalance else None,
            "scheduled": list(self.scheduled.values()),
            "history": list(self.history),
            "asg": self.asg_state,
        }


def make_simulator(
    *,
    imdsv1: bool = False,
    instance_id: str = DEFAULT_INSTANCE_ID,
    region: str = DEFAULT_REGION,
    scheduled: list[str] | None = None,
    date_ahead: float = 0.0,
) -> ImdsSimulator:
    """An IMDS simulator, with the `--scheduled CODE@NOTBEFORE` events already in place (a
    duration counted on the provider's clock, `date_ahead` off this machine's)."""
    sim = ImdsSimulator(imdsv1=imdsv1, instance_id=instance_id, region=region)
    sim.date_ahead = date_ahead
    for text in scheduled or []:
        code, _, not_before = text.partition("@")
        if code not in SCHEDULED_CODES:
            raise SimError(f"--scheduled {text!r}: CODE is one of {', '.join(SCHEDULED_CODES)}")
        fields: dict[str, Any] = {"code": code}
        if not_before:
            fields["not_before"] = _time_value(
                not_before, f"--scheduled {text!r}", sim.now()
            ).isoformat()
        sim.raise_notice("scheduled", fields)
    return sim


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--imdsv1", action="store_true", help="also answer tokenless (IMDSv1) requests"
    )
    parser.add_argument(
        "--action",
        choices=SPOT_ACTIONS,
        help="the action of the --spot-after interruption (default terminate)",
    )
    parser.add_argument(
        "--spot-lead",
        type=duration_arg,
        metavar="S",
        help="seconds from the --spot-after notice to the action (default 120; hibernate 0)",
    )
    parser.add_argument(
        "--scheduled",
        action="append",
        metavar="CODE@NOTBEFORE",
        help="a scheduled event at once, e.g. system-reboot@2h or "
        "instance-stop@2026-12-01T09:00:00Z (repeatable; NOTBEFORE defaults to 1h)",
    )
    parser.add_argument(
        "--instance-id",
        default=DEFAULT_INSTANCE_ID,
        help=f"meta-data/instance-id and the identity document's (default {DEFAULT_INSTANCE_ID})",
    )
    parser.add_argument(
        "--region",
        default=DEFAULT_REGION,
        help=f"placement/region; the availability zone is it + 'a' (default {DEFAULT_REGION})",
    )


COMMAND = SimulatorCommand(
    name="aws",
    build=make_simulator,
    passes=("imdsv1", "instance_id", "region", "scheduled", "date_ahead"),
    options=_options,
    scripted=(
        Scripted(
            "spot",
            "spot",
            "raise a spot interruption after S",
            options={"action": "action", "lead": "spot_lead"},
        ),
        Scripted("rebalance", "rebalance", "raise a rebalance recommendation after S"),
        Scripted(
            "asg",
            "asg",
            "set the ASG target lifecycle state to Terminated after S",
            lambda args: {"state": "Terminated"},
        ),
    ),
    hints=lambda sim, url, args: [f"point the agent at it: FOREWARN_AWS_URL={url}"],
)
add_arguments = COMMAND.add_arguments
run = COMMAND.run


def drill_script() -> dict[str, Any]:
    """How `forewarn drill local --provider aws` raises its two notices: a rebalance
    recommendation (drain) and a two-minute spot interruption (terminate)."""
    return {
        "drain": ("rebalance", {}),
        "terminate": ("spot", {"action": "terminate", "lead": SPOT_LEAD}),
        "env": {},
    }


__all__ = [
    "ImdsSimulator",
    "add_arguments",
    "drill_script",
    "make_simulator",
    "run",
]
