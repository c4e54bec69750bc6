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
- `fault` (id `fault-N`): `path` (prefix, default `/latest/`), `method`, `status`, `body`,
  `hang` (seconds before answering), `times` (default until withdrawn);
- `revoke-tokens`: every token issued so far becomes invalid (as after expiry).

`drift: true` recomputes the time on every request (now + lead), as amazon-ec2-metadata-mock
does. Withdrawing a scheduled event moves it to the history path as canceled, like AWS.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from forewarn.protocol.timefmt import duration_arg, format_time, parse_duration, parse_time

from ..simulator import SimError, SimRequest, SimResponse, Simulator, serve_until_signalled
from .imds import (
    ASG_PATH,
    HISTORY_PATH,
    IDENTITY_PATH,
    LIFECYCLE_STATES,
    REBALANCE_PATH,
    SCHEDULED_CODES,
    SCHEDULED_PATH,
    SPOT_ACTIONS,
    SPOT_PATH,
    TERMINATION_TIME_PATH,
    TOKEN_HEADER,
    TOKEN_PATH,
    TTL_HEADER,
    format_aws_date,
    parse_aws_date,
)
from .settings import MAX_TOKEN_TTL, MIN_TOKEN_TTL

DEFAULT_INSTANCE_ID = "i-0123456789abcdef0"
DEFAULT_REGION = "us-east-1"
SPOT_LEAD = 120.0

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


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _time_value(value: Any, what: str) -> datetime:
    """A time given as RFC 3339, an IMDS date, or seconds from now."""
    if isinstance(value, bool):
        raise SimError(f"{what}: expected a time or a number of seconds, got {value!r}")
    if isinstance(value, (int, float)):
        return _now() + timedelta(seconds=float(value))
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
            return _now() + timedelta(seconds=parse_duration(value))
        except ValueError:
            pass
    raise SimError(f"{what}: not a time, a duration or seconds from now: {value!r}")


def _number(fields: dict[str, Any], key: str, default: float) -> float:
    value = fields.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise SimError(f"{key}: expected a number of seconds >= 0, got {value!r}")
    return float(value)


@dataclass
class _Timed:
    """A spot action or rebalance time: fixed, or recomputed per request (`drift`)."""

    fixed: datetime | None
    lead: float

    def at(self, now: datetime) -> str:
        moment = self.fixed if self.fixed is not None else now + timedelta(seconds=self.lead)
        return format_time(_seconds(moment))


@dataclass
class _Fault:
    path: str
    method: str | None
    status: int | None
    body: str | None
    hang: float
    times: int | None
    released: threading.Event = field(default_factory=threading.Event)

    def matches(self, request: SimRequest) -> bool:
        if self.method is not None and request.method != self.method:
            return False
        return request.path.startswith(self.path) and (self.times is None or self.times > 0)


