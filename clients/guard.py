"""`CheckpointGuard`: one object that decides when the training loop saves, and whether it exits.

It merges the layers of the field's best practice:
- periodic checkpoints, every N steps and/or every T seconds;
- agent notices: drain → flush and continue (once per notice), terminate → flush and exit;
- SIGTERM / SIGINT → flush and exit;
- a flag file → flush and continue (handled here when no agent with the local provider runs).

`due(step)` costs two attribute reads unless something is pending: background threads (the
notice subscriber and a ticker) and the signal handler set the flag, the loop reads it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from forewarn.protocol.wire import runtime_dir

from .adaptive import AdaptiveInterval
from .agreement import DEFAULT_AGREE_EVERY, RankAgreement
from .event import Event
from .notices import Notices

if TYPE_CHECKING:
    from .checkpoint import CheckpointStore

log = logging.getLogger("forewarn.clients")

FLAG_NAME = "checkpoint-now"
TICK_SECONDS = 0.25


@dataclass(frozen=True)
class SaveResult:
    """What a save answered: `exit` is true when the process should stop now."""

    exit: bool
    step: int
    reasons: tuple[str, ...]
    notices: tuple[str, ...]
    flush_seconds: float | None
    # The committed generation, when the guard saved through a CheckpointStore.
    generation: Any = None


class CheckpointGuard:
    def __init__(
        self,
        every_steps: int | None = None,
        every_seconds: float | None = None,
        *,
        every: str | None = None,
        interruptions_per_day: float | None = None,
        mtbi_seconds: float | None = None,
        adaptive: AdaptiveInterval | None = None,
        store: CheckpointStore | None = None,
        notices: Notices | bool = True,
        flag_file: str | Path | None = "default",
        handle_signals: bool = True,
        events: str | None = None,
        control: str | None = None,
        heartbeat_timeout: float = 3.0,
        agree: bool | RankAgreement | None = None,
        agree_every: int = DEFAULT_AGREE_EVERY,
    ) -> None:
        if every_steps is not None and every_steps <= 0:
            raise ValueError(f"every_steps must be a positive number of steps, got {every_steps}")
        if every_seconds is not None and every_seconds <= 0:
            raise ValueError(f"every_seconds must be positive, got {every_seconds}")
        self.every_steps = every_steps
        self.every_seconds = every_seconds
        self.store = store
        # every="auto": a time interval kept near the optimum for the measured flush cost and
        # the configured interruption rate (Daly's formula, see forewarn.clients.adaptive).
        self.adaptive: AdaptiveInterval | None = None
        if every == "auto":
            if every_steps is not None or every_seconds is not None:
                raise ValueError(
                    "every='auto' chooses the interval: drop every_steps/every_seconds"
                )
            if adaptive is None:
                if interruptions_per_day is None and mtbi_seconds is None:
                    raise ValueError(
                        "every='auto' needs the interruption rate: interruptions_per_day= or "
                        "mtbi_seconds= (or adaptive=AdaptiveInterval(...))"
                    )
                adaptive = AdaptiveInterval(
                    interruptions_per_day=interruptions_per_day, mtbi_seconds=mtbi_seconds
                )
            self.adaptive = adaptive
            self.every_seconds = adaptive.seconds
        elif every is not None:
            raise ValueError(f"every must be 'auto' or left out, got {every!r}")
        # Read by `due` on every step: keep these two plain attributes.
        self._wake = False
        self._next_step: float = every_steps if every_steps else math.inf

        self._lock = threading.Lock()
        self._pending: dict[str, str | None] = {}  # reason -> notice id
        self._notice_ids: set[str] = set()
        self._handled: set[str] = set()  # drains already flushed for
        self._exit = False
        self._due_since: float | None = None
        self._last_save = time.monotonic()
        self._started = self._last_save
        self.last_result: SaveResult | None = None

        if flag_file == "default":
            self.flag_file: Path | None = runtime_dir() / FLAG_NAME
        else:
            self.flag_file = Path(flag_file) if flag_file else None

        if isinstance(notices, Notices):
            self.notices: Notices | None = notices
            self._own_notices = False
        elif notices:
            self.notices = Notices(events, control, heartbeat_timeout=heartbeat_timeout)
            self._own_notices = True
        else:
            self.notices = None
            self._own_notices = False
        if self.notices is not None:
            self.notices.add_listener(self._on_event)
            for event in list(self.notices.active.values()):
                self._on_event(event)

        self._previous_handlers: dict[int, Any] = {}
        if handle_signals and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous_handlers[signum] = signal.signal(signum, self._on_signal)

        # With torch.distributed initialised (agree=None means: whenever it is), decisions go
        # through an all-reduce every `agree_every` steps so all ranks save at the same step.
        if isinstance(agree, RankAgreement):
            self.agreement: RankAgreement | None = agree
        elif agree is False:
            self.agreement = None
        else:
            self.agreement = RankAgreement.detect(agree_every)
            if agree and self.agreement is None:
                raise ValueError("agree=True needs torch.distributed initialised with 2+ ranks")
        if self.agreement is not None:
            self.due = self._due_ranked  # type: ignore[method-assign]

        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="forewarn-guard", daemon=True)
        self._ticker.start()

    # The training loop's side.

    def due(self, step: int) -> bool:
        """Whether to save at this step. Two attribute reads unless something is pending."""
        if self._wake or step >= self._next_step:
            if self._due_since is None:
                self._due_since = time.monotonic()
            return True
        return False

    def _due_ranked(self, step: int) -> bool:
        """`due` across ranks: periodic steps agree by themselves (same step counter); the
        rest is decided together every `agree_every` steps."""
        if step >= self._next_step:
            if self._due_since is None:
                self._due_since = time.monotonic()
            return True
        assert self.agreement is not None
        if step % self.agreement.every:
            return False
        save, exit_now = self.agreement.decide(self._wake, self._exit)
        if not save and not exit_now:
            return False
        with self._lock:
            if not self._wake:
                self._pending.setdefault("peer", None)  # another rank asked for this save
            if exit_now:
                self._exit = True
            self._wake = True
        if self._due_since is None:
            self._due_since = time.monotonic()
        return True

    @property
    def should_exit(self) -> bool:
        return self._exit

    def saved(self, step: int, seconds: float | None = None) -> SaveResult:
        """Record a save at `step` (taking `seconds`, else the time since `due` said so), ack
        the agent, and say whether to exit."""
        now = time.monotonic()
        if seconds is None and self._due_since is not None:
            seconds = now - self._due_since
        with self._lock:
            reasons = dict(self._pending)
            self._pending.clear()
            notice_ids = tuple(sorted(self._notice_ids))
            self._notice_ids.clear()
            self._handled.update(notice_ids)
            self._wake = False
            exit_now = self._exit
        if step >= self._next_step:
            reasons.setdefault("periodic", None)
        if self.adaptive is not None and seconds is not None:
            self.adaptive.record_flush(seconds)
            self.every_seconds = self.adaptive.seconds
        self._next_step = step + self.every_steps if self.every_steps else math.inf
        self._last_save = now
        self._due_since = None
        if "flag" in reasons and self.flag_file is not None:
            with contextlib.suppress(FileNotFoundError):
                self.flag_file.unlink()
        if self.notices is not None:
            for notice_id in notice_ids or (None,):
                self.notices.ack(notice_id, step=step, flush_seconds=seconds)
        result = SaveResult(exit_now, step, tuple(reasons), notice_ids, seconds)
        self.last_result = result
        log.info(
            "forewarn: saved at step %d (%s)%s",
            step,
            ", ".join(result.reasons) or "requested",
            "; exiting" if exit_now else "",
        )
        return result

    def save(self, step: int, write: Callable[[Any], object]) -> SaveResult:
        """Save and record it. With a `store`, `write(gen)` fills a new generation that the
        store commits (files, manifest, marker, LATEST) and the flush seconds are the store's;
        without one, `write(step)` is the user's own save, timed here."""
        if self.store is not None:
            flushed = self.store.flush(step, write)
            result = self.saved(step, flushed.seconds)
            result = replace(result, generation=flushed.generation)
            self.last_result = result
            return result
        started = time.monotonic()
        write(step)
        return self.saved(step, time.monotonic() - started)

    def resumed(
        self, step: int, *, restore_seconds: float | None = None, steps_lost: int | None = None
    ) -> None:
        """Report a resume to the agent (telemetry: restore time and steps lost)."""
        if self.notices is not None:
            # Just started: give the subscriber a moment to hear the agent's heartbeat.
            deadline = time.monotonic() + 1.5
            while not self.notices.alive and time.monotonic() < deadline:
                time.sleep(0.05)
            self.notices.ack(
                None,
                step=step,
                outcome="resumed",
                restore_seconds=restore_seconds,
                steps_lost=steps_lost,
            )

    def request(self, reason: str = "manual", *, exit: bool = False) -> None:
        """Ask for a save at the next `due` check, from any thread."""
        with self._lock:
            self._pending[reason] = None
            if exit:
                self._exit = True
            self._wake = True

    def close(self) -> None:
        self._stop.set()
        self._ticker.join(timeout=1)
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler)
        self._previous_handlers.clear()
        if self.notices is not None and self._own_notices:
            self.notices.close()

    def __enter__(self) -> CheckpointGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # The other threads' side.

    def _on_event(self, event: Event) -> None:
        if event.action == "drain":
            if event.id in self._handled:
                return
            with self._lock:
                self._pending["drain"] = event.id
                self._notice_ids.add(event.id)
                self._wake = True
        elif event.action == "terminate":
            with self._lock:
                self._pending["terminate"] = event.id
                self._notice_ids.add(event.id)
                self._exit = True
                self._wake = True

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._exit and "signal" in self._pending:
            # A second signal while the first is pending: the user insists; let it through.
            previous = self._previous_handlers.get(signum, signal.SIG_DFL)
            signal.signal(signum, previous)
            os.kill(os.getpid(), signum)
            return
        name = signal.Signals(signum).name
        self._pending["signal"] = name
        self._exit = True
        self._wake = True

    def _flag_is_ours(self) -> bool:
        """The agent's local provider handles the flag file when it runs; otherwise we do.
        Until the agent has been heard from, or given up on, nobody takes it: both taking it
        would flush twice."""
        notices = self.notices
        if notices is None:
            return True
        if notices.alive:
            if notices.agent is None:
                return False  # alive (a notice came) but no heartbeat yet says what it runs
            return "local" not in notices.agent.get("providers", ())
        return time.monotonic() - self._started >= notices.heartbeat_timeout

    def _tick(self) -> None:
        interval = TICK_SECONDS
        if self.every_seconds is not None:
            interval = min(interval, self.every_seconds / 4)
        while not self._stop.wait(interval):
            elapsed = time.monotonic() - self._last_save
            if self.every_seconds is not None and elapsed >= self.every_seconds:
                with self._lock:
                    self._pending.setdefault("periodic", None)
                    self._wake = True
            self._check_flag()

    def _check_flag(self) -> None:
        flag = self.flag_file
        if flag is None or "flag" in self._pending or not self._flag_is_ours():
            return
        if flag.exists():
            log.info("forewarn: flag file %s found", flag)
            with self._lock:
                self._pending["flag"] = None
                self._wake = True


__all__ = ["CheckpointGuard", "SaveResult"]
