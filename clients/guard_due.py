"""When the training loop saves: `due(step)` after every step, `due_in_eval(step)` inside an
evaluation, and with torch.distributed the same answer on every rank.

`due` costs an attribute write and two reads unless something is pending (a periodic step, or
`_wake` set by a signal, a notice, the flag file or the ticker); with rank agreement the ranks
decide together every `agree_every` steps, at the first two checks, and at every periodic step.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from .agreement import RankAgreement
from .guard_state import GuardState

log = logging.getLogger("forewarn.clients")


class DueChecks(GuardState):
    """The loop's questions to `CheckpointGuard`: whether to save now."""

    _agree_every: int  # with agree=None, until the first check looks for torch.distributed
    _due_calls: int
    _eval_calls: int

    if TYPE_CHECKING:

        def _raise_failure(self) -> None: ...  # BackgroundSaves'

        def _note_writer(self) -> None: ...  # CheckpointGuard's

        def _skips_scheduled(self, step: int) -> bool: ...  # BackgroundSaves'

        def _held_for_replay(self) -> bool: ...  # NoticeRequests'

    def _init_agreement(self, agree: bool | RankAgreement | None, agree_every: int) -> None:
        """With torch.distributed initialised (agree=None means: whenever it is), decisions go
        through an all-reduce every `agree_every` steps so all ranks save at the same step."""
        self._eval_calls = 0
        self._due_calls = 0
        if isinstance(agree, RankAgreement):
            self.agreement = agree
        elif agree is False:
            self.agreement = None
        else:
            self.agreement = RankAgreement.detect(int(agree_every))
            if agree and self.agreement is None:
                raise ValueError("agree=True needs torch.distributed initialised with 2+ ranks")
        if self.agreement is not None:
            self.due = self._due_ranked  # type: ignore[method-assign]
        elif agree is None:
            # torch.distributed may be initialised after the guard is made (set-up at the top
            # of the script): found once, at construction, a guard made first never agreed with
            # the other ranks. Looked for again at the first check.
            self._agree_every = int(agree_every)
            self.due = self._due_first  # type: ignore[method-assign]

    def due(self, step: int) -> bool:
        """Whether to save at this step. An attribute write and two reads unless
        something is pending.

        Call it after every training step on every rank, with the same step numbers."""
        self._seen_step = step  # the ticker times the steps from it (see StepPace)
        if self._wake or step >= self._next_step:
            if self._skips_scheduled(step):
                return False
            if self._failure is not None and not self._exit:
                # With an exit pending the final save comes first (it supersedes the failed
                # one): raising here could end the job without it.
                self._raise_failure()
            if step < self._next_step and self._held_for_replay():
                return False  # a drain's save waits for the rest of the replay (`_wake` stays)
            self._mark_due(step)
            return True
        return False

    def _mark_due(self, step: int) -> None:
        if self._due_since is None or self._due_failed is not None:
            # A save asked for again after one that raised is timed (and said) from here.
            self._due_since = time.monotonic()
            self._due_step = step
            self._due_failed = None

    def _due_first(self, step: int) -> bool:
        """The first `due`: with torch.distributed initialised by now, every later check goes
        through the ranks' agreement; otherwise through the plain `due`."""
        self._late_agreement()
        return self.due(step)

    def _late_agreement(self) -> None:
        if self.__dict__.pop("due", None) is None:
            return  # looked for already
        self.agreement = RankAgreement.detect(self._agree_every)
        if self.agreement is not None:
            self.due = self._due_ranked  # type: ignore[method-assign]
        self._note_writer()  # the rank is known by now (CheckpointGuard's)

    def _due_ranked(self, step: int) -> bool:
        """`due` across ranks: periodic steps are due on every rank by themselves (same step
        counter), and there the ranks agree on exit; the rest is decided together every
        `agree_every` steps, and at the first two checks."""
        assert self.agreement is not None
        self._seen_step = step
        agreed = self._agreed
        if agreed is not None and agreed[1]:
            # An exit every rank agreed on (in an evaluation loop that was left without saving)
            # and not saved yet: each rank knows it, so this check answers it without waiting
            # up to `agree_every` steps more for the next agreement.
            self._mark_due(step)
            return True
        if step >= self._next_step:
            # Every rank saves here: one rank exiting alone would leave the others in their
            # next collective without it (gloo fails, NCCL hangs).
            _, exit_now = self.agreement.decide(True, self._exit)
            with self._lock:
                if exit_now and not self._exit:
                    self._pending.setdefault("peer", None)  # another rank asked to exit
                    self._exit_by.add("peer")
                    self._exit = True
                self._agree_on(step, exit_now)
            self._mark_due(step)
            return True
        self._due_calls += 1
        # The first two checks (right after the resume and after the first step) always
        # agree, so a notice during a long first step is answered when that step ends.
        if step % self.agreement.every and self._due_calls > 2:
            return False
        # A drain's save held for the rest of the replay asks nothing of the other ranks yet.
        wake = self._wake and not self._held_for_replay()
        save, exit_now = self.agreement.decide(wake, self._exit)
        if not save and not exit_now:
            return False
        with self._lock:
            if not self._wake:
                self._pending.setdefault("peer", None)  # another rank asked for this save
            if exit_now:
                if not self._exit:
                    self._exit_by.add("peer")
                self._exit = True
            self._wake = True
            self._agree_on(step, exit_now)
        self._mark_due(step)
        return True

    def _agree_exit_after_save(self, step: int) -> None:
        """After the save every rank agreed on at `step` (a periodic or drain save, not an
        exit's), agree on an exit asked for while it ran. Left to the next agreement, the
        ranks trained on past the step just saved and saved again for the exit: a terminate
        that came during a 25 s periodic save at step 30 was saved at step 32, 25 s later
        (with `agree_every` 8, up to 8 steps on), and a lead shorter than two saves ended in
        the SIGKILL mid-save and the steps since 30 lost. Every rank is in this save (it was
        agreed), so every rank takes part; a single rank exits on such a save already."""
        agreed = self._agreed
        if self.agreement is None or agreed is None or agreed[0] != step or agreed[1]:
            return
        _, exit_now = self.agreement.decide(False, self._exit)
        if not exit_now:
            return
        with self._lock:
            if not self._exit:
                self._pending.setdefault("peer", None)  # another rank asked to exit
                self._exit_by.add("peer")
            self._exit = True
            self._agree_on(step, True)

    def _wait_for_ranks_exit_save(self, step: int) -> bool:
        """After this rank's part of the exit's save every rank agreed on at `step`, wait
        until every rank's part has ended (one more all-reduce): True when it was such a save.
        torchrun stops the other ranks once one exits (SIGTERM, then SIGKILL 30 s later,
        whatever the lead): a rank that left at the end of its own part had torchrun SIGKILL
        a rank still writing its part, which was lost. A rank gone meanwhile (its save
        raised) ends the wait with an error from the collective: this rank's part is saved,
        and it leaves all the same."""
        agreed = self._agreed
        if self.agreement is None or agreed is None or agreed[0] != step or not agreed[1]:
            return False
        now = time.monotonic()
        since = self._due_since
        # Said by the ticker while it lasts (`_check_exit_save_late`): a rank whose own save
        # never returns holds every rank here until the platform's kill, and each rank's log
        # said the same "has not ended" line, not which rank hung.
        self._exit_barrier = (now, now - since if since is not None else 0.0)
        try:
            self.agreement.decide(False, True)
        except Exception as error:  # the collective's own error: gloo's, NCCL's
            log.warning(
                "forewarn: the exit's save of step %d: could not wait for the other ranks' "
                "parts (%s); this rank's part is saved and it exits",
                step,
                error,
            )
        finally:
            self._exit_barrier = None
        return True

    def _agree_on(self, step: int, exit_now: bool) -> None:
        # Under the lock: what the save every rank agreed on at `step` answers.
        self._agreed = (step, exit_now, frozenset(self._pending), frozenset(self._notice_ids))

    def due_in_eval(self, step: int) -> bool:
        """Whether to save now, asked from inside an evaluation, validation or prediction loop
        (once per batch); `step` is the last training step, whose state the save holds.

        Only an exit (terminate, SIGTERM/SIGINT, `request(exit=True)`) interrupts an
        evaluation: drains and periodic saves wait for the next `due`. With rank agreement
        every rank must make the same number of calls (a DistributedSampler pads every rank to
        the same number of batches); the ranks agree every `agree_every` calls. A loop that
        runs on one rank only reads `should_exit` instead, which involves no other rank."""
        self._eval_checks += 1  # a batch between checks delays an exit as a step does
        if self.__dict__.get("due") == self._due_first:
            self._late_agreement()  # an evaluation before the first training step
        if self.agreement is None:
            # An exit pending, not one a save has answered: `_wake` is set with every exit
            # asked for and cleared by the save that answers it. Answered, an evaluation on the
            # way out was asked for the same save again.
            if self._exit and self._wake:
                self._mark_due(step)
                return True
            return False
        self._eval_calls += 1
        if self._eval_calls % self.agreement.every:
            return False
        _, exit_now = self.agreement.decide(self._exit, self._exit)
        if not exit_now:
            return False
        with self._lock:
            if not self._exit:
                self._pending.setdefault("peer", None)
                self._exit_by.add("peer")
            self._exit = True
            self._wake = True
            self._agree_on(step, True)
        self._mark_due(step)
        return True


__all__ = ["DueChecks"]