class ImdsSimulator(Simulator):
    name = "aws"

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
        self.spot: tuple[str, _Timed] | None = None
        self.rebalance: _Timed | None = None
        self.scheduled: dict[str, dict[str, Any]] = {}
        self.history: list[dict[str, Any]] = []
        self.asg_state: str | None = None
        self.faults: dict[str, _Fault] = {}
        self._fault_count = 0

    # IMDS itself.

    def handle(self, request: SimRequest) -> SimResponse:
        fault = self._fault_for(request)
        if fault is not None:
            if fault.hang > 0:
                fault.released.wait(fault.hang)
            if fault.status is not None or fault.body is not None:
                return SimResponse(fault.status or 200, fault.body or "", "text/plain")
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

    def _fault_for(self, request: SimRequest) -> _Fault | None:
        with self.lock:
            for fault in self.faults.values():
                if fault.matches(request):
                    if fault.times is not None:
                        fault.times -= 1
                    return fault
        return None

    def _token(self, request: SimRequest) -> SimResponse:
        if request.method != "PUT":
            return _html(405, "Method Not Allowed")
        if request.header("X-Forwarded-For") is not None:
            return _html(403, "Forbidden")
        ttl_text = (request.header(TTL_HEADER) or "").strip()
        if not ttl_text.isdigit() or not MIN_TOKEN_TTL <= int(ttl_text) <= MAX_TOKEN_TTL:
            return _html(400, "Bad Request")
        ttl = int(ttl_text)
        token = secrets.token_urlsafe(42)
        with self.lock:
            now = time.time()
            self.tokens = {t: expiry for t, expiry in self.tokens.items() if expiry > now}
            self.tokens[token] = now + ttl
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
        now = _now()
        if path == SPOT_PATH and self.spot is not None:
            action, timed = self.spot
            return _text(json.dumps({"action": action, "time": timed.at(now)}))
        if path == TERMINATION_TIME_PATH and self.spot is not None and self.spot[0] == "terminate":
            return _text(self.spot[1].at(now))
        if path == REBALANCE_PATH and self.rebalance is not None:
            return _text(json.dumps({"noticeTime": self.rebalance.at(now)}))
        if path == SCHEDULED_PATH:
            return _text(json.dumps(list(self.scheduled.values()), indent=2))
        if path == HISTORY_PATH:
            return _text(json.dumps(self.history, indent=2))
        if path == ASG_PATH and self.asg_state is not None:
            return _text(self.asg_state)
        if path == IDENTITY_PATH:
            return _text(json.dumps(self._identity(), indent=2))
        plain = {
            "/latest/meta-data/instance-id": self.instance_id,
            "/latest/meta-data/instance-life-cycle": "spot",
            "/latest/meta-data/placement/region": self.region,
            "/latest/meta-data/placement/availability-zone": self.region + "a",
        }
        if path in plain:
            return _text(plain[path])
        return _html(404, "Not Found")

    def _identity(self) -> dict[str, Any]:
        return {
            "accountId": "123456789012",
            "architecture": "x86_64",
            "availabilityZone": self.region + "a",
            "imageId": "ami-0123456789abcdef0",
            "instanceId": self.instance_id,
            "instanceType": "g5.xlarge",
            "pendingTime": format_time(
                _seconds(datetime.fromtimestamp(self.started_at, timezone.utc))
            ),
            "privateIp": "10.0.0.10",
            "region": self.region,
            "version": "2017-09-30",
        }

    # Control API.

    def raise_notice(self, kind: str, fields: dict[str, Any]) -> str:
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
            state = fields.get("state", "Terminated")
            if state not in LIFECYCLE_STATES:
                raise SimError(f"state: one of {', '.join(LIFECYCLE_STATES)}, got {state!r}")
            with self.lock:
                self.asg_state = state
            return "asg"
        if kind == "fault":
            return self._raise_fault(fields)
        if kind == "revoke-tokens":
            with self.lock:
                self.tokens.clear()
            return "revoke-tokens"
        raise SimError(
            f"aws: unknown notice kind {kind!r}; use spot, rebalance, scheduled, asg, fault "
            "or revoke-tokens"
        )

    def _timed(self, fields: dict[str, Any], time_key: str, default_lead: float) -> _Timed:
        lead = _number(fields, "lead", default_lead)
        if fields.get("drift"):
            return _Timed(None, lead)
        if time_key in fields:
            return _Timed(_time_value(fields[time_key], time_key), lead)
        return _Timed(_now() + timedelta(seconds=lead), lead)

    def _raise_spot(self, fields: dict[str, Any]) -> str:
        action = fields.get("action", "terminate")
        if action not in SPOT_ACTIONS:
            raise SimError(f"action: one of {', '.join(SPOT_ACTIONS)}, got {action!r}")
        # Hibernation starts at once: AWS gives no two-minute lead for it.
        timed = self._timed(fields, "time", 0.0 if action == "hibernate" else SPOT_LEAD)
        with self.lock:
            self.spot = (action, timed)
        return "spot"

    def _raise_scheduled(self, fields: dict[str, Any]) -> str:
        code = fields.get("code", "system-reboot")
        if code not in SCHEDULED_CODES:
            raise SimError(f"code: one of {', '.join(SCHEDULED_CODES)}, got {code!r}")
        not_before = _time_value(fields.get("not_before", 3600), "not_before")
        not_after = (
            _time_value(fields["not_after"], "not_after")
            if "not_after" in fields
            else not_before + timedelta(hours=2)
        )
        event_id = fields.get("event_id") or f"instance-event-{secrets.token_hex(9)[:17]}"
        if not isinstance(event_id, str):
            raise SimError(f"event_id: expected a string, got {event_id!r}")
        event = {
            "NotBefore": format_aws_date(not_before),
            "Code": code,
            "Description": fields.get("description", _DESCRIPTIONS[code]),
            "EventId": event_id,
            "NotAfter": format_aws_date(not_after),
            "State": fields.get("state", "active"),
        }
        with self.lock:
            self.scheduled[event_id] = event
        return event_id

    def _raise_fault(self, fields: dict[str, Any]) -> str:
        status = fields.get("status")
        if status is not None and (not isinstance(status, int) or not 100 <= status <= 599):
            raise SimError(f"status: an HTTP status, got {status!r}")
        times = fields.get("times")
        if times is not None and (not isinstance(times, int) or times < 1):
            raise SimError(f"times: a count >= 1, got {times!r}")
        body = fields.get("body")
        if body is not None and not isinstance(body, str):
            raise SimError("body: a string")
        fault = _Fault(
            path=str(fields.get("path", "/latest/")),
            method=fields.get("method"),
            status=status,
            body=body,
            hang=_number(fields, "hang", 0.0),
            times=times,
        )
        with self.lock:
            self._fault_count += 1
            fault_id = f"fault-{self._fault_count}"
            self.faults[fault_id] = fault
        return fault_id

    def change_notice(self, notice_id: str, fields: dict[str, Any]) -> None:
        with self.lock:
            if notice_id in self.scheduled:
                event = self.scheduled[notice_id]
                keys = {"state": "State", "code": "Code", "description": "Description"}
                for key, value in fields.items():
                    if key in keys:
                        event[keys[key]] = value
                    elif key in ("not_before", "not_after"):
                        name = "NotBefore" if key == "not_before" else "NotAfter"
                        event[name] = format_aws_date(_time_value(value, key))
                    else:
                        raise SimError(f"scheduled events have no field {key!r}")
                return
            if notice_id in ("spot", "rebalance", "asg") and self._present(notice_id):
                if notice_id == "spot" and self.spot is not None:
                    fields = {"action": self.spot[0], **fields}
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
            elif notice_id in self.faults:
                self.faults.pop(notice_id).released.set()
            else:
                return False
        return True

    def cancel_scripts(self) -> None:
        super().cancel_scripts()
        with self.lock:
            for fault in self.faults.values():
                fault.released.set()

    def state(self) -> dict[str, Any]:
        now = _now()
        return {
            "imdsv1": self.imdsv1,
            "tokens": len(self.tokens),
            "spot": ({"action": self.spot[0], "time": self.spot[1].at(now)} if self.spot else None),
            "rebalance": {"noticeTime": self.rebalance.at(now)} if self.rebalance else None,
            "scheduled": list(self.scheduled.values()),
            "history": list(self.history),
            "asg": self.asg_state,
            "faults": sorted(self.faults),
        }


