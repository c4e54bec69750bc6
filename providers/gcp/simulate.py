"""A faithful fake of the GCE metadata server on loopback (`forewarn simulate gcp`).

It serves `/computeMetadata/v1/...` as the real server does where a watcher or Google's own
clients can tell: `Metadata-Flavor: Google` required (403 without), `X-Forwarded-For`
refused (403), an `ETag` on every answer, `wait_for_change` with `last_etag` and
`timeout_sec`, 400 for a wait on a directory without `recursive=true` or on the token,
`recursive=true` (JSON with camelCase keys, or `alt=text`) and `alt=json`, a fake
service-account token and ID token (`identity?audience=...`) and `universe/universe-domain`,
so google-auth's compute_engine credentials and ID-token credentials work.

Control API kinds (`POST /_sim/notices {"kind": ...}`):

- `preempt` → `instance/preempted` becomes TRUE (id `preempted`);
- `maintenance` `{"type": "TERMINATE"|"MIGRATE"|"NONE", "duration": S}` →
  `instance/maintenance-event` (id `maintenance-event`), back to NONE after `duration`;
- `upcoming` `{"start_in": S, "window": S, "maintenance_status": ..., "type": ...,
  "document": {...}}` → `instance/upcoming-maintenance` (id `upcoming-maintenance`);

`DELETE /_sim/notices/<id>` withdraws any of them. `POST /_sim/restart` restarts the
metadata server as far as a watcher can tell: the ETags it gave are forgotten and start
again from their boot values, the values stay (`GcpSimulator.restart`). Faults are the
shared vocabulary (`POST /_sim/faults`), answered with the metadata server's own headers
and error texts; a long-poll that ends while a `status` or `throttle` fault is in force
answers with the fault.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from http import HTTPStatus
from typing import Any

from forewarn.protocol.timefmt import duration_arg, format_time, parse_time

from ..sim_cli import Scripted, SimulatorCommand
from ..simulator import (
    CONTROL_PREFIX,
    MAX_LEAD,
    SimError,
    SimRequest,
    SimResponse,
    Simulator,
    refuse_unknown_fields,
    seconds_field,
    yes_or_no,
)

METADATA_PREFIX = "/computeMetadata/v1"
FLAVOR_HEADER = "Metadata-Flavor"
TEXT = "application/text"
JSON = "application/json"

MAINTENANCE_TYPES = {
    "TERMINATE": "TERMINATE_ON_HOST_MAINTENANCE",
    "MIGRATE": "MIGRATE_ON_HOST_MAINTENANCE",
    "NONE": "NONE",
}
# How an "upcoming-maintenance" read answers when nothing is scheduled: every form seen on
# real VMs (the official example is `{}`).
UPCOMING_NONE_FORMS = ("empty", "404", "none", "error", "503")
SERVER = "Metadata Server for VM"
UNIVERSE_DOMAIN = "googleapis.com"
ID_TOKEN_LIFETIME = 3600
# A wait without timeout_sec blocks "for a very long time" on the real server.
MAX_WAIT = 3600.0

Tree = dict[str, Any]  # directory: name → Tree | leaf; a leaf is str or list[str]


def _camel(name: str) -> str:
    head, *rest = name.split("-")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _as_json(node: Any, user_keys: bool = False) -> Any:
    """A subtree as the real server's recursive JSON: camelCase keys, except user-defined
    attribute names, which are kept as written."""
    if isinstance(node, dict):
        return {
            (key if user_keys else _camel(key)): _as_json(value, user_keys or key == "attributes")
            for key, value in node.items()
        }
    return node


def _as_text_lines(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict):
        lines: list[str] = []
        for key, value in node.items():
            lines.extend(_as_text_lines(value, f"{prefix}/{key}" if prefix else key))
        return lines
    value = node if isinstance(node, str) else ",".join(node)
    return [f"{prefix} {value}"]


def _leaf_text(value: str | list[str]) -> str:
    return value if isinstance(value, str) else "".join(f"{item}\n" for item in value)


def _etag(*parts: Any) -> str:
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


class GcpSimulator(Simulator):
    name = "gcp"
    server_header = SERVER
    notice_kinds = ("preempt", "maintenance", "upcoming")

    def __init__(
        self,
        *,
        project: str = "forewarn-sim",
        project_number: int = 123456789012,
        zone: str = "us-central1-a",
        instance: str = "forewarn-sim-vm",
        machine_type: str = "a2-highgpu-1g",
        preemptible: bool = False,
        on_host_maintenance: str = "TERMINATE",
        preemption_notice_duration: float | None = None,
        upcoming_none: str = "empty",
        service_account: str | None = None,
    ) -> None:
        super().__init__()
        if on_host_maintenance not in ("MIGRATE", "TERMINATE"):
            raise ValueError(
                f"on_host_maintenance must be MIGRATE or TERMINATE, got {on_host_maintenance!r}"
            )
        if preemptible and on_host_maintenance != "TERMINATE":
            # Compute Engine creates no such VM ("Set the host maintenance policy": Spot and
            # preemptible VMs can only stop for host maintenance); served, the watcher took
            # it for one that keeps running through a maintenance window.
            raise ValueError(
                "a Spot (preemptible) VM cannot live-migrate: its on_host_maintenance is "
                f"TERMINATE, got {on_host_maintenance!r}"
            )
        if upcoming_none not in UPCOMING_NONE_FORMS:
            raise ValueError(
                f"upcoming_none must be one of {', '.join(UPCOMING_NONE_FORMS)}, "
                f"got {upcoming_none!r}"
            )
        email = service_account or f"{project_number}-compute@developer.gserviceaccount.com"
        account: Tree = {
            "aliases": ["default"],
            "email": email,
            "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
        }
        scheduling: Tree = {
            "automatic-restart": "FALSE" if preemptible else "TRUE",
            "on-host-maintenance": on_host_maintenance,
            "preemptible": "TRUE" if preemptible else "FALSE",
            "provisioning-model": "SPOT" if preemptible else "STANDARD",
        }
        if preemption_notice_duration is not None:
            scheduling["preemption-notice-duration"] = f"{preemption_notice_duration:g}s"
        self.tree: Tree = {
            "instance": {
                "attributes": {},
                "cpu-platform": "Intel Cascade Lake",
                "hostname": f"{instance}.{zone}.c.{project}.internal",
                "id": "4520031799277581759",
                "machine-type": f"projects/{project_number}/machineTypes/{machine_type}",
                "maintenance-event": "NONE",
                "name": instance,
                "preempted": "FALSE",
                "scheduling": scheduling,
                "service-accounts": {"default": dict(account), email: dict(account)},
                "zone": f"projects/{project_number}/zones/{zone}",
            },
            "project": {
                "attributes": {},
                "numeric-project-id": str(project_number),
                "project-id": project,
            },
            "universe": {"universe-domain": UNIVERSE_DOMAIN},
        }
        self.project = project
        self.zone = zone
        self.instance_name = instance
        self.generations: dict[str, int] = {}
        # Bumped by every change of the maintenance event (see `_set_maintenance`).
        self._maintenance_serial = 0
        self._maintenance_ends: float | None = None  # time.monotonic() of that return
        self.upcoming: dict[str, Any] | None = None
        self.upcoming_none = upcoming_none
        self.tokens_issued = 0
        self.id_tokens_issued = 0
        self.restarts = 0  # `restart()` calls

    # The metadata tree.

    def _node(self, path: str) -> Any:
        node: Any = self.tree
        for part in (p for p in path.split("/") if p):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def set_value(self, path: str, value: str) -> None:
        """Change one leaf; waiting long-polls on it (or a recursive parent) wake up."""
        with self.changed:
            parent, _, leaf = path.rpartition("/")
            node = self._node(parent)
            if not isinstance(node, dict) or isinstance(node.get(leaf), dict):
                raise SimError(f"no metadata key {path!r}", 404)
            if node.get(leaf) != value:
                node[leaf] = value
                self.generations[path] = self.generations.get(path, 0) + 1
            self.changed.notify_all()

    def value(self, path: str) -> Any:
        with self.lock:
            return self._node(path)

    def etag(self, path: str) -> str:
        """Changes whenever anything under `path` changes (a value set back to what it was
        gets a new ETag, as a real change)."""
        with self.lock:
            prefix = path.strip("/")
            generations = sorted(
                (key, gen)
                for key, gen in self.generations.items()
                if key == prefix or key.startswith(prefix + "/") or not prefix
            )
            if prefix == "instance/upcoming-maintenance" or prefix in ("instance", ""):
                generations.append(("upcoming", self.generations.get("upcoming", 0)))
            return _etag(prefix, self._node(prefix), generations)

    def restart(self) -> None:
        """The metadata server restarted (or another replica answers): it forgets the ETags
        it gave, its change counters start again from zero, so each key's ETag goes back to
        the one it had at boot for its value. A `last_etag` from before is unknown to it: a
        long-poll waiting with one, or sent with one after, answers at once with the current
        value and its new ETag. The values stay (a notice in force is still in force)."""
        with self.changed:
            self.generations.clear()
            self.restarts += 1
            self.changed.notify_all()

    # Control API.

    def control(self, request: SimRequest) -> SimResponse:
        """The shared control API, and `POST /_sim/restart` (`restart`)."""
        if request.path == CONTROL_PREFIX + "/restart" and request.method == "POST":
            self.restart()
            return SimResponse.json({"restarts": self.restarts})
        return super().control(request)

    def raise_notice(self, kind: str, fields: dict[str, Any]) -> str:
        if kind in NOTICE_FIELDS:
            refuse_unknown_fields(kind, fields, NOTICE_FIELDS[kind])
        if kind == "preempt":
            self.set_value("instance/preempted", "TRUE")
            return "preempted"
        if kind == "maintenance":
            value = self._maintenance_value(fields.get("type", "TERMINATE"))
            duration = fields.get("duration")
            self._set_maintenance(
                value, None if duration is None else _number(duration, "duration")
            )
            return "maintenance-event"
        if kind == "upcoming":
            self._set_upcoming(self._upcoming_document(fields))
            return "upcoming-maintenance"
        raise SimError(f"gcp: unknown notice kind {kind!r}; use {', '.join(self.notice_kinds)}")

    def check_notice(self, kind: str, fields: dict[str, Any]) -> None:
        if kind in NOTICE_FIELDS:
            refuse_unknown_fields(kind, fields, NOTICE_FIELDS[kind])
        if kind == "maintenance":
            self._maintenance_value(fields.get("type", "TERMINATE"))
            if fields.get("duration") is not None:
                _number(fields["duration"], "duration")
        elif kind == "upcoming":
            self._upcoming_document(fields)

    def change_notice(self, notice_id: str, fields: dict[str, Any]) -> None:
        if notice_id == "maintenance-event":
            self._change_maintenance(fields)
        elif notice_id == "upcoming-maintenance":
            self._change_upcoming(fields)
        else:
            raise SimError(f"notice {notice_id!r} cannot be changed", 405)

    def withdraw(self, notice_id: str) -> bool:
        with self.changed:
            if notice_id == "preempted" and self.value("instance/preempted") == "TRUE":
                self.set_value("instance/preempted", "FALSE")
                return True
            if notice_id == "maintenance-event" and self.value("instance/maintenance-event") != (
                "NONE"
            ):
                self.set_value("instance/maintenance-event", "NONE")
                return True
            if notice_id == "upcoming-maintenance" and self.upcoming is not None:
                self._set_upcoming(None)
                return True
        return False

    def state(self) -> dict[str, Any]:
        return {
            "preempted": self.value("instance/preempted"),
            "maintenance-event": self.value("instance/maintenance-event"),
            "upcoming-maintenance": self.upcoming,
            "etags": {
                key: self.etag(key) for key in ("instance/preempted", "instance/maintenance-event")
            },
            "tokens_issued": self.tokens_issued,
            "restarts": self.restarts,
            "id_tokens_issued": self.id_tokens_issued,
        }

    def _change_maintenance(self, fields: dict[str, Any]) -> None:
        """PATCH: the fields given change, the others stay (the type, and the return to NONE
        the event has coming); on NONE it raises an event, as POST does."""
        refuse_unknown_fields("maintenance", fields, NOTICE_FIELDS["maintenance"])
        with self.changed:
            current = str(self.value("instance/maintenance-event"))
            if current == "NONE":
                self.raise_notice("maintenance", fields)
                return
            value = self._maintenance_value(fields.get("type", current))
            if "duration" in fields:
                duration = (
                    None if fields["duration"] is None else _number(fields["duration"], "duration")
                )
            elif self._maintenance_ends is not None:
                duration = max(0.0, self._maintenance_ends - time.monotonic())
            else:
                duration = None
            self._set_maintenance(value, duration)

    def _set_maintenance(self, value: str, duration: float | None) -> None:
        """`instance/maintenance-event` = `value`, back to NONE `duration` seconds later. Each
        change replaces the return to NONE an earlier event had scheduled: that one ends its
        own event, never a later one."""
        with self.changed:
            self._maintenance_serial += 1
            serial = self._maintenance_serial
            self.set_value("instance/maintenance-event", value)
            self._maintenance_ends = None if duration is None else time.monotonic() + duration
        if duration is not None:
            self._return_to_none(serial, duration)

    def _return_to_none(self, serial: int, after: float) -> None:
        """End the event numbered `serial` (NONE) `after` seconds from now, unless another
        replaced it or it ended already (a return armed again on a restart of the server)."""

        def end() -> None:
            with self.changed:
                if self._maintenance_serial == serial and self._maintenance_ends is not None:
                    self._maintenance_ends = None
                    self.set_value("instance/maintenance-event", "NONE")

        self.later(after, end)

    def resumed(self) -> None:
        """The server (re)started: a stop cancelled the event's return to NONE with the
        scripts, and a test restarting the simulator mid-event never saw NONE again. The
        event ends when it was due to (at once, if that passed while the server was down)."""
        with self.changed:
            serial, ends = self._maintenance_serial, self._maintenance_ends
        if ends is not None:
            self._return_to_none(serial, max(0.0, ends - time.monotonic()))

    @staticmethod
    def _maintenance_value(kind: Any) -> str:
        if not isinstance(kind, str):
            raise SimError('maintenance "type" must be TERMINATE, MIGRATE or NONE')
        value = MAINTENANCE_TYPES.get(kind.upper().removesuffix("_ON_HOST_MAINTENANCE"))
        if value is None:
            raise SimError(f'maintenance "type" must be TERMINATE, MIGRATE or NONE, got {kind!r}')
        return value

    def _upcoming_document(self, fields: dict[str, Any]) -> dict[str, Any]:
        document = fields.get("document")
        if document is not None:
            if not isinstance(document, dict):
                raise SimError('upcoming "document" must be a JSON object')
            return document
        start: datetime = self.now() + timedelta(
            seconds=_number(fields.get("start_in", 7 * 86400), "start_in")
        )
        window = _number(fields.get("window", DEFAULT_WINDOW), "window")
        end = start + timedelta(seconds=window)
        return {
            "can_reschedule": yes_or_no(fields.get("can_reschedule", True), "can_reschedule"),
            "latest_window_start_time": format_time(start + timedelta(days=7)),
            "maintenance_reasons": _reasons(fields.get("maintenance_reasons", ["PLANNED_UPDATE"])),
            "maintenance_status": str(fields.get("maintenance_status", "PENDING")),
            "type": str(fields.get("type", "SCHEDULED")),
            "window_end_time": format_time(end),
            "window_start_time": format_time(start),
        }

    def _change_upcoming(self, fields: dict[str, Any]) -> None:
        """PATCH: the fields given change, the rest of the window stays; `start_in` moves the
        window, keeping its length unless `window` is given too. Without a window (or with a
        whole `document`) it raises one, as POST does."""
        with self.changed:
            if self.upcoming is None or "document" in fields:
                self.raise_notice("upcoming", fields)
                return
            refuse_unknown_fields("upcoming", fields, _UPCOMING_FIELDS)
            document = dict(self.upcoming)
            start = _document_time(document, "window_start_time")
            end = _document_time(document, "window_end_time")
            length = end - start if start and end else timedelta(seconds=DEFAULT_WINDOW)
            if "start_in" in fields:
                start = self.now() + timedelta(seconds=_number(fields["start_in"], "start_in"))
                document["window_start_time"] = format_time(start)
                # The latest the window may start, a reschedule included: a move keeps it,
                # unless it goes past it (Compute Engine would not show a start after it).
                latest = _document_time(document, "latest_window_start_time")
                if latest is not None and latest < start:
                    document["latest_window_start_time"] = format_time(start)
            if "window" in fields:
                length = timedelta(seconds=_number(fields["window"], "window"))
            if start is not None and ("start_in" in fields or "window" in fields):
                document["window_end_time"] = format_time(start + length)
            for key, convert in _UPCOMING_PLAIN.items():
                if key in fields:
                    document[key] = convert(fields[key])
            self._set_upcoming(document)

    def _set_upcoming(self, document: dict[str, Any] | None) -> None:
        with self.changed:
            self.upcoming = document
            self.generations["upcoming"] = self.generations.get("upcoming", 0) + 1
            self.changed.notify_all()

    # The metadata server.

    def handle(self, request: SimRequest) -> SimResponse:
        return _metadata_headers(self._answer(request))

    def error_page(self, status: int) -> SimResponse:
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
        return _metadata_headers(SimResponse(status, f"{phrase}\n", TEXT))

    def _answer(self, request: SimRequest) -> SimResponse:
        if request.header("X-Forwarded-For") is not None:
            return _forbidden(request, "Requests with X-Forwarded-For are not accepted.")
        if request.header(FLAVOR_HEADER) != "Google":
            return _forbidden(request, "Missing Metadata-Flavor:Google header.")
        if request.method not in ("GET", "HEAD", "POST"):
            return SimResponse(405, f"Method {request.method} not allowed.\n", TEXT)
        if request.path == "/":
            return SimResponse(200, "computeMetadata/\n", TEXT)
        if request.path in ("/computeMetadata", "/computeMetadata/"):
            return SimResponse(200, "v1/\n", TEXT)
        if request.path != METADATA_PREFIX and not request.path.startswith(METADATA_PREFIX + "/"):
            return _not_found(request)
        path = request.path[len(METADATA_PREFIX) :].strip("/")
        is_dir_request = request.path.endswith("/") or path == ""
        recursive = (request.param("recursive") or "").lower() == "true"
        wait = (request.param("wait_for_change") or "").lower() == "true"
        timeout_text = request.param("timeout_sec")
        timeout = MAX_WAIT
        if timeout_text is not None:
            if not (timeout_text.isascii() and timeout_text.isdigit()):
                return SimResponse(400, "timeout_sec must be a non-negative integer.\n", TEXT)
            timeout = min(float(timeout_text), MAX_WAIT)

        if _is_account_leaf(path, "token"):
            if wait:
                return SimResponse(400, "wait_for_change is not supported for tokens.\n", TEXT)
            return self._token()
        if _is_account_leaf(path, "identity"):
            if wait:
                return SimResponse(400, "wait_for_change is not supported for tokens.\n", TEXT)
            return self._id_token(request, path.split("/")[2])
        if path == "instance/upcoming-maintenance":
            if not wait:
                return self._upcoming_answer(request)
            self._wait(path, request.param("last_etag"), timeout)
            return self.after_wait(request, lambda: self._upcoming_answer(request))

        with self.lock:
            node = self._node(path)
        if node is None:
            return _not_found(request)
        if isinstance(node, dict) and wait and not recursive:
            return SimResponse(
                400,
                "Non-recursive wait_for_change on a directory is not supported.\n",
                TEXT,
            )
        if not wait:
            return self._value_answer(request, path, is_dir_request, recursive)
        self._wait(path, request.param("last_etag"), timeout)
        # A long-poll that ends during a fault answers with the fault.
        return self.after_wait(
            request, lambda: self._value_answer(request, path, is_dir_request, recursive)
        )

    def _value_answer(
        self, request: SimRequest, path: str, is_dir_request: bool, recursive: bool
    ) -> SimResponse:
        with self.lock:
            node = self._node(path)
            etag = self.etag(path)
            payload = json.loads(json.dumps(node))  # a snapshot taken under the lock
        if isinstance(payload, dict) and not is_dir_request and not recursive:
            return SimResponse(301, "", TEXT, {"Location": request.path + "/", "ETag": etag})
        return _render(payload, request, recursive, etag)

    def _wait(self, path: str, last_etag: str | None, timeout: float) -> None:
        """Block until the ETag of `path` differs from `last_etag` (at once if it already
        does), or `timeout` seconds pass."""
        deadline = time.monotonic() + timeout
        with self.changed:
            # Without last_etag the wait ends at the first change after it began.
            current = self.etag(path) if last_etag is None else last_etag
            while self.etag(path) == current:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self.changed.wait(remaining)

    def _token(self) -> SimResponse:
        with self.lock:
            self.tokens_issued += 1
            serial = self.tokens_issued
        return SimResponse.json(
            {
                "access_token": f"ya29.forewarn-simulated-token-{serial}",
                "expires_in": 3599,
                "token_type": "Bearer",
            }
        )

    def _id_token(self, request: SimRequest, account: str) -> SimResponse:
        """An ID token for `audience`: a JWT shaped as Google's (RS256 header, its claims,
        `google.compute_engine` with `format=full`). Its signature is not Google's: clients
        that verify against Google's keys refuse it, as they should off a real VM."""
        audience = request.param("audience")
        if not audience:
            return SimResponse(400, "non-empty audience parameter required\n", TEXT)
        with self.lock:
            accounts = self.tree["instance"]["service-accounts"]
            if account not in accounts:
                return _not_found(request)
            email = accounts[account]["email"]
            self.id_tokens_issued += 1
            serial = self.id_tokens_issued
        now = int(time.time())
        subject = "1" + str(int(hashlib.sha256(email.encode()).hexdigest(), 16))[:20]
        claims: dict[str, Any] = {
            "aud": audience,
            "azp": subject,
            "email": email,
            "email_verified": True,
            "exp": now + ID_TOKEN_LIFETIME,
            "iat": now,
            "iss": "https://accounts.google.com",
            "sub": subject,
        }
        if request.param("format") == "full":
            claims["google"] = {
                "compute_engine": {
                    "instance_creation_timestamp": int(self.started_at),
                    "instance_id": self.tree["instance"]["id"],
                    "instance_name": self.instance_name,
                    "project_id": self.project,
                    "project_number": int(self.tree["project"]["numeric-project-id"]),
                    "zone": self.zone,
                }
            }
        header = {"alg": "RS256", "kid": "forewarn-simulator", "typ": "JWT"}
        signature = hashlib.sha256(f"forewarn-sim-{serial}".encode()).digest()
        token = ".".join(
            [
                _b64(json.dumps(header).encode()),
                _b64(json.dumps(claims).encode()),
                _b64(signature * 8),
            ]
        )
        return SimResponse(200, token, TEXT)

    def _upcoming_answer(self, request: SimRequest) -> SimResponse:
        with self.lock:
            document = self.upcoming
            etag = self.etag("instance/upcoming-maintenance")
        headers = {"ETag": etag}
        if document is not None:
            return SimResponse(200, json.dumps(document), JSON, headers)
        form = self.upcoming_none
        if form == "404":
            return _not_found(request)
        if form == "503":
            return SimResponse(503, "Service Unavailable\n", TEXT, headers)
        if form == "none":
            return SimResponse(200, "NONE", TEXT, headers)
        if form == "error":
            error = {"error": "no notifications have been received yet, try again later"}
            return SimResponse(200, json.dumps(error), JSON, headers)
        return SimResponse(200, "{}", JSON, headers)


