"""`GuardState`: what the parts of `CheckpointGuard` share, declared in one place.

The guard is one object made of parts, one job each (the modules named `guard_*`), that all
ask for saves and exits through the same pending state, under one lock: a signal, a notice, a
flag file or a deadline asks by filling `_pending` and setting `_wake` (and `_exit`), and the
save that answers clears them. This class declares that state and the attributes more than one
part reads, and answers two questions about it; `CheckpointGuard.__init__` sets it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from forewarn.protocol.timefmt import format_time

if TYPE_CHECKING:
    from .agreement import RankAgreement
    from .event import Event
    from .notices import Notices
    from .steppace import StepPace

# How often the guard's ticker looks (periodic time, flag file, inherited deadlines, handlers),
# and the step a wait on a background save takes.
TICK_SECONDS = 0.25

# The key of a generation's metadata that marks it as an exit's save (a terminate's, a
# SIGTERM's): the job stopped at its step, so a resume from it lost none.
EXIT_SAVE = "forewarn_exit_save"

# The key of a generation's metadata that names the notices its save answered, still in force
# then (id -> `noticed_at`, RFC 3339): a job resumed from it owes them no save of its own.
ANSWERED_NOTICES = "forewarn_notices"


class GuardState:
    """The state the guard's parts share (see the module's docstring)."""

    # Read by `due` on every step: plain attributes, no property.
    _wake: bool
    _next_step: float
    _lock: threading.Lock
    _pending: dict[str, str | None]  # reason -> notice id
    _notice_ids: set[str]
    _events: dict[str, Event]  # the notices that asked for the pending save
    # Notices this job received as a drain (until cleared): see CheckpointGuard.__init__.
    _drains_seen: set[str]
    _handled: set[str]  # drains already flushed for
    # The notices a save answered, until cleared: id -> noticed_at (see `_save_metadata`).
    _answered: dict[str, str]
    # Those the generation this job resumed from answered (see `CheckpointGuard.resumed`).
    _answered_at_resume: dict[str, str]
    # Notices cleared while a save was asked for them: see CheckpointGuard.__init__.
    _cleared_in_save: set[str]
    _exit: bool
    # What asks for the pending exit: "notice:<id>" per terminate, else the reason.
    _exit_by: set[str]
    _exit_answered: bool
    _exit_code: int
    # Notices a save that said exit answered (until cleared): see CheckpointGuard.__init__.
    _exited_for: set[str]
    # With rank agreement: the save the ranks last agreed on (step, exit, reasons, notices).
    _agreed: tuple[int, bool, frozenset[str], frozenset[str]] | None
    _seen_step: int | None
    _eval_checks: int
    _pace: StepPace
    _due_since: float | None
    _due_step: int
    _due_failed: float | None
    # While this rank, its part of the exit's save done, waits in the last all-reduce for the
    # other ranks' parts: when it began waiting and how long its own part took.
    _exit_barrier: tuple[float, float] | None
    _started: float
    _slowest_flush: float
    durable_step: int | None
    exit_margin: float
    notices: Notices | None
    agreement: RankAgreement | None
    # A background save's failure, raised by the next due() or save (see guard_background).
    _failure: BaseException | None

    def _exit_metadata(
        self, step: int, metadata: Mapping[str, Any] | None
    ) -> Mapping[str, Any] | None:
        """The metadata of a store's generation saved at `step`, marked as an exit's save
        (`EXIT_SAVE`) when it answers an exit the job leaves at: a resume from it then lost
        no step (`resumed`). Not for an exit asked after the ranks agreed on this save: the
        job trains on past it."""
        with self._lock:
            agreed = self._agreed
            deferred = agreed is not None and agreed[0] == step and not agreed[1]
            exiting = self._exit and not deferred and self._answers_exit()
        if not exiting:
            return metadata
        return {**(metadata or {}), EXIT_SAVE: True}

    def _save_metadata(
        self, step: int, metadata: Mapping[str, Any] | None
    ) -> Mapping[str, Any] | None:
        """The metadata of a generation the guard saves at `step`: the exit's mark
        (`_exit_metadata`) and the notices it answers (`ANSWERED_NOTICES`), those answered
        before and still in force too, so that a job restarted from it (torchrun, a
        Kubernetes Job) does not save again for a drain it saved for before the restart."""
        marked = self._exit_metadata(step, metadata)
        with self._lock:
            answered = dict(self._answered)
            for notice_id in self._notice_ids - self._cleared_in_save:
                event = self._events.get(notice_id)
                if event is not None:
                    answered[notice_id] = format_time(event.noticed_at)
        if not answered:
            return marked
        return {**(marked or {}), ANSWERED_NOTICES: answered}

    def _answers_exit(self) -> bool:
        """Under the lock, with an exit pending: whether a save now is the exit's, not one made
        past the exit's save (by a loop that went on) with nothing new asking for the exit."""
        return not self._exit_answered or bool(self._exit_by)

    def _seconds_left(self, *, passed: bool = False) -> float | None:
        """Time to the nearest deadline of the terminates asking for this save (None: a
        signal or a notice without one); 0 once it passed, negative with `passed`."""
        with self._lock:
            events = [self._events[i] for i in self._notice_ids if i in self._events]
        left = [
            e.seconds_left for e in events if e.action == "terminate" and e.deadline is not None
        ]
        known = [value for value in left if value is not None]
        if not known:
            return None
        return min(known) if passed else max(min(known), 0.0)


__all__ = ["ANSWERED_NOTICES", "EXIT_SAVE", "TICK_SECONDS", "GuardState"]