def make_simulator(
    *,
    imdsv1: bool = False,
    instance_id: str = DEFAULT_INSTANCE_ID,
    region: str = DEFAULT_REGION,
    spot_after: float | None = None,
    action: str = "terminate",
    spot_lead: float | None = None,
    rebalance_after: float | None = None,
    scheduled: list[str] | None = None,
    asg_after: float | None = None,
) -> ImdsSimulator:
    """An IMDS simulator with the scripted notices the command line asks for."""
    sim = ImdsSimulator(imdsv1=imdsv1, instance_id=instance_id, region=region)
    if action not in SPOT_ACTIONS:
        raise SimError(f"--action: one of {', '.join(SPOT_ACTIONS)}, got {action!r}")
    if spot_after is not None:
        spot: dict[str, Any] = {"action": action}
        if spot_lead is not None:
            spot["lead"] = spot_lead
        sim.schedule(spot_after, "spot", spot)
    if rebalance_after is not None:
        sim.schedule(rebalance_after, "rebalance", {})
    for text in scheduled or []:
        code, _, not_before = text.partition("@")
        if code not in SCHEDULED_CODES:
            raise SimError(f"--scheduled {text!r}: CODE is one of {', '.join(SCHEDULED_CODES)}")
        fields: dict[str, Any] = {"code": code}
        if not_before:
            fields["not_before"] = _time_value(not_before, f"--scheduled {text!r}").isoformat()
        sim.raise_notice("scheduled", fields)
    if asg_after is not None:
        sim.schedule(asg_after, "asg", {"state": "Terminated"})
    return sim


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options after `forewarn simulate aws` (the command line adds `--host`, `--port`)."""
    parser.add_argument(
        "--imdsv1", action="store_true", help="also answer tokenless (IMDSv1) requests"
    )
    parser.add_argument(
        "--spot-after", type=duration_arg, metavar="S", help="raise a spot interruption after S"
    )
    parser.add_argument(
        "--action", choices=SPOT_ACTIONS, default="terminate", help="its action (terminate)"
    )
    parser.add_argument(
        "--spot-lead",
        type=duration_arg,
        metavar="S",
        help="seconds from the notice to the action (default 120; hibernate 0)",
    )
    parser.add_argument(
        "--rebalance-after", type=duration_arg, metavar="S", help="raise a rebalance after S"
    )
    parser.add_argument(
        "--scheduled",
        action="append",
        metavar="CODE@NOTBEFORE",
        help="a scheduled event at once, e.g. system-reboot@2h or "
        "instance-stop@2026-12-01T09:00:00Z (repeatable; NOTBEFORE defaults to 1h)",
    )
    parser.add_argument(
        "--asg-after",
        type=duration_arg,
        metavar="S",
        help="set the ASG target lifecycle state to Terminated after S",
    )
    parser.add_argument("--instance-id", default=DEFAULT_INSTANCE_ID)
    parser.add_argument("--region", default=DEFAULT_REGION)


def run(args: argparse.Namespace) -> int:
    try:
        sim = make_simulator(
            imdsv1=args.imdsv1,
            instance_id=args.instance_id,
            region=args.region,
            spot_after=args.spot_after,
            action=args.action,
            spot_lead=args.spot_lead,
            rebalance_after=args.rebalance_after,
            scheduled=args.scheduled,
            asg_after=args.asg_after,
        )
    except SimError as error:
        print(f"forewarn simulate aws: {error}", file=sys.stderr, flush=True)
        return 2
    return serve_until_signalled(sim, args.host, args.port)


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
