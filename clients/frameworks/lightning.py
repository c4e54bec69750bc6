"""A PyTorch Lightning Callback that wires CheckpointGuard into Lightning's own checkpointing.

    trainer = L.Trainer(callbacks=[ForewarnCallback(dirpath="ckpt/")])

After each training batch it asks the guard; when a save is due it calls
`trainer.save_checkpoint` (Lightning's collective save, every rank at the same step thanks to
the guard's rank agreement), acks the agent, and stops the trainer on terminate or SIGTERM.
Its guard is made when the sanity check, training or fit's validation starts, so its SIGTERM
handler replaces Lightning's from then on (Lightning's own ends `fit` with `SIGTERMException`,
a SystemExit of code 0, without a checkpoint); a SIGTERM Lightning's handler took before then
(while fit sets up its data: a resumed fit runs no sanity check) is handed to the guard.
Every DataLoader of fit() gets `worker_init_fn()` (chaining its own) before its workers start,
so that a job-wide SIGTERM (systemd, torchrun) does not end them before the save.
With `accumulate_grad_batches` it asks only after a batch that made the optimizer step: the
save comes at the end of the step (a step cannot be interrupted), not inside it.
After each validation batch of `fit()` it asks `guard.due_in_eval`: an exit that arrives
mid-validation is saved there and then (the state of the last training step), instead of
after a validation pass that may outlast the deadline, and the pass ends after that batch (a
WARNING says its metrics cover the batches run; Lightning's end of the pass, its
`on_validation_end` hooks, still runs), then fit() stops: Lightning ran the rest of the pass,
and a job validating at its deadline was SIGKILLed (exit 137). After an exit's save no
further validation pass runs (Lightning would run one when `should_stop` is set), and fit()
stops before the trainer's `min_steps` or `min_epochs` (Lightning would train on to them).
Lightning's own ModelCheckpoint with a `monitor` ranks nothing after the exit's save (the pass
or epoch the exit cut short has metrics of the batches run), its `save_last` still writes the
exit's step (one that saved nothing at that step has its `last` made the exit's file as
training ends: a hard link, no second save; with dcp=True, which writes no Lightning
checkpoint, it stays older and a WARNING says how far back), and its saves of that step are
marked as the exit's save. A
`validate()`, `test()` or `predict()` outside `fit()` asks nothing, makes no guard and leaves
a guard given
(`guard=`) open: it trains nothing worth saving, and a save there (`step-{global_step}`, step 0
with no fit, or a loaded module's step) wrote over the training checkpoint of that name in
`dirpath`.
A notice that comes then is replayed to the guard the next `fit()` makes (or waits in the
guard given), which saves at the first step after the agent's replay reaches it; a SIGTERM
then is Lightning's, as without the callback (it ends the pass with `SIGTERMException`).
`fit()` returns normally:
end the process with `sys.exit(callback.exit_code)` (143 after an exit's save) so the
platform restarts the job. A save of its own that raises is acked failed (`save_failed`:
`exit_code` 1 for an exit's) and raised out of `fit()`. `fit()` raising runs no teardown hook:
the callback closes its guard in `on_exception` instead, and acks failed a notice that came
since the last batch's check, or an exit not saved yet (`guard.loop_failed`), as no save will
answer it.

With `store=CheckpointStore(...)` and `dcp=True` it saves through torch.distributed.checkpoint
into the store instead (`save_dcp`: every rank writes its shards, the generation commits once
all are in; FSDP and tensor-parallel modules save sharded): `{"model": module.state_dict(),
"optimizers": [each optimizer's state_dict()], "global_step": step}`. Load the weights back
with `load_dcp(store.latest(), {"model": module.state_dict()})` before `fit`. That is not a
Lightning resume: `fit` makes new optimizers (`configure_optimizers`), so optimizer state loaded
before it is dropped, and it counts steps from 0 again (measured: after a save at step 21, a
`fit(max_steps=40)` ran 40 steps and saved steps 10, 20, 30 and 40). Resume a run
with Lightning's own checkpoints (`dirpath`, then `trainer.fit(model, ckpt_path=...)`); an exit
asked for during that restore is answered by the checkpoint resumed from, before any step.
Such a resume reports its restore time (Lightning's, from loading the file until the loops are
restored) and, from an exit's save of this callback (marked `forewarn_exit_save` in the
checkpoint) with no newer one of its name beside it, `steps_lost=0` to the agent.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import string
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..checkpoint.needs import extra_missing

try:
    import lightning.pytorch as pl
except ModuleNotFoundError as missing:
    if missing.name != "lightning":
        raise
    try:  # the older package name
        import pytorch_lightning as pl  # type: ignore[no-redef]
    except ModuleNotFoundError as older:
        if older.name != "pytorch_lightning":
            raise
        # Not the older name's error, which sent users to install a package they do not use.
        raise extra_missing("lightning", __name__, "lightning") from None

from ..checkpoint.local import fsync_tree
from ..guard import CheckpointGuard, SaveResult
from ..guard_state import EXIT_SAVE
from ..workers import protect_loader
from ._guarded import GuardHolder

log = logging.getLogger("forewarn.checkpoint")


def _add_lightnings_worker_seeding(dataloader: Any, rank: int) -> None:
    """What Lightning does to a DataLoader right after process_dataloader: under
    `seed_everything(seed, workers=True)` one with no `worker_init_fn` gets Lightning's, which
    seeds numpy and random apart in each worker. Done here first, as Lightning would: given
    forewarn's there, Lightning added none, and every worker drew the same numbers."""
    try:
        from lightning.fabric.utilities.data import _auto_add_worker_init_fn
    except ImportError:
        try:  # the older package name
            from lightning_fabric.utilities.data import (
                _auto_add_worker_init_fn,
            )
        except ImportError:  # a Lightning without it: nothing of its own to add
            return
    _auto_add_worker_init_fn(dataloader, rank)


