"""Watch the GCE metadata server for preemption and host maintenance.

Two keys are long-polled concurrently (`instance/preempted`, `instance/maintenance-event`),
each with `wait_for_change=true`, the last ETag seen and `timeout_sec`, so a change is seen
within milliseconds and a change made between two long-polls is answered at once (its ETag
differs). `instance/upcoming-maintenance` has no long-poll worth trusting and is read slowly.

A notice the agent retired past its deadline plus a grace is forgotten (`forget`): the
next answer that still shows it raises it again. With `wait_for_change` that answer comes
when `timeout_sec` runs out, so a retired notice is back within one long-poll.

The parsers are pure functions of the response text; `GcpWatcher` owns the HTTP.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import httpx
from forewarn.protocol.fields import stable_id
from forewarn.protocol.oneline import quoted
from forewarn.protocol.timefmt import format_time, parse_duration, parse_time, utcnow
from forewarn.providers.report import Report

from ..base import Emit, ParseError, PollHealth, WatcherContext, stall_bound
from ..boot import boot_id
from ..errortext import error_text
from ..fetch import Answer, fetch
from ..skew import CLOCK_AHEAD, resume_skew, take_skew
from .active import ACTIVE_FILE, PENDING_FILE, ActiveNotices
from .settings import Settings
from .stopclock import StopClock

log = logging.getLogger("forewarn.providers.gcp")

PROVIDER = "gcp"
METADATA_PATH = "/computeMetadata/v1"
DEFAULT_HOST = "metadata.google.internal"
FLAVOR_HEADER = "Metadata-Flavor"
FLAVOR = "Google"
# What `status` names the metadata server as, in the `clock` condition.
SERVICE = "the metadata server"
# Seconds to connect to the metadata server.
CONNECT_SECONDS = 5.0

PREEMPTED_KEY = "instance/preempted"
MAINTENANCE_KEY = "instance/maintenance-event"
UPCOMING_KEY = "instance/upcoming-maintenance"
# Its notice's kind (`NoticeTrack`, `ActiveNotices`).
UPCOMING_KIND = "upcoming-maintenance"
SCHEDULING_DIR = "instance/scheduling/"
MACHINE_TYPE_KEY = "instance/machine-type"

# The notice `TERMINATE_ON_HOST_MAINTENANCE` gives: an hour on a VM with GPUs, 60 s on the
# others (Compute Engine's "Handle GPU host maintenance events" page).
GPU_MAINTENANCE_NOTICE = 3600.0
MAINTENANCE_NOTICE = 60.0
# Machine families whose types come with GPUs attached (accelerator-optimized).
_GPU_FAMILIES = ("a2", "a3", "a4", "a4x", "g2", "g4")
# Where an NVIDIA GPU shows on the host (N1 VMs get theirs attached, not by machine type).
NVIDIA_PATHS = (Path("/proc/driver/nvidia/gpus"), Path("/dev/nvidia0"))

MIGRATE = "MIGRATE_ON_HOST_MAINTENANCE"
TERMINATE = "TERMINATE_ON_HOST_MAINTENANCE"
MAINTENANCE_VALUES = ("NONE", MIGRATE, TERMINATE)
# A value Compute Engine may add later has the same shape; anything else is not an answer.
_MAINTENANCE_WORD = re.compile(r"^[A-Z][A-Z0-9_]{0,99}\Z")

# An upcoming-maintenance answer of 503 is retried this many times before it counts as
# "nothing scheduled": the server answers 503 for under a second during host maintenance,
# exactly when a scheduled window must not be cleared by mistake.
UPCOMING_503_ATTEMPTS = 3
# Reads of `instance/machine-type` before the VM is taken for one without GPUs.
GPU_READ_ATTEMPTS = 3
# Reads of `instance/scheduling/` before the policy and notice duration count as unknown.
SCHEDULING_READ_ATTEMPTS = 3


def metadata_root(url: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The metadata root, `<scheme>://<host>[:<port>]/computeMetadata/v1`.

    `url` (config `gcp.url`, `FOREWARN_GCP_URL`) wins; then `GCE_METADATA_HOST` (then its old
    name `GCE_METADATA_ROOT`), a `host[:port]` as Google's clients read it; then the real
    server's name. A URL may or may not already end in `/computeMetadata/v1`.
    """
    env = os.environ if environ is None else environ
    base = url or env.get("GCE_METADATA_HOST") or env.get("GCE_METADATA_ROOT") or DEFAULT_HOST
    base = base.strip().rstrip("/")
    if "://" not in base:
        base = f"http://{base}"
    if base.endswith(METADATA_PATH):
        base = base[: -len(METADATA_PATH)]
    return base + METADATA_PATH


# The error kind of an answer that is not the metadata server's (`not_the_server`).
FOREIGN = "not-metadata-server"


def not_the_server(key: str, response: Answer | httpx.Response) -> str | None:
    """What is wrong with `response` when it lacks `Metadata-Flavor: Google`, which the
    metadata server puts on every answer (contracts 2.1): then it comes from something else
    on the address (a proxy, a captive portal, another service), and its value is no notice
    and no end of one. None for the metadata server's own answer. Before, a `NONE` answered
    that way cleared a TERMINATE_ON_HOST_MAINTENANCE drain, and a `TRUE` was a preemption."""
    flavor = response.headers.get(FLAVOR_HEADER)
    if flavor == FLAVOR:
        return None
    said = "no Metadata-Flavor header" if flavor is None else f"Metadata-Flavor {flavor[:40]!r}"
    server = response.headers.get("Server")
    by = f" (Server: {server[:60]!r})" if server else ""
    return (
        f"{key}: HTTP {response.status_code} with {said}{by}: not the metadata server's "
        f"answer (it sends Metadata-Flavor: Google on every one); ignored"
    )


# Pure parsers: response text in, value out, ParseError on anything the contract forbids.


def parse_preempted(text: str) -> bool:
    """`instance/preempted`: `TRUE` or `FALSE`."""
    value = text.strip()
    if value == "TRUE":
        return True
    if value == "FALSE":
        return False
    raise ParseError(f"{PREEMPTED_KEY}: expected TRUE or FALSE, got {value[:80]!r}")


def parse_maintenance_event(text: str) -> str:
    """`instance/maintenance-event`: NONE, MIGRATE_ON_HOST_MAINTENANCE,
    TERMINATE_ON_HOST_MAINTENANCE, or another upper-case word (a value this code does not
    know yet, which `maintenance_report` drains on)."""
    value = text.strip()
    if value not in MAINTENANCE_VALUES and not _MAINTENANCE_WORD.match(value):
        raise ParseError(
            f"{MAINTENANCE_KEY}: expected one of {', '.join(MAINTENANCE_VALUES)}, "
            f"got {value[:80]!r}"
        )
    return value