DEFAULT_WINDOW = 4 * 3600.0
# Fields of an `upcoming` notice copied into its document, and how.
_UPCOMING_PLAIN: dict[str, Callable[[Any], Any]] = {
    "can_reschedule": lambda value: yes_or_no(value, "can_reschedule"),
    "maintenance_reasons": lambda value: _reasons(value),
    "maintenance_status": str,
    "type": str,
}
_UPCOMING_FIELDS = ("start_in", "window", *_UPCOMING_PLAIN, "document")
# The fields of each notice kind (the control API's and --notice's).
NOTICE_FIELDS: dict[str, tuple[str, ...]] = {
    "preempt": (),
    "maintenance": ("type", "duration"),
    "upcoming": _UPCOMING_FIELDS,
}


def _reasons(value: Any) -> list[str]:
    """`maintenance_reasons`: a list of reasons, or one reason (as `--notice` can give it)."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise SimError(f"maintenance_reasons: expected a reason or a list of them, got {value!r}")
    return list(value)


def _document_time(document: dict[str, Any], key: str) -> datetime | None:
    try:
        return parse_time(str(document[key]))
    except (KeyError, ValueError):
        return None


def _is_account_leaf(path: str, leaf: str) -> bool:
    parts = path.split("/")
    return len(parts) == 4 and parts[:2] == ["instance", "service-accounts"] and parts[3] == leaf


def _metadata_headers(response: SimResponse) -> SimResponse:
    """The headers the metadata server puts on every answer (errors included)."""
    response.headers.setdefault(FLAVOR_HEADER, "Google")
    response.headers.setdefault("Server", SERVER)
    response.headers.setdefault("X-XSS-Protection", "0")
    if isinstance(response.body, (str, bytes)):
        body = response.body.encode() if isinstance(response.body, str) else response.body
        response.headers.setdefault("ETag", _etag("answer", body.decode("utf-8", "replace")))
    return response


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _render(payload: Any, request: SimRequest, recursive: bool, etag: str) -> SimResponse:
    alt = request.param("alt")
    headers = {"ETag": etag}
    if isinstance(payload, dict):
        if recursive:
            if alt == "text":
                return SimResponse(
                    200, "".join(f"{line}\n" for line in _as_text_lines(payload)), TEXT, headers
                )
            return SimResponse(200, json.dumps(_as_json(payload)), JSON, headers)
        names = [f"{key}/" if isinstance(value, dict) else key for key, value in payload.items()]
        if alt == "json":
            return SimResponse(200, json.dumps(names), JSON, headers)
        return SimResponse(200, "".join(f"{name}\n" for name in names), TEXT, headers)
    if alt == "json":
        return SimResponse(200, json.dumps(payload), JSON, headers)
    return SimResponse(200, _leaf_text(payload), TEXT, headers)


def _forbidden(request: SimRequest, why: str) -> SimResponse:
    return SimResponse(
        403,
        f"Your client does not have permission to get URL {request.path} from this server. {why}\n",
        TEXT,
    )


def _not_found(request: SimRequest) -> SimResponse:
    return SimResponse(
        404, f"The requested URL {request.path} was not found on this server.\n", TEXT
    )


def _number(value: Any, name: str) -> float:
    return seconds_field(value, name, MAX_LEAD)


# Command line and drills.


def make_simulator(**options: Any) -> GcpSimulator:
    """A simulator with no notices yet (the command line schedules its scripted ones)."""
    return GcpSimulator(**options)


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--project", default="forewarn-sim", help="project/project-id (default %(default)s)"
    )
    parser.add_argument(
        "--zone", default="us-central1-a", help="zone in instance/zone (default %(default)s)"
    )
    parser.add_argument(
        "--instance-name",
        dest="instance",
        default="forewarn-sim-vm",
        help="instance/name (default %(default)s)",
    )
    parser.add_argument(
        "--machine-type",
        type=_machine_type,
        default="a2-highgpu-1g",
        metavar="TYPE",
        help="instance/machine-type (default a2-highgpu-1g, with GPUs: the watcher gives "
        "TERMINATE_ON_HOST_MAINTENANCE an hour; a type without GPUs, e.g. n2-standard-8, 60s)",
    )
    parser.add_argument(
        "--preemptible",
        action="store_true",
        help="a Spot VM: scheduling/preemptible TRUE (its on-host-maintenance is TERMINATE)",
    )
    parser.add_argument(
        "--on-host-maintenance",
        choices=("MIGRATE", "TERMINATE"),
        default="TERMINATE",
        help="scheduling/on-host-maintenance (default TERMINATE, as on GPU VMs)",
    )
    parser.add_argument(
        "--preemption-notice-duration",
        type=duration_arg,
        metavar="S",
        help="report this preemption notice duration in instance/scheduling/",
    )
    parser.add_argument(
        "--maintenance-kind",
        choices=("TERMINATE", "MIGRATE"),
        help="the --maintenance-after event (default TERMINATE): TERMINATE_ON_HOST_MAINTENANCE "
        "or MIGRATE_ON_HOST_MAINTENANCE",
    )
    parser.add_argument(
        "--maintenance-duration",
        type=duration_arg,
        metavar="S",
        help="the --maintenance-after event returns to NONE S after it began",
    )
    parser.add_argument(
        "--upcoming-in",
        type=duration_arg,
        metavar="S",
        help="how long after it appears the --upcoming-after window starts (default 7d)",
    )
    parser.add_argument(
        "--upcoming-none",
        choices=UPCOMING_NONE_FORMS,
        default="empty",
        help="the answer of upcoming-maintenance when nothing is scheduled (default empty: {})",
    )


_MACHINE_TYPE = re.compile(r"^[a-z][a-z0-9-]{0,62}\Z")


def _machine_type(text: str) -> str:
    name = text.strip().lower()
    if not _MACHINE_TYPE.match(name):
        raise argparse.ArgumentTypeError(
            f"not a machine type name (such as n2-standard-8 or a2-highgpu-1g): {text!r}"
        )
    return name


COMMAND = SimulatorCommand(
    name="gcp",
    build=make_simulator,
    passes=(
        *("project", "zone", "instance", "machine_type", "preemptible", "on_host_maintenance"),
        *("preemption_notice_duration", "upcoming_none"),
    ),
    options=_options,
    scripted=(
        Scripted("preempt", "preempt", "preempted becomes TRUE after S"),
        Scripted(
            "maintenance",
            "maintenance",
            "maintenance-event changes after S",
            options={"type": "maintenance_kind", "duration": "maintenance_duration"},
        ),
        Scripted(
            "upcoming",
            "upcoming",
            "a window appears in upcoming-maintenance S after the start, to start "
            "--upcoming-in (default 7d) later: a window 1h out is "
            "--upcoming-after 0 --upcoming-in 1h",
            options={"start_in": "upcoming_in"},
        ),
    ),
    hints=lambda sim, url, args: [
        f"point the agent at it: FOREWARN_GCP_URL={url}",
        f"google-auth: GCE_METADATA_HOST={url.removeprefix('http://')} "
        f"GCE_METADATA_IP={url.removeprefix('http://')}",
    ],
)
add_arguments = COMMAND.add_arguments
run = COMMAND.run


def drill_script() -> dict[str, Any]:
    """How `forewarn drill local --provider gcp` raises a drain and a terminate."""
    return {
        "drain": ("maintenance", {"type": "TERMINATE"}),
        "terminate": ("preempt", {}),
        "env": {},
    }


__all__ = [
    "GcpSimulator",
    "add_arguments",
    "drill_script",
    "make_simulator",
    "run",
]