class ForewarnCallback(GuardHolder, pl.Callback):
    def __init__(
        self,
        dirpath: str | Path | None = None,
        guard: CheckpointGuard | None = None,
        filename: str = "step-{step:08d}.ckpt",
        *,
        store: Any = None,
        dcp: bool = False,
        **guard_options: Any,
    ) -> None:
        if dcp and store is None:
            raise ValueError("dcp=True saves into a CheckpointStore: pass store=")
        if not dcp and dirpath is None:
            raise ValueError("dirpath is needed unless dcp=True saves into a store")
        self.dirpath = Path(dirpath) if dirpath is not None else None
        self.filename = filename
        self.store = store
        self.dcp = dcp
        self._hold_guard(guard, guard_options)
        self.saved_paths: list[Path] = []
        self.saved_generations: list[Any] = []  # with dcp=True: the committed generations
        self._exiting = False
        self._limit_val_batches: int | float | None = None  # the trainer's, while exiting
        # The trainer's (min_epochs, min_steps), lifted while exiting: see `_write`.
        self._minimums: tuple[Any, Any] | None = None
        # The strategy whose process_dataloader fit() goes through is wrapped, and what its
        # instance held under that name before (see `setup`).
        self._wrapped: tuple[Any, Any] | None = None
        # The checkpoint connector whose resume_start and resume_end are timed, and what its
        # instance held under those names before (see `_time_the_restore`).
        self._timed: tuple[Any, Any, Any] | None = None
        self._restore_started: float | None = None
        self._restore_seconds: float | None = None  # of the restore this fit() made
        self._restored_exit_save = False  # the checkpoint it restored was an exit's save
        self._marking: Any = None  # what `on_save_checkpoint` adds to the save being written
        # After an exit's save: its step and the marking Lightning's own ModelCheckpoint's
        # saves of that step get too (`on_save_checkpoint`).
        self._exit_save: tuple[int, Any] | None = None
        # The ModelCheckpoints whose ranked saves are held after an exit's save, and what each
        # instance held under `_save_topk_checkpoint` before.
        self._held: list[tuple[Any, Any]] = []

    @staticmethod
    def dcp_state(module: Any, optimizers: list[Any] | tuple[Any, ...] = ()) -> dict[str, Any]:
        """What the DCP path saves (and, filled in place by `load_dcp`, restores)."""
        return {
            "model": module.state_dict(),
            "optimizers": [optimizer.state_dict() for optimizer in optimizers],
        }

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # systemd's KillMode=control-group and torchrun send the SIGTERM to the DataLoader
        # workers too: unprotected, they died, and torch's SIGCHLD handler raised "DataLoader
        # worker (pid ...) is killed by signal: Terminated" out of fit(), inside the exit's save
        # or at the next batch before it (the process exited 1, the step unsaved). Every
        # DataLoader of fit() goes through the strategy's process_dataloader after Lightning
        # has made it (a DistributedSampler added) and before its workers start: there it
        # gets `worker_init_fn()`, chaining its own, as the transformers callback does.
        if stage != "fit" or self._wrapped is not None:
            return
        strategy = trainer.strategy
        process = strategy.process_dataloader

        def protected(dataloader: Any) -> Any:
            dataloader = process(dataloader)
            _add_lightnings_worker_seeding(dataloader, trainer.global_rank)
            protect_loader(dataloader)
            return dataloader

        self._wrapped = (strategy, strategy.__dict__.get("process_dataloader"))
        strategy.process_dataloader = protected  # type: ignore[method-assign]
        self._time_the_restore(trainer)

    def _time_the_restore(self, trainer: pl.Trainer) -> None:
        """Time the restore of a resumed fit (`ckpt_path=`): from the connector's
        `resume_start` (the file's load) to its `resume_end` (model, callbacks, optimizers,
        schedulers and loops restored), for the `restore=` of the resume `guard.resumed`
        reports. Without it the agent logged `restore=none`, though Lightning had restored."""
        self._restore_started = self._restore_seconds = None
        self._restored_exit_save = False
        connector: Any = getattr(trainer, "_checkpoint_connector", None)
        start = getattr(connector, "resume_start", None)
        end = getattr(connector, "resume_end", None)
        if not callable(start) or not callable(end):  # another Lightning: restore=none
            return

        def resume_start(*args: Any, **kwargs: Any) -> Any:
            self._restore_started = time.monotonic()
            return start(*args, **kwargs)

        def resume_end(*args: Any, **kwargs: Any) -> Any:
            result = end(*args, **kwargs)
            if self._restore_started is not None and trainer.ckpt_path:
                self._restore_seconds = time.monotonic() - self._restore_started
            self._restore_started = None
            return result

        held = vars(connector)
        self._timed = (connector, held.get("resume_start"), held.get("resume_end"))
        connector.resume_start = resume_start
        connector.resume_end = resume_end

    def _unwrap(self) -> None:
        if self._timed is not None:
            connector, start, end = self._timed
            self._timed = None
            for name, before in (("resume_start", start), ("resume_end", end)):
                if before is None:
                    vars(connector).pop(name, None)
                else:
                    setattr(connector, name, before)
        if self._wrapped is None:
            return
        strategy, before = self._wrapped
        self._wrapped = None
        if before is None:
            strategy.__dict__.pop("process_dataloader", None)
        else:
            strategy.process_dataloader = before

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # Only in the save this callback writes for an exit (see `_write`), and in the `last`
        # save of that step Lightning's own ModelCheckpoint writes after it (the same state: a
        # resume from it, `fit(ckpt_path="last")`, lost no step either); ModelCheckpoint calls
        # this for its every save.
        if self._marking:
            checkpoint.update(self._marking)
        elif self._exit_save is not None and self._exit_save[0] == trainer.global_step:
            checkpoint.update(self._exit_save[1])

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self._restored_exit_save = checkpoint.get(EXIT_SAVE) is True

    def on_sanity_check_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._install(trainer)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if _fitting(trainer):
            self._install(trainer)

    def _install(self, trainer: pl.Trainer) -> None:
        # The guard's signal handlers replace Lightning's, which it installs just before these
        # hooks. Made only at the first batch's end, the guard left a SIGTERM during the sanity
        # check or the first training step to Lightning alone: fit() raised SIGTERMException
        # (a SystemExit with code 0) without a checkpoint, and the job counted as done.
        guard = self.guard
        # A guard made before fit (guard=): Lightning wrapped its handler with its own, and
        # after the guard's save raised SIGTERMException all the same (the process exited 0).
        # Lightning puts the guard's handler back when fit ends.
        chained = getattr(signal.getsignal(signal.SIGTERM), "signal_handlers", ())
        if (
            isinstance(chained, (list, tuple))
            and guard._on_signal in chained
            and threading.current_thread() is threading.main_thread()
        ):
            signal.signal(signal.SIGTERM, guard._on_signal)
        # A SIGTERM between Lightning's handler and this one (while fit sets up its training
        # data and starts its workers, waits for the other ranks, or, in a resumed fit, which
        # runs no sanity check, everything before the first step) set Lightning's flag alone:
        # the first batch raised SIGTERMException, a SystemExit of code 0, without a save (with
        # a guard given, after its save), and the job counted as done. Now the guard's.
        connector: Any = getattr(trainer, "_signal_connector", None)
        if (
            getattr(connector, "received_sigterm", False) is True
            and signal.getsignal(signal.SIGTERM) == guard._on_signal
        ):
            connector.received_sigterm = False
            guard._on_signal(signal.SIGTERM, None)  # a guard that saw it already ignores this

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._install(trainer)
        if trainer.global_step:
            # Resumed from a checkpoint (ckpt_path=): periodic saves count from there (from step
            # 0 the first step after every resume saved again).
            step = trainer.global_step
            self.guard.resumed(
                step,
                restore_seconds=self._restore_seconds,
                steps_lost=self._steps_lost(trainer, step),
            )
            # An exit asked for while fit restored (a terminate, a SIGTERM) waited for the
            # first step, which a compile can make outlast the notice's lead, and for a full
            # save of it. The checkpoint fit resumed from holds this step: it answers the exit
            # now, with nothing written. Asked on every rank: with rank agreement, a collective.
            if self.guard.due(step):
                where = f"{trainer.ckpt_path} (already there)" if trainer.ckpt_path else None
                self._answered(trainer, self.guard.saved(step, 0.0, where=where))

    def _steps_lost(self, trainer: pl.Trainer, step: int) -> int | None:
        """0 when fit() resumed from an exit's save of this callback (the job stopped at its
        step) and no newer checkpoint of its name is beside it: one there means the job
        trained past this step (the newer one did not load, or was passed over). None, not
        known, otherwise (a periodic or a drain's save: the job may have trained on)."""
        if not self._restored_exit_save or not trainer.ckpt_path:
            return None
        resumed = Path(trainer.ckpt_path)
        named = _step_of_name(self.filename)
        try:
            names = [entry.name for entry in resumed.parent.iterdir()]
        except OSError:
            return None
        for name in names:
            found = named.fullmatch(name)
            if found is not None and int(found.group(1)) > step:
                return None
        return 0

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._exit_save is not None and self._exit_save[0] == trainer.global_step:
            self._last_is_the_exit_save(trainer)

    def _last_is_the_exit_save(self, trainer: pl.Trainer) -> None:
        """After an exit's save: each of Lightning's ModelCheckpoints with `save_last` that saved
        nothing at the exit's step gets its `last` checkpoint made of the exit's file, a hard
        link (a copy across filesystems; with `save_last="link"` its symbolic link), with no
        second save inside the lead. It saves only beside a save of its own (a validation pass,
        `every_n_train_steps`), and the exit came between those: its `last.ckpt` held the step
        of its previous save (measured: step 10 after an exit's save of step 16), and
        `fit(ckpt_path="last")`, the resume a `save_last=True` user writes, trained those
        steps again. Runs before its own `on_train_end`, on every rank."""
        step = trainer.global_step
        exit_file = self.saved_paths[-1] if self.saved_paths and not self.dcp else None
        checkpoint: Any
        for checkpoint in trainer.checkpoint_callbacks:
            if not isinstance(checkpoint, pl.callbacks.ModelCheckpoint) or not checkpoint.save_last:
                continue  # another Checkpoint keeps its own `last`, if any
            missing = [name for name in _LAST_NEEDS if not hasattr(checkpoint, name)]
            if missing:
                log.warning(
                    "forewarn: %s has no %s (another Lightning version): its last "
                    "checkpoint may not be the exit's save of step %s; resume from %s",
                    type(checkpoint).__name__,
                    ", ".join(missing),
                    step,
                    exit_file or "the exit's save",
                )
                continue
            if checkpoint._last_global_step_saved == step:
                continue  # it saved this step itself, its `last` with it
            if exit_file is None:
                self._warn_last_is_older(checkpoint, step)
                continue
            checkpoint._last_checkpoint_saved = str(exit_file)  # what save_last="link" links to
            vars(checkpoint)["_save_checkpoint"] = _linking_to(checkpoint, exit_file)
            try:
                checkpoint._save_last_checkpoint(trainer, checkpoint._monitor_candidates(trainer))
            finally:
                vars(checkpoint).pop("_save_checkpoint", None)

    def _warn_last_is_older(self, checkpoint: Any, step: int) -> None:
        """With dcp=True the exit's save is a generation of the store (DCP shards and their
        `.metadata` in a directory, or S3 objects, holding `{"model", "optimizers",
        "global_step"}`): Lightning's restore reads one file with its loops, schedulers and
        epoch (`fit(ckpt_path=<generation>)` raised IsADirectoryError), so `last` cannot be
        made of it, and a save of Lightning's own inside the lead is the second save this
        callback avoids. Said with how far back `last` is: "resume from the store" alone hid
        the steps `fit(ckpt_path="last")` trains again, and that the store's load is no
        Lightning resume (new optimizers, steps from 0)."""
        where = self.saved_generations[-1].name if self.saved_generations else "the store"
        if checkpoint.last_model_path:
            held = checkpoint._last_global_step_saved
            last = (
                f'{checkpoint.last_model_path} holds step {held}: fit(ckpt_path="last") '
                f"trains {step - held} step(s) again"
            )
        else:
            last = 'none was written: fit(ckpt_path="last") loads nothing'
        log.warning(
            "forewarn: %s's last checkpoint is not the exit's save of step %s; %s. The exit's "
            "save is %s in %s (dcp=True), not a Lightning checkpoint (DCP shards: Lightning's "
            "restore reads one file, with its loops and schedulers), so last cannot be made "
            "of it: load its weights with load_dcp (new optimizers, steps from 0), or save "
            "without dcp=True where a Lightning resume matters",
            type(checkpoint).__name__,
            step,
            last,
            where,
            self.store.url if self.store is not None else "the store",
        )

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self._exiting or _accumulating(trainer):
            return
        if self.guard.due(trainer.global_step):
            self._save(trainer)

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._in_eval(trainer)

    def _in_eval(self, trainer: pl.Trainer) -> None:
        if not _fitting(trainer):
            # validate(), test() or predict() on their own: no training state worth a save,
            # and its name could be a training checkpoint's. A notice waits for the next fit.
            return
        if not self._exiting and self.guard.due_in_eval(trainer.global_step):
            self._save(trainer)
            if self._exiting and not trainer.sanity_checking:
                # Lightning ran the rest of the pass after the exit's save (measured: 79
                # batches of 0.1 s past a 5 s lead), and the job, still validating at the
                # deadline, was SIGKILLed: exit 137, not the 143 that says it was saved. A
                # StopIteration from a hook of the step ends Lightning's evaluation loop
                # (its own way out for `dataloader_iter` steps); the pass then ends as usual.
                loop: Any = getattr(trainer, "_active_loop", None)
                done = getattr(getattr(loop, "batch_progress", None), "current", None)
                log.warning(
                    "forewarn: validation at step %s cut short after %s batch(es) for the "
                    "exit's save; its metrics cover those batches only",
                    trainer.global_step,
                    getattr(done, "processed", "?"),
                )
                raise StopIteration

    def _save(self, trainer: pl.Trainer) -> None:
        step = trainer.global_step
        try:
            self._write(trainer, step)
        except BaseException as error:
            # Raised out of fit() unreported, the agent never learnt the job left without
            # its state, and exit_code said 0 (or the 143 of a save made). Closed here, so
            # on_exception, which comes next, acks nothing a second time.
            self.guard.save_failed(step, error)
            self._close_guard()
            raise

    def _write(self, trainer: pl.Trainer, step: int) -> None:
        started = time.monotonic()
        if self.dcp:
            from ..checkpoint.dcp import save_dcp

            state = self.dcp_state(trainer.lightning_module, trainer.optimizers)
            state["global_step"] = step
            # An exit's save is bounded as the guard's own are: a grace past the deadline. Its
            # metadata is theirs too: the exit's mark and the notices it answers, which a job
            # resumed from it reads back (`resumed`). Saved without, a job resumed from a
            # drain's generation saved again for the drain, and `steps_lost` stayed unknown.
            generation = save_dcp(
                self.store,
                step,
                state,
                metadata=self.guard._save_metadata(step, None),
                timeout=self.guard.exit_save_timeout(),
            )
            self.saved_generations.append(generation)
            where = f"{self.store.url}/{generation.name}"
        else:
            assert self.dirpath is not None
            path = self.dirpath / self.filename.format(step=step)
            # An exit's save says so in the checkpoint, as the guard's store's generations do:
            # a resume from it lost no step (`on_train_start`).
            self._marking = self.guard._exit_metadata(step, None)
            try:
                with _temporary_files_in(path.parent):
                    trainer.save_checkpoint(path)
            finally:
                self._marking = None
            if path.exists():  # on the ranks that wrote it (a sharded save: a directory)
                # Lightning leaves the bytes in the page cache: acked without this, a machine
                # powered off after the terminate could come back without the checkpoint.
                fsync_tree(path)
            self.saved_paths.append(path)
            where = str(path)
        self._answered(trainer, self.guard.saved(step, time.monotonic() - started, where=where))

    def _answered(self, trainer: pl.Trainer, result: SaveResult) -> None:
        if result.exit:
            self._exiting = True  # saved once; the rest of this pass must not save again
            trainer.should_stop = True
            # The job leaves at this step: a save of it from here on is the exit's too.
            self._exit_save = (trainer.global_step, {EXIT_SAVE: True})
            self._hold_model_checkpoints(trainer)
            # Lightning validates once more when should_stop is set (for early stopping): a
            # whole pass between the final save and the exit. Put back in teardown.
            if self._limit_val_batches is None:
                self._limit_val_batches = trainer.limit_val_batches
                trainer.limit_val_batches = 0
            # Lightning ignores should_stop until min_steps and min_epochs are met ("Training
            # will continue..."): the job trained on after the exit's save, saving nothing
            # more, into the platform's SIGKILL. Put back in teardown, for a later fit().
            fit_loop = trainer.fit_loop
            if self._minimums is None:
                self._minimums = (fit_loop.min_epochs, fit_loop.epoch_loop.min_steps)
                fit_loop.min_epochs = 0
                fit_loop.epoch_loop.min_steps = None

    def _hold_model_checkpoints(self, trainer: pl.Trainer) -> None:
        """After an exit's save, Lightning's own ModelCheckpoint with a `monitor` ranks nothing
        more in this fit(): it ranked the validation pass the exit cut short on the batches run
        (measured: `monitor="val_loss", save_top_k=1` ranked a pass cut after 2 of 10 batches
        best, wrote it, and deleted the whole pass's best checkpoint), or an epoch the exit cut
        short, and each ranked save is one more full save inside the exit's lead. Its
        `save_last` still writes `last.ckpt` of the exit's step (a `fit(ckpt_path="last")`
        resumes from it), marked as the exit's save (`on_save_checkpoint`); with
        `save_last="link"` it links to this callback's exit checkpoint, with no second save.
        Put back in `_finish`."""
        if self._held:
            return
        exit_file = self.saved_paths[-1] if self.saved_paths and not self.dcp else None
        checkpoint: Any
        for checkpoint in trainer.checkpoint_callbacks:
            ranked = getattr(checkpoint, "_save_topk_checkpoint", None)
            if not callable(ranked) or not hasattr(checkpoint, "_last_global_step_saved"):
                if isinstance(checkpoint, pl.callbacks.ModelCheckpoint) and checkpoint.monitor:
                    # Another Lightning version's: it may rank the pass the exit cut short.
                    log.warning(
                        "forewarn: %s has no _save_topk_checkpoint or _last_global_step_saved "
                        "(another Lightning version): it may rank the validation pass or epoch "
                        "the exit cut short",
                        type(checkpoint).__name__,
                    )
                continue  # not Lightning's ModelCheckpoint as this one knows it: left as is
            self._held.append((checkpoint, vars(checkpoint).get("_save_topk_checkpoint")))
            checkpoint._save_topk_checkpoint = _ranking_nothing(checkpoint, exit_file)

    def _release_model_checkpoints(self) -> None:
        for checkpoint, before in self._held:
            if before is None:
                vars(checkpoint).pop("_save_topk_checkpoint", None)
            else:
                checkpoint._save_topk_checkpoint = before
        self._held = []

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        # fit() (validate, test, predict) raising runs no teardown hook: the guard stayed open,
        # its subscriber and ticker running, and a notice that came since the last batch's
        # check was never answered (a terminate's exit_code 0). No save will answer it now.
        if not _fitting(trainer):
            return  # the guard is no part of a validate(), test() or predict() on its own
        self._unwrap()
        if self._guard is not None:  # not the property: it would make a guard
            self._guard.loop_failed(trainer.global_step, exception)
        self._finish(trainer)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if _fitting(trainer):
            # Not after a validate() on its own: it would close a guard given before fit.
            self._finish(trainer)

    def _finish(self, trainer: pl.Trainer) -> None:
        # The exit's save ended this run only: a later fit() with this callback (training on
        # once the machine stayed) saved nothing, its own terminate unanswered.
        self._unwrap()
        self._release_model_checkpoints()
        self._exit_save = None
        self._exiting = False
        if self._limit_val_batches is not None:
            trainer.limit_val_batches = self._limit_val_batches
            self._limit_val_batches = None
        if self._minimums is not None:
            trainer.fit_loop.min_epochs, trainer.fit_loop.epoch_loop.min_steps = self._minimums
            self._minimums = None
        self._close_guard()