@dataclass(frozen=True)
class UpcomingWindow:
    """A parsed `instance/upcoming-maintenance` answer that schedules something."""

    # `window_start_time`; None when the document names maintenance without a start that
    # reads as a time (an UNSCHEDULED one begun at once): coming, when unknown.
    start: datetime | None
    document: dict[str, Any]
    # `window_end_time`: the maintenance may begin at any moment until then. None when the
    # document has none, or one that does not parse or is not after the start.
    end: datetime | None = None


_WINDOW_START_KEYS = ("window_start_time", "windowStartTime")
_WINDOW_END_KEYS = ("window_end_time", "windowEndTime")
# What says, without a start, that maintenance is coming (contracts 2.5: the documented
# values, snake_case and the API's camelCase): a status, a type or a reason. A document of
# defaults (empty strings, false, an unspecified enum) says nothing, and stays unknown.
_STATUS_KEYS = ("maintenance_status", "maintenanceStatus")
_TYPE_KEYS = ("type",)
_REASON_KEYS = ("maintenance_reasons", "maintenanceReasons")
_MAINTENANCE_STATUSES = ("PENDING", "ONGOING")
_MAINTENANCE_TYPES = ("SCHEDULED", "UNSCHEDULED")


def parse_upcoming(text: str) -> UpcomingWindow | None:
    """`instance/upcoming-maintenance?alt=json`: a window, or None when nothing is scheduled.

    `{}`, an empty body, `NONE` (bare or JSON-quoted) and an error document
    (`{"error": ...}`) all mean nothing is scheduled. A document without a
    `window_start_time` (absent, null or empty) whose status (PENDING, ONGOING), type
    (SCHEDULED, UNSCHEDULED) or reasons say maintenance is coming is a window without a
    start: dropped as unparseable, an UNSCHEDULED maintenance begun at once raised nothing.
    A start that does not read as a time, or a document without a start that says nothing
    of the kind (defaults only), is a ParseError.
    """
    body = text.strip()
    if not body or body.upper() == "NONE":
        return None
    try:
        document = json.loads(body)
    # RecursionError: a body nested a few thousand deep, which escaped and crashed the
    # watcher at every poll.
    except (ValueError, RecursionError):
        raise ParseError(f"{UPCOMING_KEY}: not JSON: {body[:80]!r}") from None
    if document is None or document == {}:
        return None
    if isinstance(document, str) and document.strip().upper() in ("", "NONE"):
        return None
    if not isinstance(document, dict):
        raise ParseError(f"{UPCOMING_KEY}: expected a JSON object, got {body[:80]!r}")
    start_given = any(key in document for key in _WINDOW_START_KEYS)
    if not start_given and "error" in document:
        return None
    start = _window_start(document)
    if start is None and not _names_maintenance(document):
        raise ParseError(f"{UPCOMING_KEY}: no window_start_time in {body[:120]!r}")
    return UpcomingWindow(start, document, _window_end(document, start))


def _names_maintenance(document: dict[str, Any]) -> bool:
    """Whether a document without a start still says maintenance is coming."""

    def word(keys: tuple[str, ...]) -> str:
        value = next((document[k] for k in keys if k in document), None)
        return value.strip().upper() if isinstance(value, str) else ""

    def a_reason(value: object) -> bool:
        text = value.strip().upper() if isinstance(value, str) else ""
        return bool(text) and text != "UNKNOWN" and not text.endswith("UNSPECIFIED")

    reasons = next((document[k] for k in _REASON_KEYS if k in document), None)
    return (
        word(_STATUS_KEYS) in _MAINTENANCE_STATUSES
        or word(_TYPE_KEYS) in _MAINTENANCE_TYPES
        or any(a_reason(reason) for reason in (reasons if isinstance(reasons, list) else [reasons]))
    )


def unknown_upcoming_words(document: dict[str, Any]) -> list[str]:
    """The `maintenance_status` and `type` values of a window that are not documented
    (contracts 2.5), e.g. one Google adds later. The window still drains (the safe side);
    these are for a warning that says the agent guessed. Empty strings and unspecified
    enums are defaults, not news."""
    found = []
    for keys, known in ((_STATUS_KEYS, _MAINTENANCE_STATUSES), (_TYPE_KEYS, _MAINTENANCE_TYPES)):
        value = next((document[k] for k in keys if k in document), None)
        if value is None:
            continue
        word = value.strip().upper() if isinstance(value, str) else ""
        if word in known or (isinstance(value, str) and (not word or word.endswith("UNSPECIFIED"))):
            continue
        found.append(f"{keys[0]} {quoted(value)}")
    return found


def _window_start(document: dict[str, Any]) -> datetime | None:
    """The window's start; None when the document gives none (no key, null or empty). One
    given that does not read as a time is a ParseError: the answer is unknown, and a window
    reported before keeps its deadline rather than lose it to a garbled answer."""
    start_text = next((document[k] for k in _WINDOW_START_KEYS if k in document), None)
    if start_text is None or start_text == "":
        return None
    if not isinstance(start_text, str):
        raise ParseError(f"{UPCOMING_KEY}: window_start_time is not a time: {quoted(start_text)}")
    try:
        return parse_time(start_text)
    except (ValueError, OverflowError) as error:
        raise ParseError(f"{UPCOMING_KEY}: window_start_time: {error}") from None


def _window_end(document: dict[str, Any], start: datetime | None) -> datetime | None:
    """The window's end, read tolerantly: an end that cannot be read only loses the window
    (the notice is then retired past its start plus the grace, and raised again while shown)."""
    end_text = next((document[k] for k in _WINDOW_END_KEYS if k in document), None)
    if not isinstance(end_text, str):
        return None
    try:
        end = parse_time(end_text)
    except (ValueError, OverflowError):
        return None
    return end if start is None or end > start else None


_NOTICE_DURATION_KEYS = (
    "preemptionNoticeDuration",
    "preemption-notice-duration",
    "preemption_notice_duration",
)


def _scheduling_value(text: str, keys: tuple[str, ...]) -> Any:
    """The first of `keys` (the spellings the metadata server has used) in the scheduling
    document, or None when none is there."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):  # nested too deep: as parse_upcoming
        raise ParseError(f"{SCHEDULING_DIR}: not JSON: {text.strip()[:80]!r}") from None
    if not isinstance(document, dict):
        raise ParseError(f"{SCHEDULING_DIR}: expected a JSON object, got {text.strip()[:80]!r}")
    return next((document[k] for k in keys if k in document), None)


def parse_notice_duration(text: str) -> float | None:
    """The preemption notice duration in `instance/scheduling/?recursive=true&alt=json`, in
    seconds, or None when the VM reports none. Accepts seconds, a duration such as `120s`,
    or the API's `{"seconds": ..., "nanos": ...}`."""
    value = _scheduling_value(text, _NOTICE_DURATION_KEYS)
    if value is None:
        return None
    return _seconds(value)


_HOST_MAINTENANCE_KEYS = ("onHostMaintenance", "on-host-maintenance", "on_host_maintenance")


