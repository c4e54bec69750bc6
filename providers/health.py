"""Polling health: the one place a watcher counts its successes and errors. It feeds the
agent's metrics and readiness, and keeps the log to one line per distinct error so a
flapping endpoint cannot flood it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from forewarn.protocol.oneline import FIELD_CHARS, one_line

log = logging.getLogger("forewarn.providers")

# The error kind the agent counts when a watcher crashed and is restarted: no poll of its
# endpoint, though counted among its errors.
WATCHER_FAILED = "watcher-failed"
# The error kind the agent counts when it restarted a watcher that made no progress (no
# answer and no error) for longer than its bound: hung, not crashed.
WATCHER_STALLED = "watcher-stalled"
# The agent's own kinds: counted among the watcher's errors, but no sign that it is working.
AGENT_KINDS = (WATCHER_FAILED, WATCHER_STALLED)
# What became of an approval a watcher was asked for (Azure's StartRequests): sent (the
# provider answered 200), failed (a transport error or another status), or skipped (not sent:
# the event started, is gone, is shared, or its type is not to be approved).
APPROVAL_OUTCOMES = ("sent", "failed", "skipped")
# Approvals remembered as counted once: events are few, and leave the list within a day.
COUNTED_ONCE = 256
# What `forewarn status` shows of the last error: one line a person reads, whatever an
# endpoint sent.
ERROR_CHARS = FIELD_CHARS
# What it shows of a standing condition, and what the log says of why detection said no: the
# watcher's own words with their fix (a command, a file to apply), an endpoint's quoted among
# them; still one line, whatever the endpoint sent.
SHOWN_CHARS = 1000
# What the log line of an error holds of them: more than `status` shows, still one line.
LOGGED_CHARS = 2000


@dataclass
class PollHealth:
    """Success and error bookkeeping for one watcher: feeds metrics and readiness, and keeps
    logs to one line per distinct error so a flapping endpoint cannot flood them."""

    provider: str
    repeat_log_seconds: float = 60.0
    polls: int = 0
    successes: int = 0  # good answers; `polls` counts failed ones too
    errors: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)  # since the agent started
    # Errors by kind in this episode: since polling last recovered (or the agent started). The
    # log line's "(seen N times ...)" counts these, so a new episode's first line says 1, not
    # the total the metrics keep.
    episode_errors: dict[str, int] = field(default_factory=dict)
    recovered_once: bool = False
    last_success: float | None = None  # time.time() of the last good answer
    last_error: str | None = None  # its kind
    # What it said, on one line and bounded (`one_line`): `status` shows it after the kind,
    # which alone (`connect`) did not say what failed nor what to do.
    last_message: str | None = None
    # time.monotonic() of the watcher's last answer or error (either says it is working):
    # the agent restarts a watcher that goes longer than its bound without one.
    last_progress: float = field(default_factory=time.monotonic)
    _logged: dict[str, float] = field(default_factory=dict, repr=False)
    listeners: list[Callable[[str, bool, str | None], None]] = field(
        default_factory=list, repr=False
    )
    # Standing problems, by kind, that hold until the watcher resolves them (Azure cannot
    # learn this VM's name, a state file cannot be written): `status` shows them besides the
    # counters, since the next good poll clears `last_error` but not these.
    conditions: dict[str, str] = field(default_factory=dict)
    # Why `detect()` last answered false, for `--provider auto` to say (`not_detected`).
    _not_detected: str | None = field(default=None, repr=False)
    # The watcher has read its service's clock (a `Date` that reads): after a forward step of
    # the wall clock it sees the new skew and re-times its deadlines, so the board holds them
    # that long (`NoticeBoard.clock_vouched`). A DigitalOcean watcher without droplet metadata
    # never does: its deadlines are the wall clock's to judge at once.
    dated: bool = False
    # The skew of this machine's clock the watcher holds now (seconds it is ahead of its
    # service's `Date`; `take_skew`), None before it has read one: the board tells by it a
    # report the watcher made before it saw a step of the wall clock (`clock_skews`).
    ahead: float | None = None
    # Approvals by outcome (APPROVAL_OUTCOMES), and who hears of each: the agent's metrics.
    approvals: dict[str, int] = field(default_factory=dict)
    approval_listeners: list[Callable[[str, str], None]] = field(default_factory=list, repr=False)
    # The approvals counted `once` (see `approval`), oldest first, bounded.
    _counted_once: dict[str, None] = field(default_factory=dict, repr=False)

    def success(self, *, recovered: bool = True) -> None:
        """Count a good answer. With `recovered` false (another of the watcher's endpoints
        still fails) it is no recovery: nothing is logged, and that error stays said once."""
        self.polls += 1
        self.successes += 1
        self.last_success = time.time()
        self.last_progress = time.monotonic()
        if recovered and self.last_error is not None:
            log.info("%s: polling recovered after %s", self.provider, self.last_error)
            self.last_error = None
            self.last_message = None
            self._logged.clear()
            self.episode_errors.clear()
            self.recovered_once = True
        for listener in self.listeners:
            listener(self.provider, True, None)

    def progress(self) -> None:
        """Record that the watcher is working (a mail of a long pass received) without
        counting a poll, a success or an error: only the end of a pass counted, and a first
        pass over a large mailbox longer than the progress bound had the agent restart the
        watcher as hung in the middle of reading."""
        self.last_progress = time.monotonic()

    def error(
        self,
        kind: str,
        message: str,
        *,
        shown: str | None = None,
        exc_info: BaseException | None = None,
    ) -> None:
        """Count an error; log it the first time, and again only after `repeat_log_seconds`,
        with the number of its kind in this episode (since polling last recovered).
        `shown` is what `status` shows of it where that is not `message` (a watcher that logs
        a kind's cause and fix once and a reminder after: `status` has no first line to see).
        A crash of the watcher (WATCHER_FAILED) or its restart when hung (WATCHER_STALLED) is an
        error but no poll of its endpoint, as in `forewarn_polls_total` (`status` counted each
        crash as a poll), and no progress of the watcher. `exc_info` (a crash's exception)
        puts its traceback on the line when it is logged: a crash is a bug to locate."""
        if kind not in AGENT_KINDS:
            self.polls += 1
            self.last_progress = time.monotonic()
        self.errors += 1
        self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + 1
        self.episode_errors[kind] = self.episode_errors.get(kind, 0) + 1
        self.last_error = kind
        self.last_message = one_line(shown if shown is not None else message, ERROR_CHARS)
        now = time.monotonic()
        last = self._logged.get(kind)
        if last is None or now - last >= self.repeat_log_seconds:
            self._logged[kind] = now
            count = self.episode_errors[kind]
            since = "polling recovered" if self.recovered_once else "the agent started"
            seen = "once" if count == 1 else f"{count} times"
            log.warning(
                "%s: %s: %s (seen %s since %s)",
                self.provider,
                kind,
                # An endpoint's words may be a megabyte over many lines: the log keeps one
                # line of them, at most once a minute.
                one_line(message, LOGGED_CHARS),
                seen,
                since,
                exc_info=exc_info,
            )
        for listener in self.listeners:
            listener(self.provider, False, kind)

    def approval(self, outcome: str, once: str | None = None) -> bool:
        """Count one approval by its outcome (one of APPROVAL_OUTCOMES); whether it counted.
        With `once` (an event and the cause of a skip), an outcome already counted with it is
        not counted again: this health outlives the watcher, and each one built after a crash
        is told of the flushed notices again and skipped their approvals anew."""
        if outcome not in APPROVAL_OUTCOMES:
            raise ValueError(f"approval outcome {outcome!r} is not one of {APPROVAL_OUTCOMES}")
        if once is not None:
            key = f"{outcome}\0{once}"
            if key in self._counted_once:
                return False
            self._counted_once[key] = None
            while len(self._counted_once) > COUNTED_ONCE:
                del self._counted_once[next(iter(self._counted_once))]
        self.approvals[outcome] = self.approvals.get(outcome, 0) + 1
        for listener in self.approval_listeners:
            listener(self.provider, outcome)
        return True

    def condition(self, kind: str, message: str | None) -> None:
        """Set a standing problem of this watcher, or clear it with None."""
        if message is None:
            self.conditions.pop(kind, None)
        else:
            # Bounded here, not by each watcher: Azure's skipped events, joined, grew with
            # the document, and `status` printed each condition whole.
            self.conditions[kind] = one_line(message, SHOWN_CHARS)

    @property
    def not_detected(self) -> str | None:
        """Why `detect()` last answered false (one line, bounded), or None."""
        return self._not_detected

    @not_detected.setter
    def not_detected(self, why: str | None) -> None:
        self._not_detected = None if why is None else one_line(why, SHOWN_CHARS)

    @property
    def ready(self) -> bool:
        return self.last_success is not None


__all__ = [
    "AGENT_KINDS",
    "APPROVAL_OUTCOMES",
    "ERROR_CHARS",
    "LOGGED_CHARS",
    "SHOWN_CHARS",
    "WATCHER_FAILED",
    "WATCHER_STALLED",
    "PollHealth",
]
