"""A Hugging Face transformers TrainerCallback that wires CheckpointGuard into the Trainer's
own checkpointing.

    trainer = Trainer(..., callbacks=[ForewarnTrainerCallback()])

(or `trainer.add_callback(ForewarnTrainerCallback())`, a Trainer subclass's own add_callback,
or a callback handler a subclass builds itself: importing this module wraps
`CallbackHandler.add_callback`, so each wraps its Trainer as one passed at init does.)
At the end of each step it asks the guard; when a save is due it sets `control.should_save`, so
the Trainer writes its usual `checkpoint-<step>` (model, optimizer, scheduler, RNG states).
Once that save is done (`on_save`) it acks the agent with the measured seconds, and on
terminate or SIGTERM it stops training (`train()` returns normally: end the process with
`sys.exit(callback.exit_code)`, 143 then, so the platform restarts the job). Resume with
`trainer.train(resume_from_checkpoint=last_checkpoint(args.output_dir))`, which passes over
a checkpoint directory a killed save left half-written. A save it asked for that raises (in
the Trainer's `_save_checkpoint`, which it wraps for that save, in the fsync before the ack,
or in `save_dcp`) is acked failed (`guard.save_failed`: `exit_code` 1 for an exit's save) and
propagates out of `train()`. When `train()` raises otherwise (the Trainer's own scheduled
save, a CUDA error) the guard is closed and its signal handlers put back (it wraps `train()`
of the Trainer it is given to); only a notice that came since the last step's check, or an
exit not saved yet, is acked failed (`guard.loop_failed`: `exit_code` 1 for an exit), as
no save will answer it. An exit pending at the end of a step
skips the evaluation due at that step, so the save comes first, and the epoch an exit's save
cut short ends with no evaluation or save of the Trainer's own; nor does `train()` end by
deleting that checkpoint (`save_total_limit=1` keeps the best alone). During an evaluation it asks
`guard.due_in_eval` after each prediction step (`on_prediction_step`): on an exit the
evaluation DataLoader (the one `get_eval_dataloader` builds) ends the pass after that batch
(its metrics cover the batches run, with a WARNING saying so, and the Trainer's best from
before that pass is put back before the save: it ranked the cut pass), and the save follows as
the evaluation returns (it waited for the whole pass: an 8 s pass under a 10 s lead was saved
9.2 s after the notice); training stops once that save is made, unless the exit was
withdrawn meanwhile (as the guard decides).
The evaluation of `eval_on_start` comes before the first step, and the Trainer saves only
after a step: an exit asked for there is written as `checkpoint-1`, holding that step, so
a resume from it repeats and skips nothing (with `dcp=True` the callback saves step 0 as the
evaluation returns, and the Trainer still trains its first step before it stops).
`evaluate()` and `predict()` outside `train()` (before it, or after it returned) ask nothing
and make no guard: nothing is trained to save there, and nothing would close it after them.
A notice that comes then is replayed to the guard `train()` makes, which saves at its first
steps; a SIGTERM then is left to the process's own handler (Python's default ends the
process, as it would without the callback), as there is nothing to save.

The Trainer builds its training DataLoader with its own `worker_init_fn`; before its workers
start (`on_train_begin`) the callback chains forewarn's `worker_init_fn()` into it, and it has
the evaluation and prediction DataLoaders the Trainer builds from then on (`get_eval_dataloader`,
`get_test_dataloader` of the Trainer it was given to or that trains with it) given it as they
are built, so all their workers outlive a SIGTERM sent to the whole job.

With `store=CheckpointStore(...)` and `dcp=True` the callback saves itself instead, through
torch.distributed.checkpoint into the store (`save_dcp`: every rank writes its shards, the
generation commits once all are in): `{"model": model.state_dict(), "optimizer":
optimizer.state_dict(), "global_step": step}`, at the end of the step the guard says so (an
exit asked for during an evaluation is saved when it returns). Load the weights back with
`load_dcp(store.latest(), {"model": model.state_dict()})` before training; that is not a
Trainer resume (no scheduler, step counter or data position: `train()` counts from step 0).
Resume a run from the Trainer's own checkpoints (`last_checkpoint` below): the resume reports
its restore time (train()'s call to its first step) and, from an exit's save of this callback
(a `forewarn.json` in its checkpoint) with no newer checkpoint beside it, `steps_lost=0`.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..checkpoint.needs import extra_missing

try:
    from transformers import (
        Trainer,
        TrainerCallback,
        TrainerControl,
        TrainerState,
        TrainingArguments,
    )
    from transformers.trainer_callback import CallbackHandler
except ModuleNotFoundError as missing:
    if missing.name != "transformers":
        raise
    raise extra_missing("transformers", __name__, "transformers") from None

from ..checkpoint.local import fsync_tree
from ..guard import CheckpointGuard
from ..guard_state import EXIT_SAVE
from ..workers import protect_loader
from ._guarded import GuardHolder

log = logging.getLogger("forewarn.checkpoint")


class ForewarnTrainerCallback(GuardHolder, TrainerCallback):
    def __init__(
        self,
        guard: CheckpointGuard | None = None,
        *,
        store: Any = None,
        dcp: bool = False,
        **guard_options: Any,
    ) -> None:
        if dcp and store is None:
            raise ValueError("dcp=True saves into a CheckpointStore: pass store=")
        self._hold_guard(guard, guard_options)
        self.store = store
        self.dcp = dcp
        self._requested_at: float | None = None
        self._dcp_pending = False  # an exit asked for in evaluation, saved once it returns
        self._stopped = False  # the exit's save is made: training is stopping
        self._training = False  # between on_train_begin and the end of that train()
        self._wrapped: Trainer | None = None  # whose _save_checkpoint reports our save's failure
        # The TrainingArguments whose save_total_limit of 1 is lifted while exiting (see on_save).
        self._limited: TrainingArguments | None = None
        self.saved_steps: list[int] = []
        self.saved_generations: list[Any] = []  # with dcp=True: the committed generations
        # When the running train() was called, and the checkpoint it was asked to resume
        # from: the resume figures `on_train_begin` reports (see `_resume_figures`).
        self._train_called: float | None = None
        self._resume_from: Any = None

    def on_init_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        self._attach(_calling_trainer())
        return control

    def _forewarn_attach(self, trainer: Trainer | None) -> None:
        # What the wrapped CallbackHandler.add_callback calls: looked up by name, not by
        # class, so a callback of this module reloaded (a new class) is attached as well.
        self._attach(trainer)

    def _attach(self, trainer: Trainer | None) -> None:
        """What this callback wraps in the Trainer it is given to, as it is added to one of
        its callback handlers (`_attach_when_added`); again at on_init_end and on_train_begin,
        for a callback put in a handler's list by hand (those cover only later calls of
        train(): on_train_begin runs inside one)."""
        if trainer is None:
            return
        # Also here: with persistent workers the Trainer keeps the first evaluation DataLoader
        # it builds, and an evaluate() before train() would build it unprotected.
        _protect_evaluation_loaders(trainer)
        self._close_when_train_raises(trainer)

    def _close_when_train_raises(self, trainer: Trainer) -> None:
        """Close the guard when `trainer.train()` raises: the Trainer's own scheduled save
        failing (a full disk), a CUDA error, anything. train() then never reaches
        on_train_end, and the guard's SIGTERM handler stayed installed: the process, still
        cleaning up or handling the error, only noted the platform's SIGTERM and ran on until
        the SIGKILL. A notice that came since the last step's check (during the Trainer's
        own save, say) or an exit not saved yet is acked failed (`loop_failed`): no save will
        answer it. Nothing is acked when nothing waited on a save (a save of ours that
        raised was acked failed by `_save_failed`, which closed the guard)."""
        if getattr(trainer.train, "_forewarn_closes", False):
            return
        train = trainer.train

        @functools.wraps(train)
        def closing(*args: Any, **kwargs: Any) -> Any:
            self._train_called = time.monotonic()
            self._resume_from = kwargs.get("resume_from_checkpoint", args[0] if args else None)
            try:
                return train(*args, **kwargs)
            except BaseException as error:
                if self._guard is not None:  # not the property: it would make a guard
                    self._guard.loop_failed(trainer.state.global_step, error)
                self._finish()
                raise

        closing._forewarn_closes = True  # type: ignore[attr-defined]
        trainer.train = closing  # type: ignore[method-assign]

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        # The Trainer builds the DataLoader with its own worker_init_fn (seed_worker), so its
        # users cannot give it forewarn's: with dataloader_num_workers > 0 a job-wide SIGTERM
        # (systemd's control-group kill, torchrun's process-group signal) killed the workers
        # and the Trainer raised before the save. Its workers start after this hook.
        protect_loader(kwargs.get("train_dataloader"))
        # The evaluation DataLoaders are built per pass, with no worker_init_fn and no callback
        # event between building and iterating: a job-wide SIGTERM during an evaluation killed
        # their workers and the Trainer raised before the save.
        self._attach(_calling_trainer())
        self._training = True
        # A new train() (the same callback training on after an exit's save): what stopped
        # the last one would skip every evaluation and save of the Trainer's own in this one.
        self._stopped = False
        self._dcp_pending = False
        if state.global_step:
            # Resumed from a checkpoint: periodic saves count from there (from step 0 the
            # first step after every resume saved again).
            restore_seconds, steps_lost = self._resume_figures(args, state.global_step)
            self.guard.resumed(
                state.global_step, restore_seconds=restore_seconds, steps_lost=steps_lost
            )
        self.guard  # noqa: B018 -- the signal handlers are in place before the first step
        return control

    def _resume_figures(
        self, args: TrainingArguments, step: int
    ) -> tuple[float | None, int | None]:
        """The restore time and steps lost of a train() resumed at `step`, for the agent's
        resume line (it said `restore=none steps_lost=unknown` though the Trainer restored).
        The restore time runs from train()'s call to this hook: the Trainer loads the model,
        optimizer and scheduler there, between its own set-up, and says nothing of where
        each begins. No step is lost when the checkpoint was an exit's save of this callback
        (`_mark_exit_save`) and no newer `checkpoint-<step>` is beside it (one there: the job
        trained past this step); else the steps lost are not known (None)."""
        called, self._train_called = self._train_called, None
        resume, self._resume_from = self._resume_from, None
        restore_seconds = time.monotonic() - called if called is not None else None
        if resume is True:  # the Trainer's own pick: the newest checkpoint directory
            from transformers.trainer_utils import get_last_checkpoint

            resume = get_last_checkpoint(args.output_dir)
        if not isinstance(resume, (str, os.PathLike)):
            return restore_seconds, None
        folder = Path(resume)
        try:
            with open(folder / _EXIT_MARK, encoding="utf-8") as handle:
                mark = json.load(handle)
            if not (isinstance(mark, dict) and mark.get(EXIT_SAVE) is True):
                return restore_seconds, None
            if mark.get("global_step") != step:
                return restore_seconds, None
            for name in os.listdir(folder.parent):
                found = _CHECKPOINT.match(name)
                if found is not None and int(found.group(1)) > step:
                    return restore_seconds, None
        except (OSError, ValueError, RecursionError):  # no mark (or none readable): not known
            return restore_seconds, None
        return restore_seconds, 0

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        if self.dcp:
            if self._dcp_pending or self.guard.due(state.global_step):
                self._save_dcp(state, control, kwargs)
            return control
        if self.guard.due(state.global_step):
            control.should_save = True
            self._requested_at = time.monotonic()
            self._report_failure_of(_calling_trainer())
            if self.guard.should_exit:
                control.should_evaluate = False  # save first: the machine is going away
        return control

    def on_prediction_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        if self._stopped:
            return control  # the exit's save is made; an evaluation after it asks no other
        if not self._training:
            # evaluate() or predict() outside train(): nothing is trained to save, and no
            # on_train_end would close a guard made here (its SIGTERM handler, subscriber and
            # ticker outlived the call). A notice now is replayed to the guard train() makes.
            return control
        if self.dcp:
            if not self._dcp_pending and self.guard.due_in_eval(state.global_step):
                self._dcp_pending = True  # saved by on_evaluate, once the pass returns
                _mark_cut(_calling_trainer())
            return control
        if self._requested_at is None and self.guard.due_in_eval(state.global_step):
            # Not should_training_stop: on_save stops on the save's answer, and a terminate
            # withdrawn before the save (the guard then saves and continues) stopped the job.
            control.should_save = True
            self._requested_at = time.monotonic()
            trainer = _calling_trainer()
            self._report_failure_of(trainer)
            _mark_cut(trainer)  # the pass ends after this batch, and the save follows
        return control

    def on_evaluate(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        if self.dcp and self._dcp_pending:
            self._save_dcp(state, control, kwargs)
        return control

    def _save_dcp(self, state: TrainerState, control: TrainerControl, hooks: Any) -> None:
        from ..checkpoint.dcp import save_dcp

        self._dcp_pending = False
        step = state.global_step
        started = time.monotonic()
        saved: dict[str, Any] = {"model": hooks["model"].state_dict(), "global_step": step}
        if hooks.get("optimizer") is not None:
            saved["optimizer"] = hooks["optimizer"].state_dict()
        try:
            # An exit's save is bounded as the guard's own are: a grace past the deadline. Its
            # metadata is theirs too: the exit's mark and the notices it answers, which a job
            # resumed from it reads back (`resumed`). Saved without, a job resumed from a
            # drain's generation saved again for the drain, and `steps_lost` stayed unknown.
            generation = save_dcp(
                self.store,
                step,
                saved,
                metadata=self.guard._save_metadata(step, None),
                timeout=self.guard.exit_save_timeout(),
            )
        except BaseException as error:
            self._save_failed(step, error)
            raise
        self.saved_generations.append(generation)
        self.saved_steps.append(step)
        where = f"{self.store.url}/{generation.name}"
        result = self.guard.saved(step, time.monotonic() - started, where=where)
        if result.exit:
            control.should_training_stop = True
            control.should_evaluate = False
            self._stopped = True

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        if self._requested_at is None:
            return control  # the Trainer's own periodic save: nothing of ours is pending
        where = f"{args.output_dir}/checkpoint-{state.global_step}"
        try:
            if os.path.isdir(where):  # on the ranks that wrote it
                self._mark_exit_save(Path(where), state.global_step)
                # The Trainer leaves the bytes in the page cache: acked without this, a machine
                # powered off after the terminate could come back without the checkpoint.
                fsync_tree(Path(where))
        except BaseException as error:
            self._save_failed(state.global_step, error)
            raise
        seconds = time.monotonic() - self._requested_at
        self._requested_at = None
        result = self.guard.saved(state.global_step, seconds, where=where)
        self.saved_steps.append(state.global_step)
        if result.exit:
            control.should_training_stop = True
            self._stopped = True
            if args.save_total_limit == 1 and self._limited is None:
                # train() ends by deleting every checkpoint but the best with a limit of 1
                # (load_best_model_at_end): it deleted the exit's own, fsynced and acked, and
                # the job resumed from the best one, up to an evaluation interval back.
                # Put back in `_finish`, once train() is past that clean-up.
                self._limited = args
                args.save_total_limit = None
        return control

    def _mark_exit_save(self, folder: Path, step: int) -> None:
        """An exit's save says so in its checkpoint (`forewarn.json`), as the guard's store's
        generations do: a resume from it lost no step (`_resume_figures`). Written before
        the fsync of the folder, so the ack finds it durable."""
        if not self.guard._exit_metadata(step, None):
            return
        mark = folder / _EXIT_MARK
        # Each rank that has the folder (a shared filesystem) writes its own copy under its
        # own name: one name for all, a rank's replace found the other's moved away.
        partial = mark.with_name(f"{mark.name}.{os.getpid()}.tmp")
        try:
            partial.write_text(json.dumps({EXIT_SAVE: True, "global_step": step}), encoding="utf-8")
            os.replace(partial, mark)
        except OSError as exc:  # the checkpoint is whole without it: the resume says unknown
            log.warning("forewarn: cannot mark %s as an exit's save: %s", folder, exc)

    def _report_failure_of(self, trainer: Trainer | None) -> None:
        """Wrap `trainer._save_checkpoint` for the save just asked for: raised out of train()
        unreported, the agent never learnt that the job left without its state, and
        exit_code said 0 (a completed Kubernetes Job, never resumed) where 1 is owed."""
        if trainer is None or getattr(trainer._save_checkpoint, "_forewarn_reports", False):
            return
        own = vars(trainer).get("_save_checkpoint")  # an instance attribute put back after
        save = trainer._save_checkpoint

        def reported(*args: Any, **kwargs: Any) -> Any:
            _put_back(trainer, own)  # for this one save only
            self._wrapped = None
            _unrank_a_cut_evaluation(trainer)
            try:
                return save(*args, **kwargs)
            except BaseException as error:
                if self._requested_at is not None:
                    self._save_failed(trainer.state.global_step, error)
                raise

        reported._forewarn_reports = True  # type: ignore[attr-defined]
        reported._forewarn_own = own  # type: ignore[attr-defined]
        trainer._save_checkpoint = reported  # type: ignore[method-assign]
        self._wrapped = trainer

    def _save_failed(self, step: int, error: BaseException) -> None:
        """Our save raised, and takes train() down with it: ack it failed (exit_code 1 for an
        exit's save) and close the guard, as train() does not come back to on_train_end."""
        self._requested_at = None
        self.guard.save_failed(step, error)
        self._close_guard()

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        if self._stopped:
            # The Trainer ends the epoch the exit cut short like any other: with
            # eval_strategy/save_strategy "epoch" it evaluated, then wrote the checkpoint just
            # saved and acked a second time, in place, in the notice's last seconds (a kill
            # then left it half-rewritten, with the trainer_state.json of the first save).
            control.should_evaluate = False
            control.should_save = False
        return control

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        self._finish()
        return control

    def _finish(self) -> None:
        """train() is over, returned or raised: the Trainer's methods and the signal
        handlers as they were."""
        trainer, self._wrapped = self._wrapped, None
        if trainer is not None:
            # A save asked for that the Trainer never made: its method as it was.
            wrapper = vars(trainer).get("_save_checkpoint")
            if getattr(wrapper, "_forewarn_reports", False):
                _put_back(trainer, wrapper._forewarn_own)  # type: ignore[union-attr]
        self._requested_at = None
        self._training = False
        limited, self._limited = self._limited, None
        if limited is not None:
            limited.save_total_limit = 1
        self._close_guard()


def _attach_when_added() -> None:
    """Wrap `CallbackHandler.add_callback` (once per process, for every Trainer) so that a
    callback of this module is attached to its Trainer however it gets there. Transformers
    tells a callback neither that it was added nor that train() raised, and on_train_begin
    runs inside the train() call, too late to wrap it: a callback added after the Trainer was
    made (never told on_init_end) left the first train() it ran in unwrapped, and that raised
    with the guard open (its SIGTERM handler installed, a notice pending unanswered). The
    handler's add_callback is the one step every way in passes through: `callbacks=[...]`
    (the handler's __init__ adds each), `trainer.add_callback`, a Trainer subclass's own
    add_callback that skips the Trainer's, a handler a subclass builds in place of the
    Trainer's. Only callbacks with `_forewarn_attach` are touched; the Trainer is found up the
    stack. Done on import, not when a callback is made: `add_callback(ForewarnTrainerCallback)`
    makes it inside. A reload finds the wrapper in place and keeps it."""
    if getattr(CallbackHandler.add_callback, "_forewarn_attaches", False):
        return
    add_callback = CallbackHandler.add_callback

    @functools.wraps(add_callback)
    def attaching(self: CallbackHandler, callback: Any) -> Any:
        held = {id(known) for known in self.callbacks}
        result = add_callback(self, callback)
        for added in self.callbacks:  # a class given is made by the handler
            # Looked up on the class: a callback answering every attribute (a mock) is not ours.
            attach = getattr(type(added), "_forewarn_attach", None)
            if id(added) not in held and attach is not None:
                attach(added, _calling_trainer())
        return result

    attaching._forewarn_attaches = True  # type: ignore[attr-defined]
    CallbackHandler.add_callback = attaching  # type: ignore[method-assign]


_attach_when_added()


def _put_back(trainer: Trainer, own: Any) -> None:
    if own is None:
        vars(trainer).pop("_save_checkpoint", None)
    else:
        trainer._save_checkpoint = own  # type: ignore[method-assign]


_LOADER_BUILDERS = ("get_eval_dataloader", "get_test_dataloader")


def _calling_trainer() -> Trainer | None:
    # Callbacks are not given their Trainer; the one running this event is up the stack.
    frame = sys._getframe(1)
    for _ in range(32):
        if frame is None:
            break
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _protect_evaluation_loaders(trainer: Trainer | None) -> None:
    if trainer is None:
        return
    for name in _LOADER_BUILDERS:
        build = getattr(trainer, name, None)
        if build is not None and not getattr(build, "_forewarn_protects", False):
            cut = trainer if name == "get_eval_dataloader" else None
            setattr(trainer, name, _protecting(build, cut))


# Set on the Trainer (its instance dict) by on_prediction_step once an exit is to be saved:
# the evaluation DataLoader's iteration ends after the batch in hand.
_CUT = "_forewarn_cut_evaluation"
_CUTTING_CLASSES: dict[type, type] = {}


def _cut_evaluation_short(loader: Any, trainer: Trainer) -> None:
    """Make `loader` (the Trainer's evaluation DataLoader, accelerate's wrapper of one) end
    its pass once `trainer` is marked: the exit's save waited for the whole evaluation (an
    8 s pass under a 10 s lead was saved 9.2 s after the notice; a longer one lost every step
    since the last checkpoint). Its class is swapped for a subclass, as accelerate's
    `__class__` property stands in the way of an assignment."""
    base = type(loader)
    if getattr(base, "_forewarn_cuts", False):
        loader._forewarn_trainer = weakref.ref(trainer)
        return
    cutting = _CUTTING_CLASSES.get(base)
    if cutting is None:

        def __iter__(self: Any) -> Iterator[Any]:
            owner = self._forewarn_trainer()
            best = None
            if owner is not None:
                vars(owner).pop(_CUT, None)  # a mark from an earlier pass is no cut of this one
                vars(owner).pop(_CUT_BEST, None)
                best = _best_of(owner.state)
            batches = base.__iter__(self)
            for count, batch in enumerate(batches, 1):
                yield batch
                if owner is not None and vars(owner).pop(_CUT, False):
                    batches.close()
                    # accelerate's loader leaves the pass registered when closed early
                    # (its end() runs only at the pass's end): training would count it
                    # as still in an evaluation.
                    end = getattr(self, "end", None)
                    if callable(end):
                        end()
                    # The Trainer ranks the pass's metrics (`metric_for_best_model`) before
                    # the save: put back as they were before it by the save (`_report_failure_of`).
                    vars(owner)[_CUT_BEST] = best
                    log.warning(
                        "forewarn: evaluation at step %s cut short after %d batch(es) for "
                        "the exit's save; its metrics cover those batches only",
                        owner.state.global_step,
                        count,
                    )
                    return

        cutting = type(base.__name__, (base,), {"__iter__": __iter__, "_forewarn_cuts": True})
        _CUTTING_CLASSES[base] = cutting
    try:
        # object's own __class__ setter: accelerate's DataLoaderShard has a read-only property.
        object.__dict__["__class__"].__set__(loader, cutting)
    except TypeError:  # a class whose layout differs (slots, a C type): left uncut
        return
    loader._forewarn_trainer = weakref.ref(trainer)


def _protecting(build: Callable[..., Any], cut: Trainer | None = None) -> Callable[..., Any]:
    def protected(*args: Any, **kwargs: Any) -> Any:
        loader = build(*args, **kwargs)
        protect_loader(loader)  # before the Trainer iterates it, which starts its workers
        if cut is not None:
            _cut_evaluation_short(loader, cut)
        return loader

    protected._forewarn_protects = True  # type: ignore[attr-defined]
    protected.__wrapped__ = build  # type: ignore[attr-defined]
    return protected


# The Trainer's best (metric, step, checkpoint) from before an evaluation the exit cut short.
_CUT_BEST = "_forewarn_best_before_cut"
_BEST_FIELDS = ("best_metric", "best_global_step", "best_model_checkpoint")


def _best_of(state: Any) -> tuple[Any, ...]:
    return tuple(getattr(state, name, None) for name in _BEST_FIELDS)


def _unrank_a_cut_evaluation(trainer: Trainer) -> None:
    """Before the exit's save: the Trainer's best as it was before the evaluation the exit cut
    short. It ranked that pass on the batches run (`metric_for_best_model`): measured, a pass
    cut after 2 of 10 batches (`eval_loss` 3.5, the whole pass's 19.5) became the best, in the
    exit checkpoint's `trainer_state.json` too, so the resumed job ranked every whole pass
    after it worse, `load_best_model_at_end` loaded the exit's weights as the best, and with
    `save_total_limit` the true best was no longer kept from the rotation."""
    best = vars(trainer).pop(_CUT_BEST, None)
    if best is None:
        return
    for name, value in zip(_BEST_FIELDS, best, strict=True):
        if hasattr(trainer.state, name):
            setattr(trainer.state, name, value)


def _mark_cut(trainer: Trainer | None) -> None:
    if trainer is not None:
        vars(trainer)[_CUT] = True


_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
# Beside the Trainer's files in the checkpoint of an exit's save (see `_mark_exit_save`).
_EXIT_MARK = "forewarn.json"
# The Trainer writes this last: a checkpoint directory without it is a save cut short.
_TRAINER_STATE = "trainer_state.json"


def last_checkpoint(output_dir: str | os.PathLike[str]) -> str | None:
    """The newest `checkpoint-<step>` in `output_dir` that the Trainer finished writing, for
    `trainer.train(resume_from_checkpoint=last_checkpoint(args.output_dir))`; None when there
    is none. `resume_from_checkpoint=True` takes the newest directory whatever it holds, and
    a save killed mid-write (a terminate whose deadline ran out) then fails every restart;
    such a directory is logged and passed over here."""
    try:
        names = os.listdir(output_dir)
    except FileNotFoundError:
        return None
    found = sorted(
        ((int(match.group(1)), name) for name in names if (match := _CHECKPOINT.match(name))),
        reverse=True,
    )
    for step, name in found:
        folder = os.path.join(output_dir, name)
        try:
            with open(os.path.join(folder, _TRAINER_STATE), encoding="utf-8") as handle:
                state = json.load(handle)
            if not isinstance(state, dict) or state.get("global_step") != step:
                raise ValueError(f"its {_TRAINER_STATE} is not for step {step}")
        # RecursionError: a state nested a few thousand deep; escaping, it failed every restart.
        except (OSError, ValueError, RecursionError) as exc:
            log.warning("forewarn: %s is incomplete, trying an older checkpoint: %s", folder, exc)
            continue
        return folder
    return None


__all__ = ["ForewarnTrainerCallback", "last_checkpoint"]