def _ranking_nothing(checkpoint: Any, exit_file: Path | None) -> Any:
    """What a ModelCheckpoint's `_save_topk_checkpoint` does after the exit's save: with a
    `monitor`, it ranks and writes nothing, and has the `last` save that follows it in each of
    its hooks write `last.ckpt` of this step (with `save_last="link"`: link it to the exit's
    checkpoint `exit_file`); without one (its top-k are the newest saves, ranked on no metric)
    it saves as before."""
    own = checkpoint._save_topk_checkpoint

    def ranked(trainer: Any, monitor_candidates: Any) -> None:
        if checkpoint.monitor is None:
            own(trainer, monitor_candidates)
            return
        if not checkpoint.save_last:
            return
        if checkpoint.save_last == "link":
            folder = str(checkpoint.dirpath or "")
            if exit_file is None or not folder or "://" in folder:
                return  # no file to link to (a DCP save), or no local folder: Lightning's link
            # Its link is made where its first save would have made the folder.
            Path(folder).mkdir(parents=True, exist_ok=True)
            checkpoint._last_checkpoint_saved = str(exit_file)
        # Read by its hooks as "a checkpoint of this step was saved": the `last` one follows.
        checkpoint._last_global_step_saved = trainer.global_step

    return ranked


# What `_last_is_the_exit_save` uses of Lightning's ModelCheckpoint (private: pinned by
# tests/clients/frameworks/test_lightning.py, which fails on a Lightning without them).
_LAST_NEEDS = (
    "_last_global_step_saved",
    "_last_checkpoint_saved",
    "_save_last_checkpoint",
    "_save_checkpoint",
    "_monitor_candidates",
)


