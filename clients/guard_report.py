"""What the guard says about its saves and exits: the exit line, each save's log line, and an
exit's save that is still running.

`exit_line` is the one line a process logs when it exits on a notice or signal (which
notice, from which provider, at which step, where the checkpoint went); `ExitReporting` logs
each recorded save and, from the ticker, an exit's save still running every
EXIT_SAVE_WARN_SECONDS with the time left to the terminate's deadline.
"""

from __future__ import annotations

import logging
import time

from .event import Event
from .guard_state import GuardState
from .saveresult import SaveResult

log = logging.getLogger("forewarn.clients")

# An exit's save still running says so this often: after a SIGTERM, or without a store, nothing
# bounds it, and a hung one (a stalled network filesystem) said nothing until the SIGKILL.
EXIT_SAVE_WARN_SECONDS = 30.0


class ExitReporting(GuardState):
    """The reporting side of `CheckpointGuard`."""

    # The step and causes of the save that answered the exit (see CheckpointGuard.__init__).
    _exit_saved: tuple[int, str] | None
    # The `_due_since` of an exit's save with the number of EXIT_SAVE_WARN_SECONDS it was said
    # to be running for.
    _told_running: tuple[float, int]

    def _log_saved(
        self,
        result: SaveResult,
        reasons: dict[str, str | None],
        events: list[Event],
        where: str | None,
        past_exit: bool,
    ) -> None:
        exit_saved = self._exit_saved
        if past_exit and exit_saved is not None:
            # A save past the exit's (a loop that went on): the exit stands, but this save is
            # not what it asked for; it was logged "exiting at step 8 on periodic".
            log.warning(
                "forewarn: saved at step %d (%s) after the exit's save at step %d (on %s): the "
                "loop is to leave (SaveResult.exit, should_exit)",
                result.step,
                ", ".join(result.reasons) or "requested",
                exit_saved[0],
                exit_saved[1],
            )
        elif result.exit:
            log.warning("forewarn: %s", exit_line(result.step, reasons, events, where))
        else:
            log.info(
                "forewarn: saved at step %d (%s)",
                result.step,
                ", ".join(result.reasons) or "requested",
            )

    def _check_exit_save(self) -> None:
        """An exit's save (due said so with an exit pending, and nothing recorded it yet)
        running for another EXIT_SAVE_WARN_SECONDS: said, with the time to the deadline."""
        since = self._due_since
        if since is None or not self._exit or since == self._due_failed:
            return
        with self._lock:
            if not self._answers_exit():
                return  # a save past the exit's: the exit's own is made
        told = int((time.monotonic() - since) // EXIT_SAVE_WARN_SECONDS)
        last_since, last_told = self._told_running
        if told < 1 or (since == last_since and told <= last_told):
            return
        self._told_running = (since, told)
        with self._lock:
            reasons = dict(self._pending)
            events = [self._events[i] for i in sorted(self._notice_ids) if i in self._events]
        left = [
            e.seconds_left for e in events if e.action == "terminate" and e.deadline is not None
        ]
        known = [value for value in left if value is not None]
        if not known:
            deadline = "no deadline is known: it runs until it ends or the platform kills the job"
        elif min(known) >= 0:
            deadline = f"the terminate's deadline is in {min(known):.0f}s"
        else:
            deadline = (
                f"the terminate's deadline passed {-min(known):.0f}s ago: the platform may kill "
                "the job before it ends"
            )
        # "exiting at step N on <causes>; checkpoint ...": the causes.
        cause = exit_line(self._due_step, reasons, events, None).split(";")[0].split(" on ", 1)[1]
        log.warning(
            "forewarn: the exit's save of step %d (on %s) is still running after %gs; %s",
            self._due_step,
            cause,
            told * EXIT_SAVE_WARN_SECONDS,
            deadline,
        )


def exit_line(
    step: int, reasons: dict[str, str | None], events: list[Event], where: str | None
) -> str:
    """The one line a process logs when it exits on a notice or signal: which notice, from
    which provider, at which step, and where the checkpoint went."""
    causes = exit_causes(reasons, events)
    return f"exiting at step {step} on {causes}; checkpoint {where or 'saved by the caller'}"


def exit_causes(reasons: dict[str, str | None], events: list[Event]) -> str:
    """What asked for an exit, as `exit_line` names it."""
    if events:
        return ", ".join(
            f"{event.action} {event.id} from {event.provider} ({event.reason})" for event in events
        )
    if "signal" in reasons:
        # The signal's name, or none when code asked with request("signal", exit=True), as
        # the guard's own warning about a replaced handler suggests.
        return reasons["signal"] or "signal"
    return ", ".join(reasons) or "a request"


__all__ = ["EXIT_SAVE_WARN_SECONDS", "ExitReporting", "exit_causes", "exit_line"]