def parse_on_host_maintenance(text: str) -> str | None:
    """The VM's host maintenance policy in `instance/scheduling/?recursive=true&alt=json`
    (`MIGRATE` or `TERMINATE`), or None when the document does not say."""
    value = _scheduling_value(text, _HOST_MAINTENANCE_KEYS)
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip().upper()


def _seconds(value: Any) -> float:
    if isinstance(value, bool):
        raise ParseError(f"preemption notice duration: not a duration: {quoted(value)}")
    if isinstance(value, (int, float)):
        try:
            seconds = float(value)
        except OverflowError:
            # A whole number past a float (JSON reads 4,300 digits) ended the task reading
            # the scheduling document, and no line named the answer: out of range, below.
            seconds = math.inf
    elif isinstance(value, str):
        try:
            seconds = parse_duration(value)
        except ValueError as error:
            raise ParseError(f"preemption notice duration: {error}") from None
    elif isinstance(value, dict) and isinstance(value.get("seconds", 0), (int, str)):
        try:
            seconds = float(value.get("seconds", 0)) + float(value.get("nanos", 0)) / 1e9
        except OverflowError:
            seconds = math.inf  # out of range, below
        except (TypeError, ValueError):
            raise ParseError(
                f"preemption notice duration: not a duration: {quoted(value)}"
            ) from None
    else:
        raise ParseError(f"preemption notice duration: not a duration: {quoted(value)}")
    if not 0 <= seconds <= 86400:
        raise ParseError(f"preemption notice duration: out of range: {quoted(value)}")
    return seconds


# Mapping: parsed values to reports (ids are assigned by NoticeTrack).

_PENDING_ID = "gcp/pending"


def preemption_report(preempted: bool, notice_seconds: float, now: datetime) -> Report | None:
    """`preempted=TRUE` → terminate, deadline now + the notice; FALSE → nothing."""
    if not preempted:
        return None
    return Report(
        id=_PENDING_ID,
        action="terminate",
        reason="preemption",
        provider=PROVIDER,
        deadline=now + timedelta(seconds=notice_seconds),
        noticed_at=now,
        detail={"preempted": "TRUE"},
        deadline_on_boot_clock=True,  # counted from now, kept on the boot clock (`StopClock`)
    )


def gpu_machine_type(text: str) -> bool:
    """Whether `instance/machine-type` (`projects/<n>/machineTypes/a2-highgpu-1g`) names an
    accelerator-optimized type, one that comes with GPUs."""
    family = text.strip().rsplit("/", 1)[-1].split("-", 1)[0].lower()
    return family in _GPU_FAMILIES


def local_gpus(paths: tuple[Path, ...] = NVIDIA_PATHS) -> bool:
    """Whether this host shows an NVIDIA GPU (a device node, or a non-empty driver list)."""
    for path in paths:
        try:
            if path.is_dir():
                if any(path.iterdir()):
                    return True
            elif path.exists():
                return True
        except OSError:
            continue
    return False


def maintenance_report(
    value: str, settings: Settings, now: datetime, notice: float | None = None
) -> Report | None:
    """TERMINATE_… → drain with a deadline (`notice` seconds away; else the configured
    `maintenance_notice`, else an hour); MIGRATE_… → drain (or nothing); NONE → nothing;
    a value this code does not know → drain without deadline: maintenance is coming, what
    it does is unknown, so checkpoint and keep going, never exit on a guess."""
    if value == TERMINATE:
        seconds = notice or settings.maintenance_notice or GPU_MAINTENANCE_NOTICE
        deadline: datetime | None = now + timedelta(seconds=seconds)
    elif (value == MIGRATE and settings.migrate == "drain") or value not in MAINTENANCE_VALUES:
        deadline = None
    else:
        return None
    return Report(
        id=_PENDING_ID,
        action="drain",
        reason="host-maintenance",
        provider=PROVIDER,
        deadline=deadline,
        noticed_at=now,
        detail={"maintenance-event": value},
        deadline_on_boot_clock=deadline is not None,  # kept on the boot clock (`StopClock`)
    )


def keep_stop(report: Report | None, standing: Report | None, now: datetime) -> Report | None:
    """`report` (from `maintenance_report`) with the deadline of the maintenance notice in
    force, `standing`, where that is earlier and still to come. After
    TERMINATE_ON_HOST_MAINTENANCE a value not known does not call the stop off: re-sent
    without its deadline, the drain was never escalated and the job trained on into the stop.
    Nor does TERMINATE shown again move the stop an hour later. Only
    MIGRATE_ON_HOST_MAINTENANCE (a live migration instead, known to keep the VM running) and
    NONE end the deadline; one already past (the VM was not stopped, the agent retired the
    notice) makes no new value a terminate at once."""
    deadline = standing.deadline if standing is not None else None
    if report is None or deadline is None or deadline <= now:
        return report
    if report.detail.get("maintenance-event") == MIGRATE:
        return report
    if report.deadline is not None and report.deadline <= deadline:
        return report
    return report.model_copy(update={"deadline": deadline})


def on_this_clock(window: UpcomingWindow, ahead: timedelta) -> UpcomingWindow:
    """`window` with its start and end as this VM's clock reads them, `ahead` of Google's: the
    board and the job time them by this clock. The skew goes in the detail (CLOCK_AHEAD),
    beside the times as written."""
    if not ahead:
        return window
    try:
        start = window.start + ahead if window.start is not None else None
        end = window.end + ahead if window.end is not None else None
    except OverflowError:  # a clock off by centuries: left as written
        return window
    document = {**window.document, CLOCK_AHEAD: ahead.total_seconds()}
    return replace(window, start=start, end=end, document=document)


def _saved_window_end(saved: Report | None) -> datetime | None:
    """The end of the upcoming window of a saved notice: its `until`, or, on a VM that
    live-migrates (no `until`), its document's `window_end_time`; None when it has none."""
    if saved is None:
        return None
    if saved.until is not None:
        return saved.until
    try:
        window = parse_upcoming(json.dumps(saved.detail))
    except ParseError:
        return None
    return None if window is None else window.end


def upcoming_report(
    window: UpcomingWindow | None, now: datetime, *, live_migrates: bool = False
) -> Report | None:
    """A scheduled window → drain with its start as the deadline, or now if it is already
    ONGOING before its start; on a VM that live-migrates (host maintenance policy MIGRATE), a
    drain without deadline: the VM keeps running through the window, and a deadline would
    make the board end the run at its start.

    The window's end is the report's `until`: the maintenance may begin at any moment until
    then, so the agent keeps the notice (a terminate once the start is near) through the
    window instead of retiring it past its start plus the grace and raising it again at the
    next read, a clear in the middle of the window at every grace."""
    if window is None:
        return None
    # Without a start, maintenance is coming at a time not known: checkpoint and keep going,
    # never exit on a guess (as for a maintenance-event value not known).
    deadline = window.start
    if _ongoing(window.document):
        # Begun before its window (Google, or the user's `perform-maintenance`): started
        # means now, and a drain toward the old start kept the job training into the stop.
        # Only a change of the answer is re-sent, so this `now` stays put while it shows.
        deadline = now if deadline is None else min(deadline, now)
    return Report(
        id=_PENDING_ID,
        action="drain",
        reason="scheduled-maintenance",
        provider=PROVIDER,
        deadline=None if live_migrates else deadline,
        noticed_at=now,
        detail=window.document,
        until=None if live_migrates else window.end,
    )