def _linking_to(checkpoint: Any, exit_file: Path) -> Any:
    """A ModelCheckpoint's `_save_checkpoint` that makes `filepath` the exit's checkpoint file
    `exit_file` instead of saving again (see `ForewarnCallback._last_is_the_exit_save`)."""

    def save(trainer: Any, filepath: str) -> None:
        if trainer.is_global_zero:  # the rank that wrote the exit's file
            _same_file(exit_file, str(filepath))
        trainer.strategy.barrier()
        checkpoint._last_global_step_saved = trainer.global_step
        checkpoint._last_checkpoint_saved = str(filepath)

    return save


def _same_file(exit_file: Path, filepath: str) -> None:
    """`filepath` made `exit_file` (a hard link, or a copy where none can be made), put in
    place by a rename, durable; a warning where it cannot be (a sharded save's directory, a
    remote folder): the `last` file there is then older than the exit's save."""
    target = Path(filepath)
    if "://" in filepath or not exit_file.is_file():
        log.warning(
            "forewarn: %s is not the exit's save (%s is not a local file beside it): resume "
            "from %s",
            filepath,
            exit_file,
            exit_file,
        )
        return
    if target.resolve() == exit_file.resolve():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.forewarn-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    try:
        os.link(exit_file, temporary)
    except OSError:  # another filesystem, or one without hard links
        shutil.copyfile(exit_file, temporary)
    os.replace(temporary, target)
    fsync_tree(target)


@contextlib.contextmanager
def _temporary_files_in(folder: Path) -> Iterator[None]:
    """Lightning writes a checkpoint file to a temporary file (`tempfile.mkstemp()`, in TMPDIR)
    and moves it to its name. With TMPDIR on another filesystem (a tmpfs, a container's own
    layer beside a mounted volume) the move is a copy into the final name, and a SIGKILL at the
    deadline mid-copy left a truncated `step-*.ckpt` that every resume then failed to load
    (measured: 1 MiB of 144 MB). Made in the checkpoint's own folder, the move is a rename; a
    save cut short leaves only its `tmp*` file there."""
    folder.mkdir(parents=True, exist_ok=True)
    previous = tempfile.tempdir
    tempfile.tempdir = str(folder)
    try:
        yield
    finally:
        tempfile.tempdir = previous


def _step_of_name(filename: str) -> re.Pattern[str]:
    """What a checkpoint file named by `filename` (`step-{step:08d}.ckpt`) looks like, its
    step the first group; other fields match anything."""
    parts = []
    for literal, field, _spec, _conversion in string.Formatter().parse(filename):
        parts.append(re.escape(literal))
        if field is not None:
            parts.append(r"(\d+)" if field == "step" else ".*?")
    if r"(\d+)" not in parts:
        return re.compile(r"(?!)")  # no step in the name: never newer
    return re.compile("".join(parts))


def _fitting(trainer: pl.Trainer) -> bool:
    """Whether `trainer` runs `fit()` (its sanity check and validation included), not a
    `validate()`, `test()` or `predict()` of its own."""
    return bool(trainer.state.fn == "fit")


def _accumulating(trainer: pl.Trainer) -> bool:
    """Whether the batch just trained only accumulated gradients (`accumulate_grad_batches`):
    the optimizer step it belongs to is not made yet. A checkpoint there holds the loop's place
    inside the step but not the gradients gathered so far: resumed, the step was made from the
    rest of its batches only (measured: an exit at the 2nd of 4 batches, resumed from a
    resumable DataLoader, trained different weights). The save waits for the step's end."""
    epoch_loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    should_accumulate = getattr(epoch_loop, "_should_accumulate", None)
    if should_accumulate is not None:  # knows the epoch's last batch, and DeepSpeed's own
        return bool(should_accumulate())
    return False


__all__ = ["ForewarnCallback"]