def _ongoing(document: dict[str, Any]) -> bool:
    status = document.get("maintenance_status", document.get("maintenanceStatus"))
    return isinstance(status, str) and status.strip().upper() == "ONGOING"


class NoticeTrack:
    """One provider notice over many answers: a notice gets its id when it appears, keeps it
    while repeated answers say the same (or change it), and is cleared under that id when
    the answers say it is gone. With `active`, the notice in force survives agent restarts
    (the watcher writes it with `active.save()` after the emit)."""

    def __init__(self, kind: str, active: ActiveNotices | None = None) -> None:
        self.kind = kind
        self.active_notices = active
        self.active: Report | None = None
        # The notice in force when the agent last stopped, until the first answer settles it.
        self.saved: Report | None = active.get(kind) if active is not None else None
        self.answered = False  # an answer was observed since the watcher started
        # The ids of the notices this track cleared since the watcher started (`_new_id`).
        self._ended: set[str] = set()

    def observe(
        self, report: Report | None, detail: dict[str, Any], token: str | None = None
    ) -> Report | None:
        """The report to emit for this answer, or None when nothing changed.

        `detail` is the answer as received (used for a clear); `token` (the ETag) goes into
        a new notice's id with the time it was first seen, so a notice that ends and comes
        back gets a new id.
        """
        saved, self.saved = self.saved, None
        first, self.answered = not self.answered, True
        if report is None:
            ended = self.active or saved
            if ended is None:
                return None
            self._ended.add(ended.id)
            self.active = None
            self._keep(None)
            return Report(
                id=ended.id,
                action="clear",
                reason=ended.reason,
                provider=ended.provider,
                detail=detail,
            )
        if self.active is None:
            # Replaced, yet with the saved stop's deadline (earlier, and still to come): nothing
            # is learned, and the saved notice stands (no re-send to every job).
            replaced = (
                first
                and self._replaced(token)
                and (saved is None or report.deadline != saved.deadline)
            )
            if saved is not None and saved.detail == report.detail and not replaced:
                # Still in force from before the restart: same id, first-seen time, deadline.
                self.active = saved
            elif saved is not None:
                # Changed while the agent was down: the same notice, as when seen to change.
                # Shown again under another ETag, the event ended and another came: the saved
                # stop's deadline, past, was a terminate at once for a stop still ahead (the
                # caller keeps the saved one where it is earlier and still to come).
                self.active = report.model_copy(update={"id": saved.id})
            else:
                self.active = report.model_copy(update={"id": self._new_id(report, token)})
            self._keep(self.active, token)
            return self.active
        if report.detail == self.active.detail:
            return None
        self.active = report.model_copy(update={"id": self.active.id})
        self._keep(self.active, token)
        return self.active

    def _replaced(self, token: str | None) -> bool:
        """Whether the answer's ETag says the saved notice's event ended and another came
        while the agent was down (a server whose ETag changes at each change). Asked at the
        first answer after a start only: a notice the agent retired (`forget`) and shown
        again was watched throughout, and keeps its deadline. Not for a
        preemption: it comes once in a boot, and a server giving the same value a new ETag at
        every answer would have moved its deadline later at each restart."""
        if self.kind == "preempted" or token is None or self.active_notices is None:
            return False
        saved_token = self.active_notices.etags.get(self.kind)
        return saved_token is not None and saved_token != token

    def _new_id(self, report: Report, token: str | None) -> str:
        """The id of a notice appearing: a function of the provider's own data (the kind,
        this boot, the ETag and the answer, `_identity`), so an agent restarted without the
        notice saved (killed between the publish and the write of `gcp-notices.json`, which
        comes after it: a slow state disk must never hold a notice back) makes the same id
        again. Before, the id hashed the time it was first seen: such a restart raised the
        same maintenance under a second id, and a raw subscriber held both. The same answer
        again after this track cleared it (a server whose ETag is the value's shows each live
        migration alike) is another notice: its id takes the time it was seen too."""
        payload: dict[str, Any] = {
            "boot": boot_id(),
            # A preemption comes once in a boot and is never withdrawn: the boot says which
            # it is. With the ETag, a server giving the same value a new one at every answer
            # made a restarted agent's first answer another preemption under another id.
            "token": None if self.kind == "preempted" else token,
            "detail": _identity(report.detail),
        }
        notice_id = stable_id(PROVIDER, self.kind, payload)
        if notice_id in self._ended:
            payload["seen"] = format_time(report.noticed_at)
            notice_id = stable_id(PROVIDER, self.kind, payload)
        return notice_id

    def redate(self, deadline: datetime) -> Report:
        """The notice in force with `deadline`, kept (the wall clock was stepped since it was
        set: the same stop, at another reading of the wall clock)."""
        assert self.active is not None
        self.active = self.active.model_copy(update={"deadline": deadline})
        self._keep(self.active)
        return self.active

    def stand(self) -> Report | None:
        """An answer that does not show the notice in force but does not end it either (a
        preemption read FALSE after TRUE). At the first answer after a restart, the notice
        saved before it is reported as still in force (same id, time and deadline), as
        `observe` does for one shown again; otherwise nothing is said."""
        first, self.answered = not self.answered, True
        if not first or self.active is not None or self.saved is None:
            return None
        self.active, self.saved = self.saved, None
        self._keep(self.active)
        return self.active

    def forget(self, notice_id: str) -> bool:
        """The agent retired this notice (past its deadline plus a grace): the next answer
        that still shows it raises it again, with its id and deadline. True if it was ours."""
        if self.active is None or self.active.id != notice_id:
            return False
        self.saved, self.active = self.active, None
        return True

    def _keep(self, report: Report | None, token: str | None = None) -> None:
        if self.active_notices is not None:
            self.active_notices.keep(self.kind, report, token)


# What an answer may say of a notice without making it another: a window begun (PENDING ->
# ONGOING) is the same window, and the skew is this VM's clock's, taken afresh at a restart.
_NOT_IDENTITY = frozenset({*_STATUS_KEYS, CLOCK_AHEAD})


def _identity(detail: dict[str, Any]) -> dict[str, Any]:
    """The part of a notice's detail that says which notice it is (`NoticeTrack._new_id`)."""
    return {key: value for key, value in detail.items() if key not in _NOT_IDENTITY}


def on_boot_clock(report: Report | None) -> Report | None:
    """`report`, a stop (a preemption, a maintenance stop) as emitted, marked as kept on the
    boot clock by this watcher (`StopClock`): the agent then keeps it there between reports
    too. The reports made here are marked as made; one saved by an older agent, or the
    agent's handed back after a restart (`restored`), is marked as it goes out. Without the
    mark the agent took the stop for an absolute time, which a step of the wall clock brings
    nearer: 90 minutes forward, the hour's drain was past and cleared at once, then raised
    again by this watcher at its next answer with the deadline moved; some 60 minutes
    forward, a terminate an hour before the stop."""
    if report is None or report.action == "clear" or report.deadline is None:
        return report
    # Not a flag file's duration (an agent's notice handed back after a restart may say so):
    # on a duration the agent's deadline wins over the watcher's, here the watcher's does.
    return report.model_copy(update={"deadline_on_boot_clock": True, "deadline_is_duration": False})


@dataclass(frozen=True)
class _Answer:
    text: str
    etag: str | None


class GcpWatcher:
    """Long-polls `instance/preempted` and `instance/maintenance-event`, reads
    `instance/upcoming-maintenance` every `upcoming_interval` seconds."""

    name: ClassVar[str] = PROVIDER

    def __init__(
        self,
        settings: Settings,
        context: WatcherContext | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        # How long a stop of the agent waits for a preemption in flight (`Settings.stop_listen`).
        self.stop_listen = settings.stop_listen
        self.root = metadata_root(settings.url, environ)
        self.health = context.health if context is not None else PollHealth(PROVIDER)
        self.active = ActiveNotices(
            Path(context.state_dir) / ACTIVE_FILE if context is not None else None,
            self.health,
            Path(context.runtime_dir) / PENDING_FILE if context is not None else None,
        )
        self.tracks = {
            kind: NoticeTrack(kind, self.active)
            for kind in ("preempted", "maintenance-event", "upcoming-maintenance")
        }
        # The VM's preemption notice duration as the metadata server reports it, if it does.
        self.reported_notice_duration: float | None = None
        # The VM's host maintenance policy (MIGRATE, TERMINATE), None until read or unknown.
        self.on_host_maintenance: str | None = None
        # Whether the VM has GPUs (an hour's maintenance notice), None until read or unknown.
        self.has_gpus: bool | None = None
        self._scheduling_read = asyncio.Event()
        self._unknown_values: set[str] = set()  # maintenance-event values logged as unknown
        self._unknown_upcoming: set[str] = set()  # upcoming status/type values logged so
        # The stop announced by each long-polled key, on the boot clock: its deadline follows
        # a step of the wall clock (`stopclock.py`).
        # A stop restored (this boot's) keeps the boot clock's reading saved with it: a step
        # of the wall clock while the agent was down moves its deadline too.
        self._stops = {}
        for kind in ("preempted", "maintenance-event"):
            saved = self.tracks[kind].saved
            self._stops[kind] = StopClock(
                saved.deadline if saved is not None else None, self.active.boot_deadlines.get(kind)
            )
        # `preempted` read TRUE in this boot: the VM is going down, whatever is read later.
        # A preemption saved before a restart is this boot's (`ActiveNotices` restores no
        # other boot's), so it counts as read.
        self.preempted_seen = self.tracks["preempted"].saved is not None
        self._unpreempted_logged = False
        # How far this VM's clock is ahead of Google's, by the upcoming-maintenance answers'
        # Date (`skew.py`): zero within TRUSTED_SKEW. A window goes out moved by it. From the
        # one saved, until an answer says: read afresh from zero, a second or a few off it
        # made the saved window one changed while the agent was down, sent again.
        self._ahead = timedelta(0)
        self._resume_skew()
        self._failing: set[str] = set()  # keys whose last answer was an error (see `_good`)
        # How this VM last said "nothing scheduled" on upcoming-maintenance: 503 (a run of
        # them, the server answering other keys) or another form (`{}`, 404, NONE, an error
        # document); None before any. On a VM that says it otherwise, 503s are no answer.
        # Saved with the window, for a restart while it stands (it says "nothing" no more).
        self._none_by_503: bool | None = self.active.none_by_503.get(UPCOMING_KIND)
        # The end of the window last read (`UpcomingWindow.end`), None without one; after a
        # restart, the saved window's.
        self._window_end: datetime | None = _saved_window_end(self.active.get(UPCOMING_KIND))
        self._no_etag: set[str] = set()  # long-polled keys whose last answer had no ETag
        # Made with the watcher, not at its first request: the client's SSL context took over
        # a second of a loaded machine inside `detect()`, and `--provider auto` runs every
        # probe on one loop, so it spent each provider's detection budget (AWS went unpicked).
        self._client: httpx.AsyncClient | None = self._new_client()

    def _new_client(self) -> httpx.AsyncClient:
        read = self.settings.timeout_sec + self.settings.read_timeout_margin
        return httpx.AsyncClient(
            headers={FLAVOR_HEADER: FLAVOR},
            timeout=httpx.Timeout(CONNECT_SECONDS, read=read),
            trust_env=False,  # the metadata server is link-local: never through a proxy
        )

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = self._new_client()  # again after a close
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def url(self, key: str) -> str:
        return f"{self.root}/{key}"

    def progress_bound(self) -> float | None:
        """A long-poll (`timeout_sec` and its read margin, after a connect) and the retry
        delay after one that failed: every long-poll answers or fails within that."""
        s = self.settings
        return stall_bound(s.retry_delay, s.timeout_sec + s.read_timeout_margin + CONNECT_SECONDS)

    async def detect(self) -> bool:
        """True when the root answers with `Metadata-Flavor: Google` within one second."""
        try:
            response = await fetch(self.client, "GET", self.root + "/", deadline=1.0, timeout=1.0)
        except (asyncio.TimeoutError, httpx.HTTPError, OSError):
            return False
        return response.headers.get(FLAVOR_HEADER) == FLAVOR

    def preemption_notice_seconds(self) -> float:
        """The VM's notice duration (as reported, else as configured) when above 0, else
        the plain `preemption_notice`."""
        duration = self.reported_notice_duration
        if duration is None:
            duration = self.settings.preemption_notice_duration
        return duration if duration else self.settings.preemption_notice

    def maintenance_notice_seconds(self) -> float:
        """The notice of `TERMINATE_ON_HOST_MAINTENANCE`: as configured, else an hour on a VM
        with GPUs and 60 s on the others, or when it is not known (the safe side)."""
        if self.settings.maintenance_notice is not None:
            return self.settings.maintenance_notice
        return GPU_MAINTENANCE_NOTICE if self.has_gpus else MAINTENANCE_NOTICE

    async def watch(self, emit: Emit) -> None:
        loops = [self._watch_preempted(emit), self._watch_maintenance(emit)]
        if self.settings.upcoming_interval > 0:
            loops.append(self._watch_upcoming(emit))
        await asyncio.gather(*loops)

    @property
    def answered(self) -> bool:
        """Every key watched answered once: a notice from before an agent restart that none
        reported again is gone (until then the agent keeps it)."""
        watched = ["preempted", "maintenance-event"]
        if self.settings.upcoming_interval > 0:
            watched.append("upcoming-maintenance")
        return all(self.tracks[kind].answered for kind in watched)

    def restored(self, reports: list[Report]) -> None:
        """The agent's notices of this provider restored after a restart (`RestoreAware`).
        Each kind this watcher's own file restored nothing for takes up the agent's notice of
        that kind as saved: a file not written (a full disk, where the agent's state was
        saved from its reserve) or lost made the first answer a new notice, a second drain
        under another id with its deadline an hour after the restart instead of the notice,
        and the agent cleared the one it restored. Its deadline is taken as it stands (no
        reading of the boot clock comes with it)."""
        for report in reports:
            provider, _, rest = report.id.partition("/")
            kind = rest.partition("/")[0]
            track = self.tracks.get(kind)
            if provider != PROVIDER or track is None or report.action == "clear":
                continue
            if track.saved is not None or track.active is not None or track.answered:
                continue
            track.saved = report
            if kind == "preempted":
                self.preempted_seen = True  # this boot's: the agent restores no other boot's
            if kind in self._stops:
                self._stops[kind] = StopClock(report.deadline, None)
        self._resume_skew()

    def _resume_skew(self) -> None:
        """Start from the skew the window saved before a restart went out with
        (`resume_skew`), until an answer of upcoming-maintenance takes it from its `Date`."""
        track = self.tracks["upcoming-maintenance"]
        if not track.answered and track.saved is not None:
            self._ahead = resume_skew([track.saved], self.health, SERVICE)

    def forget(self, notice_id: str) -> None:
        """The agent retired `notice_id` past its deadline plus a grace: an answer that still
        shows the notice raises it again (a preempted VM stays preempted until it stops)."""
        for track in self.tracks.values():
            if track.forget(notice_id):
                # At every grace while it is shown: the agent says once that it is overdue.
                log.debug(
                    "gcp: %s past its end; reported again while the server still shows it",
                    notice_id,
                )

    async def _watch_preempted(self, emit: Emit) -> None:
        first_try = asyncio.Event()
        reading = asyncio.create_task(self._read_scheduling(first_try))
        try:
            # The first try only: more (after a 503 at boot) must not hold back a preemption,
            # which until the duration is known has the plain notice, the safe side.
            await first_try.wait()
            await self._watch_preemption(emit)
        finally:
            reading.cancel()

    async def _watch_preemption(self, emit: Emit) -> None:
        track = self.tracks["preempted"]

        def on_answer(answer: _Answer) -> Report | None:
            preempted = parse_preempted(answer.text)
            if preempted:
                self.preempted_seen = True
            elif self.preempted_seen:
                # Compute Engine never withdraws a preemption: a FALSE after TRUE in the same
                # boot (a metadata server answering from a reset state) was a clear, and
                # jobs went back to training until the VM stopped under them; after an agent
                # restart too. A VM stopped by its preemption and started again is in another
                # boot, whose agent does not restore the saved notice.
                if not self._unpreempted_logged:
                    self._unpreempted_logged = True
                    log.warning(
                        "gcp: %s went back to FALSE after TRUE; a preemption is not "
                        "withdrawn, the terminate stands",
                        PREEMPTED_KEY,
                    )
                # The terminate standing keeps to the boot clock too: after a restart its
                # deadline is the saved one, a step of the wall clock since not yet followed.
                stood = track.stand()
                return on_boot_clock(self._follow_the_clock(track, utcnow()) or stood)
            now = utcnow()
            report = preemption_report(preempted, self.preemption_notice_seconds(), now)
            observed = track.observe(report, {"preempted": answer.text.strip()}, answer.etag)
            return on_boot_clock(self._follow_the_clock(track, now) or observed)

        await self._long_poll(PREEMPTED_KEY, on_answer, emit)

    async def _watch_maintenance(self, emit: Emit) -> None:
        track = self.tracks["maintenance-event"]
        # The deadline of TERMINATE_ON_HOST_MAINTENANCE depends on whether the VM has GPUs.
        # Read here, not with the scheduling: the preemption long-poll must not wait for it.
        if self.settings.maintenance_notice is None:
            await self._read_gpus()

        def on_answer(answer: _Answer) -> Report | None:
            value = parse_maintenance_event(answer.text)
            now = utcnow()
            report = maintenance_report(
                value, self.settings, now, self.maintenance_notice_seconds()
            )
            report = keep_stop(report, track.active or track.saved, now)
            if value not in MAINTENANCE_VALUES and value not in self._unknown_values:
                self._unknown_values.add(value)
                kept = report.deadline if report is not None else None
                log.warning(
                    "gcp: %s is %s, a value this agent does not know: published as a drain %s",
                    MAINTENANCE_KEY,
                    value,
                    "without deadline"
                    if kept is None
                    else f"keeping the deadline {format_time(kept)} given before",
                )
            observed = track.observe(report, {"maintenance-event": value}, answer.etag)
            return on_boot_clock(self._follow_the_clock(track, now) or observed)

        await self._long_poll(MAINTENANCE_KEY, on_answer, emit)

    def _follow_the_clock(self, track: NoticeTrack, now: datetime) -> Report | None:
        """The notice of `track` in force (a preemption, a maintenance stop), its deadline
        moved with a step of the wall clock since it was set (same id, to be sent again);
        None when there was no step."""
        active = track.active
        stop = self._stops[track.kind]
        moved = stop.follow(active.deadline if active is not None else None, now)
        self.active.keep_boot_deadline(track.kind, stop.at)
        if active is None or moved is None:
            return None
        log.warning(
            "gcp: the wall clock was stepped by %+.0fs since %s was read; the deadline of %s "
            "moves to %s, an unchanged time from the notice",
            (moved - active.deadline).total_seconds() if active.deadline is not None else 0.0,
            track.kind,
            active.id,
            format_time(moved),
        )
        return track.redate(moved)

    async def _read_scheduling(self, first_try: asyncio.Event) -> None:
        """Best effort, once: the VM's preemption notice duration, if the server reports it,
        and its host maintenance policy (three attempts: a 503 at boot must not leave a VM
        that live-migrates with a deadline at every maintenance window). `first_try` is set
        once the first attempt is over."""
        try:
            for attempt in range(1, SCHEDULING_READ_ATTEMPTS + 1):
                try:
                    response = await fetch(
                        self.client,
                        "GET",
                        self.url(SCHEDULING_DIR),
                        params={"recursive": "true", "alt": "json"},
                        deadline=2.0,
                    )
                    foreign = not_the_server(SCHEDULING_DIR, response)
                    if response.status_code == 200 and foreign is None:
                        self.on_host_maintenance = parse_on_host_maintenance(response.text)
                        self.reported_notice_duration = parse_notice_duration(response.text)
                        return
                    problem = foreign or f"HTTP {response.status_code}"
                except httpx.HTTPError as error:
                    problem = error_text(error)
                except ParseError as error:
                    self.health.error("scheduling", f"{SCHEDULING_DIR}: {error}")
                    return
                self.health.error("scheduling", f"{SCHEDULING_DIR}: {problem}")
                first_try.set()
                if attempt < SCHEDULING_READ_ATTEMPTS:
                    await asyncio.sleep(self.settings.retry_delay)
        finally:
            first_try.set()
            self._scheduling_read.set()

    async def _read_gpus(self) -> None:
        """Best effort, once: whether the VM has GPUs, from the host or the machine type
        (three attempts: a 503 at boot must not cost a GPU VM its hour)."""
        if local_gpus():
            self.has_gpus = True
            return
        for attempt in range(1, GPU_READ_ATTEMPTS + 1):
            try:
                response = await fetch(self.client, "GET", self.url(MACHINE_TYPE_KEY), deadline=2.0)
                foreign = not_the_server(MACHINE_TYPE_KEY, response)
                if response.status_code == 200 and foreign is None:
                    self.has_gpus = gpu_machine_type(response.text)
                    return
                problem = foreign or f"HTTP {response.status_code}"
            except httpx.HTTPError as error:
                problem = error_text(error)
            self.health.error("machine-type", f"{MACHINE_TYPE_KEY}: {problem}")
            if attempt < GPU_READ_ATTEMPTS:
                await asyncio.sleep(self.settings.retry_delay)

    def _upcoming(self, window: UpcomingWindow | None) -> Report | None:
        # Unknown policy: keep the deadline (the safe side, as before the policy was read).
        live_migrates = self.on_host_maintenance == "MIGRATE"
        if live_migrates and self.settings.migrate == "ignore":
            return None
        return upcoming_report(window, utcnow(), live_migrates=live_migrates)

    async def _long_poll(
        self, key: str, on_answer: Callable[[_Answer], Report | None], emit: Emit
    ) -> None:
        # "0" is never a real ETag, so the first call answers at once with value and ETag.
        etag = "0"
        params = {"wait_for_change": "true", "timeout_sec": str(self.settings.timeout_sec)}
        loop = asyncio.get_running_loop()
        last_text: str | None = None  # the value of the last answer read well
        renewed = False  # the last answer was the value held, at once, under a new ETag
        while True:
            asked = loop.time()
            answer = await self._get(key, {**params, "last_etag": etag})
            if answer is None:
                await asyncio.sleep(self.settings.retry_delay)
                continue
            # (An answer without an ETag is paced below, once.)
            same_etag = answer.etag == etag
            unchanged = same_etag or (bool(answer.etag) and answer.text == last_text)
            at_once = loop.time() - asked < self.settings.timeout_sec / 2
            if unchanged and at_once and (same_etag or renewed):
                # Unchanged, and well before timeout_sec: this server ignores the wait, or
                # gives the same value a new ETag at every answer (which made every request
                # return at once, a tight loop). Pace the requests instead of hammering it.
                # One such answer under a new ETag is not paced: it is also what a value
                # changed and changed back between two long-polls looks like (two flips of
                # maintenance-event while the agent wrote its state file), after which
                # the next long-poll waits; paced, a TERMINATE made during the pause was
                # published retry_delay late, again and again under load.
                await asyncio.sleep(self.settings.retry_delay)
            renewed = unchanged and at_once and not same_etag
            try:
                report = on_answer(answer)
            except ParseError as error:
                self._bad(key, "parse", str(error))
                await asyncio.sleep(self.settings.retry_delay)
                continue
            self._good(key)
            last_text = answer.text
            # Before the emit, on the runtime directory (a tmpfs): a kill before the state
            # file is written loses neither when the notice was seen nor its deadline.
            self.active.save_pending()
            if report is not None:
                emit(report)
            # After the emit: a state directory that cannot be written loses no notice.
            self.active.save()
            if answer.etag:
                etag = answer.etag
                self._no_etag.discard(key)
                if not self._no_etag:
                    self.health.condition("no-etag", None)
            else:
                # Without an ETag every wait would answer at once: poll instead of spinning.
                # A standing condition, not an error at every answer (the answer is good).
                if not self._no_etag:
                    message = (
                        f"{key}: answers without an ETag; each key is read every "
                        f"{self.settings.retry_delay:g}s instead of long-polled"
                    )
                    log.warning("gcp: %s", message)
                    self.health.condition("no-etag", message)
                self._no_etag.add(key)
                await asyncio.sleep(self.settings.retry_delay)

    async def _get(self, key: str, params: dict[str, str]) -> _Answer | None:
        """One request; None (after counting the error) on anything but a 200."""
        # The whole answer, not each read, is bounded: a server dribbling one byte a second
        # must not hold a long-poll past the preemption window.
        limit = self.settings.timeout_sec + self.settings.read_timeout_margin
        try:
            response = await fetch(self.client, "GET", self.url(key), params=params, deadline=limit)
        except httpx.TimeoutException:
            self._bad(key, "timeout", f"{key}: no complete answer within {limit:g}s")
            return None
        except httpx.HTTPError as error:
            self._bad(key, "transport", f"{key}: {error_text(error)}")
            return None
        foreign = not_the_server(key, response)
        if response.status_code != 200:
            # A 503 stays `unavailable` (it may be a proxy's, and a retry is what to do);
            # another error without the header is said to come from something else (a
            # gcp.url on another web server read "HTTP 404" and no more).
            kind = "unavailable" if response.status_code == 503 else f"http-{response.status_code}"
            if foreign is not None and response.status_code != 503:
                self._bad(key, FOREIGN, foreign)
            else:
                self._bad(key, kind, f"{key}: HTTP {response.status_code}")
            return None
        if foreign is not None:
            self._bad(key, FOREIGN, foreign)
            return None
        return _Answer(response.text, response.headers.get("ETag"))

    async def _watch_upcoming(self, emit: Emit) -> None:
        track = self.tracks["upcoming-maintenance"]
        await self._scheduling_read.wait()
        while True:
            known, window, detail = await self._read_upcoming()
            if window is not None:
                self._warn_unknown_upcoming(window)
            if known:
                report = track.observe(self._upcoming(window), detail)
                self.active.keep_none_form(UPCOMING_KIND, self._none_by_503)
                self.active.save_pending()
                if report is not None:
                    emit(report)
                self.active.save()
            await asyncio.sleep(self.settings.upcoming_interval)

    def _warn_unknown_upcoming(self, window: UpcomingWindow) -> None:
        """Once per value: a window whose status or type this agent does not know is still
        published as a drain, and the operator is told which value it guessed on."""
        for word in unknown_upcoming_words(window.document):
            if word in self._unknown_upcoming:
                continue
            self._unknown_upcoming.add(word)
            log.warning(
                "gcp: %s has %s, a value this agent does not know: published as a drain %s",
                UPCOMING_KEY,
                word,
                "toward the window's start" if window.start is not None else "without deadline",
            )

    async def _read_upcoming(self) -> tuple[bool, UpcomingWindow | None, dict[str, Any]]:
        """(known, window, detail): a 200 that parses (a window or one of the "nothing
        scheduled" forms), a 404 or repeated 503s are known; anything else (a transport
        error, another status, a body that does not parse, repeated 503s of a server that
        answers no other key while a window stands) is unknown: keep what we had."""
        confirming = False
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await fetch(
                    self.client, "GET", self.url(UPCOMING_KEY), params={"alt": "json"}, deadline=5.0
                )
            except httpx.HTTPError as error:
                self._bad(UPCOMING_KEY, "transport", f"{UPCOMING_KEY}: {error_text(error)}")
                return False, None, {}
            if response.status_code == 503:
                # Not an error: some VMs answer 503 when nothing is scheduled (counted, the
                # provider would show degraded for good and the log flap at every read).
                log.debug("gcp: %s: HTTP 503 (try %d)", UPCOMING_KEY, attempt)
                if attempt < UPCOMING_503_ATTEMPTS:
                    await asyncio.sleep(self.settings.retry_delay)
                    continue
                if self._window_held() and not confirming:
                    if not await self._server_answers():
                        # The whole server is unavailable (restarting, or in a host
                        # maintenance longer than the tries): no answer about the window.
                        # Taken for "nothing scheduled", it cleared the window and raised it
                        # again under a new id at the next good read, and the job saved for
                        # it twice.
                        self._bad(UPCOMING_KEY, "unavailable", f"{UPCOMING_KEY}: HTTP 503")
                        return False, None, {}
                    # It answers now: ask once more, after it did. A server back just as the
                    # tries ended answered that read, and its outage's 503s were taken for
                    # "nothing scheduled" (a clear, then the window under a new id).
                    confirming = True
                    continue
                if self._window_held() and not self._503_may_mean_none():
                    # The key alone unavailable on a VM that says "nothing scheduled"
                    # otherwise, its window not ended: no answer (contracts 2.5: only a
                    # parsable 200 is). Taken for "nothing", it cleared the window, raised
                    # it again under a new id at the next good read (a second save), and
                    # had the 503s lasted past its start, sent no terminate.
                    self._bad(UPCOMING_KEY, "unavailable", f"{UPCOMING_KEY}: HTTP 503")
                    return False, None, {}
                if not self._window_held():
                    self._none_by_503 = True
                self._window_end = None
                self._good(UPCOMING_KEY)
                return True, None, {"status": 503}
            foreign = not_the_server(UPCOMING_KEY, response)
            if foreign is not None and response.status_code in (200, 404):
                # Read as "nothing scheduled", it cleared the window in force.
                self._bad(UPCOMING_KEY, FOREIGN, foreign)
                return False, None, {}
            if response.status_code == 404:
                self._none_by_503, self._window_end = False, None
                self._good(UPCOMING_KEY)
                return True, None, {"status": 404}
            if response.status_code != 200:
                # Only a parseable 200 (or the 404 of a VM without the key) says what is
                # scheduled: a 500 or 403 clearing a window would drop a drain and re-raise
                # it under a new id at the next read.
                self._bad(
                    UPCOMING_KEY,
                    f"http-{response.status_code}",
                    f"{UPCOMING_KEY}: HTTP {response.status_code}",
                )
                return False, None, {}
            try:
                window = parse_upcoming(response.text)
            except ParseError as error:
                self._bad(UPCOMING_KEY, "parse", str(error))
                return False, None, {}
            self._good(UPCOMING_KEY)
            self._take_skew(response.headers.get("Date"))
            if window is not None:
                window = on_this_clock(window, self._ahead)
            else:
                self._none_by_503 = False
            self._window_end = None if window is None else window.end
            return True, window, {} if window is None else window.document

    def _take_skew(self, date: str | None) -> None:
        """Take the skew of this VM's clock from an answer's `Date`, when it moved by
        CLOCK_MOVED or more (a `Date` has whole seconds); without one that reads, the skew
        known stands."""
        ahead = take_skew(self._ahead, date, utcnow(), self.health, "gcp", SERVICE)
        if ahead is not None:
            self._ahead = ahead

    def _window_held(self) -> bool:
        """Whether an upcoming-maintenance notice is in force (or saved from before a restart
        and not settled yet)."""
        track = self.tracks["upcoming-maintenance"]
        return track.active is not None or track.saved is not None

    def _503_may_mean_none(self) -> bool:
        """Whether a run of 503s of upcoming-maintenance, the server answering the other
        keys, may be this VM's "nothing scheduled" while a window is held: yes where the VM
        said "nothing" so before the window; where it said it another way, only once the
        window has ended (or when its end is not known: its window stands no longer than
        that anyway, and one without an end would otherwise stand for good). Where the VM
        said nothing yet (the agent started with the window there), as where it said 503."""
        if self._none_by_503 is not False:
            return True
        end = self._window_end
        return end is None or end <= utcnow()

    async def _server_answers(self) -> bool:
        """Whether the metadata server answers a plain read of another key: a 503 of
        upcoming-maintenance is then that key's own answer (nothing scheduled, on some VMs),
        not the whole server being unavailable."""
        try:
            response = await fetch(self.client, "GET", self.url(MAINTENANCE_KEY), deadline=2.0)
        except httpx.HTTPError:
            return False
        return response.status_code == 200 and not_the_server(MAINTENANCE_KEY, response) is None

    def _good(self, key: str) -> None:
        """A good answer of `key`, reported as a success only while no other key is failing:
        one key's standing fault (an upcoming-maintenance that answers 500) is one warning,
        not a warning and a "recovered" at every answer of the others."""
        self._failing.discard(key)
        # The first good answer counts whatever else fails: it makes the provider ready. It is
        # no recovery of a key still failing (a 500 before any long-poll answered, under load).
        if not self._failing or self.health.last_success is None:
            self.health.success(recovered=not self._failing)
        else:
            # Still an answer: counted as no progress, the long-polls' answers beside a key
            # read only every upcoming_interval (60 s, past the 52 s bound) had the agent
            # restart the watcher as hung at every minute of that key's standing fault.
            self.health.progress()

    def _bad(self, key: str, kind: str, message: str) -> None:
        self._failing.add(key)
        self.health.error(kind, message)


def build(settings: Settings, context: WatcherContext) -> GcpWatcher:
    return GcpWatcher(settings, context)


__all__ = [
    "FOREIGN",
    "MAINTENANCE_VALUES",
    "GcpWatcher",
    "NoticeTrack",
    "UpcomingWindow",
    "build",
    "gpu_machine_type",
    "keep_stop",
    "local_gpus",
    "maintenance_report",
    "metadata_root",
    "not_the_server",
    "on_boot_clock",
    "on_this_clock",
    "parse_maintenance_event",
    "parse_notice_duration",
    "parse_on_host_maintenance",
    "parse_preempted",
    "parse_upcoming",
    "preemption_report",
    "unknown_upcoming_words",
    "upcoming_report",
]
