"""The transformers callback saves on drain and stops on terminate, with a tiny model on CPU."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from forked_ranks import RankLauncher
from hypothesis import given, settings
from hypothesis import strategies as st
from support import (
    AgentProcess,
    LazyModule,
    SignalHandlers,
    eventually,
    examples,
    fsynced_at_each_ack,
    requires,
    resume_steps_lost,
)

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py); tests/agent/test_agent.py starts them fresh.
pytestmark = [requires("transformers"), pytest.mark.usefixtures("forked_agents")]
# Imported by the tests that use them, not when every xdist worker collects this file.
torch = LazyModule("torch")
hf = LazyModule("transformers")
fw = LazyModule("forewarn.clients.frameworks.transformers")
models = LazyModule("transformers_models")


def test_drain_saves_and_training_goes_on_terminate_saves_and_stops(tmp_path: Path) -> None:
    with AgentProcess(tmp_path) as agent:
        callback = models.listening_callback(agent)
        args = models.arguments(tmp_path, max_steps=10_000)
        trainer = hf.Trainer(
            model=models.Tiny(), args=args, train_dataset=models.Points(), callbacks=[callback]
        )

        def operator() -> None:
            eventually(lambda: trainer.state.global_step >= 20)
            agent.control({"op": "notify", "action": "drain", "id": "local/t-drain"})
            eventually(lambda: len(callback.saved_steps) == 1)
            first = callback.saved_steps[0]
            eventually(lambda: trainer.state.global_step >= first + 20)
            agent.control({"op": "notify", "action": "terminate", "id": "local/t-term"})

        thread = threading.Thread(target=operator, daemon=True)
        thread.start()
        trainer.train()
        thread.join(timeout=5)
        assert len(callback.saved_steps) == 2, callback.saved_steps
        for step in callback.saved_steps:
            assert (tmp_path / "out" / f"checkpoint-{step}").is_dir()
        assert trainer.state.global_step == callback.saved_steps[-1] < 10_000
        # train() returned normally: only this says the job stopped for the reclaim (exit 0
        # completed a Kubernetes Job, and training never resumed).
        assert callback.exit_code == 143


def test_an_exit_during_evaluation_saves_when_it_returns_and_stops(tmp_path: Path) -> None:
    callback = models.quiet_callback()
    model = models.AsksToExitInEvaluation()
    model.callback = callback
    args = models.arguments(tmp_path, **models.EVALUATE_EVERY_25)
    trainer = models.evaluated_trainer(model, args, callback)
    trainer.train()
    assert callback.saved_steps == [25]
    assert (tmp_path / "out" / "checkpoint-25").is_dir()
    assert trainer.state.global_step == 25, "the notice during evaluation stopped training there"


@pytest.mark.parametrize("workers", [0, 2])
def test_an_exit_during_a_long_evaluation_cuts_the_pass_short_and_saves(
    tmp_path: Path, workers: int
) -> None:
    """The exit's save waited for the whole evaluation pass: a terminate with a 10 s lead that
    came as an 8 s evaluation began (the README's loop's pass of 500 batches, two persistent
    workers) was saved 9.2 s after the notice, and a longer pass lost every step since the
    last checkpoint. The pass now ends at the batch the exit is seen, and the save follows."""
    callback = models.quiet_callback()
    model = models.AsksToExitInEvaluation()
    model.callback = callback
    options: dict[str, Any] = {"dataloader_num_workers": workers}
    if workers:
        options |= {"dataloader_persistent_workers": True, "dataloader_prefetch_factor": 4}
    args = models.arguments(tmp_path, **models.EVALUATE_EVERY_25, **options)
    trainer = models.evaluated_trainer(model, args, callback, eval_dataset=models.ManyPoints())
    trainer.train()
    assert model.eval_calls == 3, "the pass went on past the batch that saw the exit"
    assert callback.saved_steps == [25]
    assert (tmp_path / "out" / "checkpoint-25").is_dir()
    assert trainer.state.global_step == 25
    assert callback.exit_code == 143


def test_a_terminate_withdrawn_during_evaluation_saves_and_training_goes_on(
    tmp_path: Path,
) -> None:
    """The callback stopped training as soon as an evaluation saw the exit, before the save:
    a terminate the agent withdrew before that save still ended the job, where the guard
    (and the README) say save and continue, the machine is not going away."""
    with AgentProcess(tmp_path) as agent:
        callback = models.listening_callback(agent)
        eventually(lambda: callback.guard.notices is not None and callback.guard.notices.alive)
        model = models.TerminateWithdrawnInEvaluation(agent, callback)
        args = models.arguments(tmp_path, max_steps=50, **models.EVALUATE_EVERY_25)
        trainer = models.evaluated_trainer(model, args, callback, model.withdraws())
        trainer.train()
    # The first pass ended at the terminate's batch; the second, at step 50, ran whole.
    assert model.cleared and model.eval_calls == 3 + 16, model.eval_calls
    assert callback.saved_steps[0] == 25
    assert trainer.state.global_step == 50, "the withdrawn terminate did not stop training"


@pytest.mark.parametrize("trained_first", [False, True])
def test_evaluate_and_predict_outside_train_leave_no_guard_behind(
    tmp_path: Path, trained_first: bool
) -> None:
    """evaluate() and predict() made the guard at their first prediction step, before train()
    or after it had closed its own, and no on_train_end came to close it: its SIGTERM handler
    stayed installed (a job done with its evaluation ran on through the platform's SIGTERM)
    and its ticker kept running."""
    with SignalHandlers() as handlers:
        callback = fw.ForewarnTrainerCallback(notices=False, flag_file=None)
        args = models.arguments(tmp_path, max_steps=5, per_device_eval_batch_size=4)
        trainer = models.evaluated_trainer(models.Tiny(), args, callback)
        if trained_first:
            trainer.train()
            assert callback._guard is None, "train() closed its guard"
        threads = set(threading.enumerate())
        trainer.evaluate()
        trainer.predict(models.FewPoints())
        assert callback._guard is None
        assert handlers.now() == handlers.before
        assert set(threading.enumerate()) <= threads
        assert callback.exit_code == 0


def test_a_terminate_during_an_evaluate_before_train_is_saved_once_training_starts(
    tmp_path: Path,
) -> None:
    """evaluate() outside train() has nothing trained to save: the terminate that came during
    it is replayed to the guard train() makes, which saves at the first steps and stops."""
    with AgentProcess(tmp_path) as agent:
        callback = models.listening_callback(agent)
        model = models.TerminatedInEvaluation(agent)
        args = models.arguments(tmp_path, max_steps=10_000, per_device_eval_batch_size=4)
        trainer = models.evaluated_trainer(model, args, callback)
        trainer.evaluate()
        assert model.eval_calls == 16 and callback._guard is None
        trainer.train()
        assert len(callback.saved_steps) == 1, callback.saved_steps
        step = callback.saved_steps[0]
        assert trainer.state.global_step == step < 10_000
        assert (tmp_path / "out" / f"checkpoint-{step}").is_dir()
        assert callback.exit_code == 143
        eventually(lambda: "ack local/t from" in agent.output(), 10, "the ack")


def test_a_sigterm_during_an_evaluate_before_train_is_the_processs_own(tmp_path: Path) -> None:
    """evaluate() outside train() makes no guard, so a SIGTERM then reaches the handler the
    process has (here the test's; by default Python's, which ends the process): no save of a
    model nothing trained, no exit_code 143, and the train() after it is not stopped by it."""
    import signal

    received: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        callback = fw.ForewarnTrainerCallback(notices=False, flag_file=None)
        args = models.arguments(tmp_path, max_steps=5, per_device_eval_batch_size=4)
        trainer = models.evaluated_trainer(models.SigtermInEvaluation(), args, callback)
        trainer.evaluate()
        assert received == [signal.SIGTERM]
        assert callback._guard is None and callback.saved_steps == []
        assert callback.exit_code == 0
        trainer.train()
        assert trainer.state.global_step == 5 and callback.saved_steps == []
        assert callback.exit_code == 0
    finally:
        signal.signal(signal.SIGTERM, before)


def test_an_exit_during_eval_on_start_is_saved_after_the_first_step_and_resumes_exactly(
    tmp_path: Path,
) -> None:
    """`eval_on_start` evaluates before the first step, and the Trainer saves only after a
    step: the exit asked for then is written as checkpoint-1, after one step. That checkpoint
    holds that step (not step 0's weights under step 1's name, which would skip a step on
    resume): resumed, the run ends with the weights of a run never interrupted."""

    def train(folder: Path, exit_in_eval: bool, resume: str | None = None) -> Any:
        callback = models.quiet_callback()
        torch.manual_seed(0)
        model = models.AsksToExitInEvaluation()
        if exit_in_eval:
            model.callback = callback
        args = models.arguments(
            folder, max_steps=6, eval_on_start=True, per_device_eval_batch_size=4
        )
        trainer = hf.Trainer(
            model=model,
            args=args,
            train_dataset=models.SeededPoints(),
            eval_dataset=models.FewPoints(),
            callbacks=[callback],
        )
        trainer.train(resume_from_checkpoint=resume)
        return trainer, callback

    uninterrupted, _ = train(tmp_path / "a", exit_in_eval=False)
    stopped, callback = train(tmp_path / "b", exit_in_eval=True)
    assert callback.saved_steps == [1] and callback.exit_code == 143
    assert stopped.state.global_step == 1
    checkpoint = fw.last_checkpoint(tmp_path / "b" / "out")
    assert checkpoint == str(tmp_path / "b" / "out" / "checkpoint-1")
    resumed, _ = train(tmp_path / "b", exit_in_eval=False, resume=checkpoint)
    assert resumed.state.global_step == 6
    expected = uninterrupted.model.state_dict()
    for name, tensor in resumed.model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name


def test_an_exit_during_eval_on_start_with_dcp_saves_step_0(tmp_path: Path) -> None:
    """With dcp=True the callback saves itself, as the evaluation returns: step 0, before any
    step; the Trainer cannot stop before its first step, which it trains and then stops."""
    from forewarn.clients.checkpoint import CheckpointStore

    callback = models.quiet_callback(store=CheckpointStore(str(tmp_path / "store")), dcp=True)
    model = models.AsksToExitInEvaluation()
    model.callback = callback
    args = models.arguments(tmp_path, max_steps=6, eval_on_start=True, per_device_eval_batch_size=4)
    trainer = models.evaluated_trainer(model, args, callback)
    trainer.train()
    assert callback.saved_steps == [0] and callback.exit_code == 143
    assert [generation.name for generation in callback.saved_generations] == ["step-000000000000"]
    assert trainer.state.global_step == 1


def test_the_trainers_dataloader_workers_outlive_a_job_wide_sigterm(tmp_path: Path) -> None:
    """The Trainer builds its DataLoader itself, with its own worker_init_fn, so its users
    cannot give it forewarn's: with workers, a SIGTERM to the whole job killed them and the
    Trainer raised before the save."""
    callback = models.quiet_callback()
    sigterm = models.SigtermsTheWorkers(callback)
    args = models.arguments(
        tmp_path, dataloader_num_workers=2, dataloader_multiprocessing_context="fork"
    )
    trainer = hf.Trainer(
        model=models.Tiny(), args=args, train_dataset=models.Points(), callbacks=[sigterm, callback]
    )
    trainer.train()
    assert sigterm.workers
    assert callback.saved_steps == [60]
    assert (tmp_path / "out" / "checkpoint-60").is_dir()


@pytest.mark.parametrize("evaluated_first", [False, True])
def test_the_evaluation_dataloader_workers_outlive_a_job_wide_sigterm(
    tmp_path: Path, evaluated_first: bool
) -> None:
    """The Trainer builds a DataLoader for each evaluation pass, with no worker_init_fn and no
    callback event before its workers start: a SIGTERM to the whole job during an evaluation
    killed them, and the Trainer raised `DataLoader worker ... exited unexpectedly` instead of
    saving. With persistent workers it keeps the first one it built, here by an evaluate()
    before train()."""
    callback = models.quiet_callback()
    model = models.SigtermsTheWorkersInEvaluation()
    model.callback = callback
    args = models.arguments(
        tmp_path,
        dataloader_num_workers=2,
        dataloader_multiprocessing_context="fork",
        dataloader_persistent_workers=evaluated_first,
        **models.EVALUATE_EVERY_25,
    )
    trainer = models.evaluated_trainer(model, args, callback)
    if evaluated_first:
        model.callback = None  # no SIGTERM during this pass
        trainer.evaluate()
        model.callback = callback
        model.kill_at += model.eval_calls
    trainer.train()
    assert len(model.workers) == 4, "two training and two evaluation workers"
    assert callback.saved_steps == [25]
    assert (tmp_path / "out" / "checkpoint-25").is_dir()
    assert trainer.state.global_step == 25


def test_periodic_saves_count_from_the_step_training_resumed_at(tmp_path: Path) -> None:
    """Resumed at step 25 with saves every 20 steps: the next is at 45. The guard counted from
    step 0, so the first step after every resume (26) saved again."""

    def train(max_steps: int, resume: str | None) -> list[int]:
        callback = models.quiet_callback(every_steps=20)
        args = models.arguments(tmp_path, max_steps=max_steps, save_strategy="steps", save_steps=25)
        trainer = hf.Trainer(
            model=models.Tiny(), args=args, train_dataset=models.Points(), callbacks=[callback]
        )
        trainer.train(resume_from_checkpoint=resume)
        assert callback.exit_code == 0, "training ended by itself"
        return callback.saved_steps

    assert train(25, None) == [20]
    assert train(50, str(tmp_path / "out" / "checkpoint-25")) == [45]


def test_dcp_into_a_store_on_drain_and_terminate_and_the_weights_load_back(
    tmp_path: Path,
) -> None:
    """dcp=True (issue 20): the callback saves DCP generations into the store itself; the last
    one loads back into a fresh model with the trained bits."""
    from forewarn.clients.checkpoint import CheckpointStore, load_dcp

    store = CheckpointStore(str(tmp_path / "store"))
    callback = models.quiet_callback(store=store, dcp=True)
    args = models.arguments(tmp_path, max_steps=10_000)
    model = models.Tiny()
    trainer = hf.Trainer(
        model=model, args=args, train_dataset=models.Points(), callbacks=[callback]
    )

    def operator() -> None:
        eventually(lambda: trainer.state.global_step >= 20)
        callback.guard.request("drain")
        eventually(lambda: len(callback.saved_steps) == 1)
        first = callback.saved_steps[0]
        eventually(lambda: trainer.state.global_step >= first + 20)
        callback.guard.request("terminate", exit=True)

    thread = threading.Thread(target=operator, daemon=True)
    thread.start()
    trainer.train()
    thread.join(timeout=5)
    assert len(callback.saved_steps) == 2, callback.saved_steps
    assert trainer.state.global_step == callback.saved_steps[-1] < 10_000
    assert not (tmp_path / "out" / f"checkpoint-{callback.saved_steps[-1]}").exists()
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == callback.saved_steps[-1]
    assert "dcp/.metadata" in latest.files
    fresh = models.Tiny()
    load_dcp(latest, {"model": fresh.state_dict()})
    assert torch.equal(fresh.layer.weight, model.layer.weight)


def test_the_checkpoint_is_fsynced_before_the_agent_is_told(
    tmp_path: Path, monkeypatch: Any
) -> None:
    callback = models.quiet_callback()
    acked = fsynced_at_each_ack(monkeypatch, callback.guard)
    model = models.AsksToExitInEvaluation()
    model.callback = callback
    args = models.arguments(tmp_path, **models.EVALUATE_EVERY_25)
    trainer = models.evaluated_trainer(model, args, callback)
    trainer.train()
    folder = (tmp_path / "out" / "checkpoint-25").resolve()
    assert len(acked) == 1
    written = {str(path) for path in folder.iterdir()}
    assert "trainer_state.json" in {path.name for path in folder.iterdir()}
    assert written | {str(folder), str(folder.parent)} <= acked[0]


def test_resume_passes_over_a_trainer_state_nested_past_json_recursion(tmp_path: Path) -> None:
    """json.load raises RecursionError, not ValueError, for JSON nested a few thousand deep: a
    trainer_state.json of that shape escaped last_checkpoint, and the job crashed at every
    restart instead of resuming from the older checkpoint."""
    for step, state in ((25, b'{"global_step": 25}'), (50, b"[" * 100_000 + b"]" * 100_000)):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "trainer_state.json").write_bytes(state)
    assert fw.last_checkpoint(tmp_path) == str(tmp_path / "checkpoint-25")


def test_resume_passes_over_a_checkpoint_the_trainer_never_finished(
    tmp_path: Path, caplog: Any
) -> None:
    import shutil

    callback = models.quiet_callback()
    model = models.AsksToExitInEvaluation()
    model.callback = callback

    models.evaluated_trainer(
        model, models.arguments(tmp_path, **models.EVALUATE_EVERY_25), callback
    ).train()
    out = tmp_path / "out"
    # A later terminate save killed mid-write: the weights are there, the rest never came.
    (out / "checkpoint-50").mkdir()
    shutil.copy(out / "checkpoint-25" / "model.safetensors", out / "checkpoint-50")
    assert fw.last_checkpoint(out) == str(out / "checkpoint-25")
    assert "checkpoint-50 is incomplete" in caplog.text
    assert fw.last_checkpoint(tmp_path / "nothing-here") is None

    resumed = models.Tiny()
    batches: list[int] = []
    resumed.register_forward_hook(lambda *_: batches.append(1))
    trainer = hf.Trainer(
        model=resumed, args=models.arguments(tmp_path, max_steps=30), train_dataset=models.Points()
    )
    trainer.train(resume_from_checkpoint=fw.last_checkpoint(out))
    assert trainer.state.global_step == 30 and len(batches) == 5, "resumed at step 25"


def test_the_end_of_the_epoch_a_terminate_cut_short_adds_no_evaluation_or_second_save(
    tmp_path: Path,
) -> None:
    """With eval_strategy and save_strategy 'epoch', the Trainer ends the epoch the exit save
    stopped with an evaluation, in which the callback asked for the same save again: the
    checkpoint just saved and acked was written a second time in place during the notice's
    last seconds (a kill then left it half-rewritten, its trainer_state.json still there for
    last_checkpoint to take)."""
    callback = models.quiet_callback()
    spy = models.AsksToExitAt(callback, at=7)
    args = models.arguments(
        tmp_path,
        max_steps=-1,
        num_train_epochs=3,
        gradient_accumulation_steps=2,
        eval_strategy="epoch",
        save_strategy="epoch",
        per_device_eval_batch_size=4,
    )
    trainer = hf.Trainer(
        model=models.Tiny(),
        args=args,
        train_dataset=models.Points(),  # 5,000 steps an epoch: the exit comes mid-epoch
        eval_dataset=models.FewPoints(),
        callbacks=[callback, spy],
    )
    trainer.train()
    assert callback.saved_steps == [8]
    assert spy.events == [("save", 8)]
    assert callback.exit_code == 143


def test_the_exits_checkpoint_outlives_the_end_of_train_with_save_total_limit_1(
    tmp_path: Path,
) -> None:
    """With save_total_limit=1 and load_best_model_at_end, train() ends by deleting every
    checkpoint but the best one: it deleted the exit's checkpoint-31, fsynced and acked, and
    the job resumed from checkpoint-25, six steps back. The limit is the Trainer's again once
    train() has returned."""
    callback = models.quiet_callback()
    spy = models.AsksToExitAt(callback, at=30)
    args = models.arguments(
        tmp_path,
        save_strategy="steps",
        save_steps=25,
        save_total_limit=1,
        load_best_model_at_end=True,
        **models.EVALUATE_EVERY_25,
    )
    trainer = models.evaluated_trainer(models.Tiny(), args, callback, spy)
    trainer.train()
    assert callback.saved_steps == [31]
    assert callback.exit_code == 143
    output = Path(args.output_dir)
    assert fw.last_checkpoint(output) == str(output / "checkpoint-31")
    assert args.save_total_limit == 1


def test_a_train_after_one_an_exit_stopped_keeps_its_evaluations_and_saves(
    tmp_path: Path,
) -> None:
    """After an exit's save the callback skips the rest of that train()'s evaluations and
    saves (the epoch it cut short); that was never undone, so a later train() with the same
    callback (a notebook training on once the machine stayed) lost every epoch's
    checkpoint and evaluation of the Trainer's own."""
    callback = models.quiet_callback()
    spy = models.AsksToExitAt(callback, at=5)
    args = models.arguments(
        tmp_path,
        max_steps=-1,
        num_train_epochs=2,
        eval_strategy="epoch",
        save_strategy="epoch",
        per_device_eval_batch_size=4,
    )
    trainer = hf.Trainer(
        model=models.Tiny(),
        args=args,
        train_dataset=models.FewPoints(),  # 16 steps an epoch
        eval_dataset=models.FewPoints(),
        callbacks=[callback, spy],
    )
    trainer.train()
    assert callback.saved_steps == [6] and callback.exit_code == 143
    spy.at = -1  # asks for no exit this time
    spy.events.clear()
    trainer.train()
    assert trainer.state.global_step == 32
    assert spy.events == [("evaluate", 16), ("save", 16), ("evaluate", 32), ("save", 32)]
    assert callback.saved_steps == [6]
    assert callback.exit_code == 0


def _given(trainer_args: dict[str, Any], callback: Any, attach: str) -> Any:
    """A Trainer given `callback` as `attach` says: `callbacks=[...]`, `add_callback` once it
    is made (its on_init_end then never runs), that of a subclass which skips the Trainer's,
    or a callback handler a subclass builds in place of the Trainer's."""
    if attach == "callbacks":
        return hf.Trainer(**trainer_args, callbacks=[callback])
    if attach == "own_handler":
        return models.OwnCallbackHandler(**trainer_args, callbacks=[callback])
    trainer = (models.OwnAddCallback if attach == "own_add_callback" else hf.Trainer)(
        **trainer_args
    )
    trainer.add_callback(callback)
    return trainer


@pytest.mark.parametrize(
    "attach", ["callbacks", "add_callback", "own_add_callback", "own_handler", "reloaded"]
)
def test_train_raising_closes_the_guard_however_the_callback_was_given(
    tmp_path: Path, attach: str
) -> None:
    """The callback wrapped its Trainer's train() from on_init_end and from a wrapped
    `Trainer.add_callback`: given through a subclass's own add_callback, or in a handler a
    subclass built itself, it wrapped nothing, and a train() that raised left the guard open,
    its SIGTERM handler installed."""
    import importlib

    if attach == "reloaded":  # a notebook re-running its imports: a new callback class
        importlib.reload(importlib.import_module("forewarn.clients.frameworks.transformers"))
        attach = "add_callback"
    with SignalHandlers() as handlers:
        callback = fw.ForewarnTrainerCallback(notices=False, flag_file=None)
        args = models.arguments(tmp_path)
        given = {"model": models.FailsAt(4), "args": args, "train_dataset": models.Points()}
        trainer = _given(given, callback, attach)
        assert [c for c in trainer.callback_handler.callbacks if c is callback] == [callback]
        with pytest.raises(RuntimeError, match="CUDA error"):
            trainer.train()
        assert trainer.state.global_step == 3
        assert callback._guard is None
        assert handlers.now() == handlers.before


@pytest.mark.parametrize("attach", ["callbacks", "add_callback", "own_add_callback", "own_handler"])
def test_an_exit_saves_and_stops_however_the_callback_was_given(
    tmp_path: Path, attach: str
) -> None:
    """The same lifecycle whichever way the callback reached its Trainer: the exit's save
    through the Trainer's checkpoint, training stopped there, the guard closed after."""
    with SignalHandlers() as handlers:
        callback = fw.ForewarnTrainerCallback(notices=False, flag_file=None)
        args = models.arguments(tmp_path)
        given = {"model": models.Tiny(), "args": args, "train_dataset": models.Points()}
        trainer = _given(given, callback, attach)
        # Asked after the callback's own check at step 5: saved at the end of step 6.
        trainer.add_callback(models.AsksToExitAt(callback, at=5))
        trainer.train()
        assert callback.saved_steps == [6] and trainer.state.global_step == 6
        assert (tmp_path / "out" / "checkpoint-6").is_dir()
        assert callback.exit_code == 143
        assert callback._guard is None
        assert handlers.now() == handlers.before


def test_the_wrapped_add_callback_is_wrapped_once_and_adds_as_before() -> None:
    """The handler's add_callback is wrapped on import: a reload must not wrap the wrapper,
    and what the handler holds (a class given made into one, other callbacks as given) is
    as it was."""
    import importlib

    from transformers.trainer_callback import CallbackHandler, PrinterCallback

    # Imported here: under xdist this test may be the first of its worker to touch the module.
    module = importlib.import_module("forewarn.clients.frameworks.transformers")
    wrapper = CallbackHandler.add_callback
    importlib.reload(module)
    assert CallbackHandler.add_callback is wrapper
    assert not getattr(wrapper.__wrapped__, "_forewarn_attaches", False)
    other = hf.TrainerCallback()
    handler = CallbackHandler([other, PrinterCallback], None, None, None, None)
    assert handler.add_callback(module.ForewarnTrainerCallback) is None
    held = handler.callbacks
    assert held[0] is other and type(held[1]) is PrinterCallback
    assert type(held[2]) is module.ForewarnTrainerCallback and len(held) == 3


ATTACH = pytest.mark.parametrize("attach", ["callbacks", "add_callback"])


def _train_until_a_save_fails(
    tmp_path: Path, action: str, break_the_save: Any, attach: str = "callbacks"
) -> tuple[Any, BaseException, list[str]]:
    """Train with an agent that sends `action` at step 10; `break_the_save(trainer)` makes the
    save that answers it fail. Returns the callback, what train() raised, and the agent's log
    lines for the notice's acks."""
    with SignalHandlers() as handlers:
        with AgentProcess(tmp_path) as agent:
            callback = models.listening_callback(agent, handle_signals=True)
            args = models.arguments(tmp_path, max_steps=10_000)
            given = {"model": models.Tiny(), "args": args, "train_dataset": models.Points()}
            trainer = _given(given, callback, attach)
            break_the_save(trainer)
            sent: list[str] = []

            def operator() -> None:
                eventually(lambda: trainer.state.global_step >= 10)
                sent.append(agent.control({"op": "notify", "action": action})["notice"]["id"])

            thread = threading.Thread(target=operator, daemon=True)
            thread.start()
            with pytest.raises(OSError) as raised:
                trainer.train()
            thread.join(timeout=5)
            assert sent, "the notice was sent"
            eventually(lambda: f"ack {sent[0]} from" in agent.output(), 10, "the ack")
            acks = [line for line in agent.output().splitlines() if f"ack {sent[0]} from" in line]
        # The guard was closed on the way out: the handlers it replaced are back.
        assert handlers.now() == handlers.before
    return callback, raised.value, acks


@ATTACH
@pytest.mark.parametrize("action", ["drain", "terminate"])
def test_a_trainer_save_that_fails_is_acked_failed_and_a_terminate_exits_1(
    tmp_path: Path, action: str, attach: str
) -> None:
    """The Trainer's own save raising inside `_save_checkpoint` (a full disk, EIO, a
    permission error) left train() with no ack at all: the agent never learnt that the job
    had not saved, and exit_code said 0, which marks a reclaimed Kubernetes Job complete."""
    import errno

    def full_disk(trainer: Any) -> None:
        def save_model(*args: Any, **kwargs: Any) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        trainer.save_model = save_model

    callback, raised, acks = _train_until_a_save_fails(tmp_path, action, full_disk, attach)
    assert raised.errno == errno.ENOSPC  # type: ignore[attr-defined]
    assert len(acks) == 1 and "outcome=failed" in acks[0], acks
    assert "No space left on device" in acks[0]
    assert callback.saved_steps == []
    assert callback.exit_code == (1 if action == "terminate" else 0)


@pytest.mark.parametrize("failing", ["fsync", "listing"])
def test_a_checkpoint_that_cannot_be_made_durable_is_a_failed_save(
    tmp_path: Path, monkeypatch: Any, failing: str
) -> None:
    """on_save fsyncs the Trainer's checkpoint before the ack: an EIO there (the directory's
    fsync, or listing it to find its files) is a save that failed, acked so, and the
    terminate's exit code is 1, not 143, which says the state is saved."""
    import errno
    import os
    import re

    def a_checkpoint(path: Any) -> bool:
        return re.fullmatch(r"checkpoint-\d+", Path(path).name) is not None

    def broken_disk(trainer: Any) -> None:
        if failing == "fsync":
            real_fsync = os.fsync

            def fsync(fd: int) -> None:
                if a_checkpoint(os.readlink(f"/proc/self/fd/{fd}")):
                    raise OSError(errno.EIO, "Input/output error")
                real_fsync(fd)

            monkeypatch.setattr(os, "fsync", fsync)
        else:
            real_scandir = os.scandir

            def scandir(path: Any = ".") -> Any:
                if a_checkpoint(path):
                    raise OSError(errno.EIO, "Input/output error", str(path))
                return real_scandir(path)

            monkeypatch.setattr(os, "scandir", scandir)

    callback, raised, acks = _train_until_a_save_fails(tmp_path, "terminate", broken_disk)
    assert raised.errno == errno.EIO  # type: ignore[attr-defined]
    assert len(acks) == 1 and "outcome=failed" in acks[0], acks
    assert "Input/output error" in acks[0]
    assert callback.saved_steps == []
    assert callback.exit_code == 1


def test_a_dcp_save_that_fails_on_an_exit_is_reported_and_exits_1(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """dcp=True saves in the callback itself: a save_dcp that raised left train() unreported,
    with exit_code 0."""
    import errno

    from forewarn.clients.checkpoint import CheckpointStore, dcp

    def full_disk(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(dcp, "save_dcp", full_disk)
    callback = models.quiet_callback(store=CheckpointStore(str(tmp_path / "store")), dcp=True)
    trainer = hf.Trainer(
        model=models.Tiny(),
        args=models.arguments(tmp_path),
        train_dataset=models.Points(),
        callbacks=[models.AsksToExitAt(callback, at=5), callback],
    )
    with pytest.raises(OSError, match="No space left"):
        trainer.train()
    assert trainer.state.global_step == 5
    assert callback.saved_steps == []
    assert callback.exit_code == 1, "the exit's state is not saved: not 143, nor 0"


def test_an_exit_save_of_the_trainer_that_runs_long_is_said_while_it_runs(
    tmp_path: Path, monkeypatch: Any, caplog: Any
) -> None:
    """A SIGTERM's save has no time limit: a Trainer's save that hung (a stalled network
    filesystem) said nothing until the platform's SIGKILL."""
    from forewarn.clients import guard_report

    monkeypatch.setattr(guard_report, "EXIT_SAVE_WARN_SECONDS", 0.3)
    callback = models.quiet_callback()
    trainer = hf.Trainer(
        model=models.Tiny(),
        args=models.arguments(tmp_path),
        train_dataset=models.Points(),
        callbacks=[models.AsksToExitAt(callback, at=5), callback],
    )
    release = threading.Event()
    save_model = trainer.save_model

    def stalled_save_model(*args: Any, **kwargs: Any) -> Any:
        release.wait(30)
        return save_model(*args, **kwargs)

    monkeypatch.setattr(trainer, "save_model", stalled_save_model)

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if "is still running" in r.getMessage()]

    def operator() -> None:
        eventually(lambda: len(said()) >= 2, 20, "two warnings")
        release.set()

    thread = threading.Thread(target=operator, daemon=True)
    thread.start()
    trainer.train()
    thread.join(timeout=5)
    assert release.is_set(), "said while the save ran"
    assert said()[0].startswith("forewarn: the exit's save of step 5 (on signal) is still")
    assert "no deadline is known" in said()[0]
    assert callback.saved_steps == [5]
    assert callback.exit_code == 143


def _breaks(trainer: Any, failing: str) -> None:
    """The Trainer's own save (save_steps=5, not one forewarn asked for) finds a full disk."""
    import errno

    if failing == "save":

        def full_disk(*args: Any, **kwargs: Any) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        trainer.save_model = full_disk


@ATTACH
@pytest.mark.parametrize("failing", ["save", "forward"])
def test_train_raising_outside_a_save_of_ours_closes_the_guard_and_acks_nothing(
    tmp_path: Path, failing: str, attach: str
) -> None:
    """train() raising where no save of forewarn's was asked for (the Trainer's own scheduled
    save, the model's forward) never reached on_train_end: the guard stayed open, its SIGTERM
    handler installed, and the job went on, deaf to the platform's SIGTERM."""
    import re

    with SignalHandlers() as handlers, AgentProcess(tmp_path) as agent:
        callback = models.listening_callback(agent, handle_signals=True)
        args = models.arguments(tmp_path, save_strategy="steps", save_steps=5)
        model = models.FailsAt(7) if failing == "forward" else models.Tiny()
        given = {"model": model, "args": args, "train_dataset": models.Points()}
        trainer = _given(given, callback, attach)
        _breaks(trainer, failing)
        assert callback.guard.notices is not None  # made now: its handlers installed
        assert handlers.now() != handlers.before
        with pytest.raises(OSError if failing == "save" else RuntimeError):
            trainer.train()
        assert trainer.state.global_step == (5 if failing == "save" else 6)
        # Closed: the handlers it replaced are back, and no ack reached the agent.
        assert handlers.now() == handlers.before
        assert callback.exit_code == 0
        assert "_save_checkpoint" not in vars(trainer)
        assert not re.search(r"\back\b", agent.output()), agent.output()


@ATTACH
@pytest.mark.parametrize("action", ["drain", "terminate"])
def test_a_notice_that_comes_during_the_trainers_own_failing_save_is_acked_failed(
    tmp_path: Path, action: str, attach: str
) -> None:
    """A notice that arrives after on_step_end asked the guard, while the Trainer makes its
    own scheduled save, and that save raises: train() left with the notice never answered
    (the agent waited on an ack that never came), and a terminate's exit_code said 0."""
    import errno

    with SignalHandlers() as handlers, AgentProcess(tmp_path) as agent:
        callback = models.listening_callback(agent, handle_signals=True)
        args = models.arguments(tmp_path, save_strategy="steps", save_steps=5)
        given = {"model": models.Tiny(), "args": args, "train_dataset": models.Points()}
        trainer = _given(given, callback, attach)
        sent: list[str] = []
        heard: list[str] = []
        # Called after the guard's own listener: the guard has the notice by then.
        callback.guard.notices.add_listener(lambda event: heard.append(event.id))

        def full_disk_once_the_notice_is_in(*args: Any, **kwargs: Any) -> None:
            notice = agent.control({"op": "notify", "action": action})["notice"]["id"]
            sent.append(notice)
            eventually(lambda: notice in heard, 10, "the notice")
            raise OSError(errno.ENOSPC, "No space left on device")

        trainer.save_model = full_disk_once_the_notice_is_in
        with pytest.raises(OSError, match="No space left"):
            trainer.train()
        assert trainer.state.global_step == 5
        eventually(lambda: f"ack {sent[0]} from" in agent.output(), 10, "the ack")
        acks = [line for line in agent.output().splitlines() if f"ack {sent[0]} from" in line]
        assert len(acks) == 1 and "outcome=failed" in acks[0], acks
        assert "No space left on device" in acks[0]
        assert callback.exit_code == (1 if action == "terminate" else 0)
        assert handlers.now() == handlers.before


# Its own process, forked from the launcher that imported torch once (tests/forked_ranks.py):
# a fresh interpreter importing transformers and torch cost ~8.4 CPU-s, ~3 of them torch's
# (55 s of wall time at load 9, and past the suite's 120 s in a suite run, mid-save). The
# job's own signal handling is what is tested: the launcher leaves SIGTERM at its default,
# as a fresh interpreter has it. A hang still fails, at 300 s.
@pytest.mark.timeout(300)
@pytest.mark.parametrize("failing", ["save", "forward"])
def test_a_job_whose_train_raised_ends_on_the_platforms_sigterm(
    tmp_path: Path, failing: str, rank_launcher: RankLauncher
) -> None:
    import os
    import signal

    script = Path(__file__).with_name("trainer_raises_job.py")
    job = rank_launcher.start(
        script, [failing, str(tmp_path / "out")], dict(os.environ, OMP_NUM_THREADS="1")
    )
    out, err = job.communicate(timeout=240)
    expected = "OSError" if failing == "save" else "RuntimeError"
    assert out.splitlines() == [f"raised {expected}"], (out, err)
    assert job.returncode == -signal.SIGTERM, err


def test_a_resume_from_the_exit_save_reports_its_restore_time_and_no_step_lost(
    tmp_path: Path,
) -> None:
    """train() drained, then terminated by a real agent, then resumed
    (`resume_from_checkpoint=`) from each save. The callback's `guard.resumed(step)` passed
    neither figure, and the agent logged `restore=none steps_lost=unknown` though the Trainer
    had restored the exit's checkpoint: now the restore is timed and the exit's save marked,
    so the resume from it says `steps_lost=0`; the one from the drain's save (the job trained
    past it) still says `unknown`."""

    with AgentProcess(tmp_path) as agent:
        callback = models.listening_callback(agent)
        args = models.arguments(tmp_path, max_steps=10_000)
        trainer = hf.Trainer(
            model=models.Tiny(), args=args, train_dataset=models.Points(), callbacks=[callback]
        )

        def operator() -> None:
            eventually(lambda: trainer.state.global_step >= 5)
            agent.control({"op": "notify", "action": "drain", "id": "local/r-drain"})
            eventually(lambda: len(callback.saved_steps) == 1)
            agent.control({"op": "notify", "action": "terminate", "id": "local/r-term"})

        thread = threading.Thread(target=operator, daemon=True)
        thread.start()
        trainer.train()
        thread.join(timeout=5)
        assert callback.exit_code == 143
        drained, exited = callback.saved_steps
        assert agent.control({"op": "clear"})["ok"]

        def resume(step: int) -> str:
            again = models.listening_callback(agent)
            resumed = hf.Trainer(
                model=models.Tiny(),
                args=models.arguments(tmp_path, max_steps=step + 2),
                train_dataset=models.Points(),
                callbacks=[again],
            )
            resumed.train(resume_from_checkpoint=str(tmp_path / "out" / f"checkpoint-{step}"))
            assert again.exit_code == 0 and resumed.state.global_step == step + 2
            return resume_steps_lost(agent, step)

        assert resume(exited) == "0"
        assert resume(drained) == "unknown"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=20), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=examples(80), deadline=None)
@given(
    mark=st.one_of(
        _JSON.map(lambda value: json.dumps(value).encode()),
        st.fixed_dictionaries(
            {"forewarn_exit_save": st.sampled_from([True, False, 1, "true", None])},
            optional={"global_step": st.sampled_from([7, 8, "7", 7.0, None, -1])},
        ).map(lambda value: json.dumps(value).encode()),
        st.binary(max_size=40),
    ),
    newer=st.booleans(),
)
def test_the_exit_mark_a_resume_reads_says_no_step_lost_only_when_it_is_whole(
    mark: bytes, newer: bool
) -> None:
    """`forewarn.json` in the checkpoint a train() resumed from, whatever it holds (a write
    cut short, another tool's file): no error, and `steps_lost=0` only for a mark of an
    exit's save of this very step with no newer checkpoint beside it."""
    import tempfile

    callback = models.quiet_callback()
    with tempfile.TemporaryDirectory() as folder:
        resumed = Path(folder) / "checkpoint-7"
        resumed.mkdir()
        (resumed / "forewarn.json").write_bytes(mark)
        if newer:
            (Path(folder) / "checkpoint-12").mkdir()
        callback._resume_from = str(resumed)
        _, lost = callback._resume_figures(None, 7)
    try:
        read = json.loads(mark)
    except ValueError:
        read = None
    whole = isinstance(read, dict) and read.get("forewarn_exit_save") is True
    whole = whole and isinstance(read, dict) and read.get("global_step") == 7
    assert lost == (0 if whole and not newer else None)


def test_an_evaluation_cut_for_the_exit_is_not_ranked_the_best(tmp_path: Path) -> None:
    """Found running train() with `metric_for_best_model="loss"`, `load_best_model_at_end` and
    `save_total_limit=2`, an exit asked at the 2nd batch of the 2nd evaluation pass (10
    batches, `eval_loss` 19.5 for a whole pass): the Trainer ranked the cut pass's 3.5 best,
    and the exit's `checkpoint-50/trainer_state.json` said `best_metric` 3.5, best checkpoint
    checkpoint-50 (a resumed job ranked every whole pass after it worse). Now the best stays
    the whole pass's."""
    callback = fw.ForewarnTrainerCallback(notices=False, handle_signals=False, flag_file=None)
    model = models.RankedOnEvaluation()
    model.callback = callback
    args = models.arguments(
        tmp_path,
        **models.EVALUATE_EVERY_25,
        save_strategy="steps",
        save_steps=25,
        metric_for_best_model="loss",
        load_best_model_at_end=True,
        save_total_limit=2,
    )
    trainer = hf.Trainer(
        model=model,
        args=args,
        train_dataset=models.Points(),
        eval_dataset=models.IndexedPoints(),
        callbacks=[callback],
    )
    trainer.train()
    assert callback.saved_steps == [50]
    assert callback.exit_code == 143
    saved = json.loads((tmp_path / "out" / "checkpoint-50" / "trainer_state.json").read_text())
    assert saved["best_metric"] == 19.5
    assert saved["best_global_step"] == 25
    assert Path(saved["best_model_checkpoint"]).name == "checkpoint-25"


def test_dcp_saves_name_the_notices_they_answered_and_mark_the_exit(tmp_path: Path) -> None:
    """dcp=True: the drain's and the terminate's DCP generations carry the metadata the
    guard's own saves carry (`forewarn_notices`, `forewarn_exit_save`), so a job resumed from
    them owes the drain no save and knows it resumed from an exit's save. save_dcp was called
    with no metadata: both generations' metadata were empty."""
    from forewarn.clients.checkpoint import CheckpointStore
    from forewarn.clients.guard_state import ANSWERED_NOTICES, EXIT_SAVE

    store = CheckpointStore(str(tmp_path / "store"))
    with AgentProcess(tmp_path) as agent:
        callback = models.listening_callback(agent, store=store, dcp=True)
        args = models.arguments(tmp_path, max_steps=10_000)
        trainer = hf.Trainer(
            model=models.Tiny(), args=args, train_dataset=models.Points(), callbacks=[callback]
        )

        def operator() -> None:
            eventually(lambda: trainer.state.global_step >= 20)
            agent.control({"op": "notify", "action": "drain", "id": "local/td-drain"})
            eventually(lambda: len(callback.saved_steps) == 1)
            first = callback.saved_steps[0]
            eventually(lambda: trainer.state.global_step >= first + 20)
            agent.control({"op": "notify", "action": "terminate", "id": "local/td-term"})

        thread = threading.Thread(target=operator, daemon=True)
        thread.start()
        trainer.train()
        thread.join(timeout=5)
    drain, exit_save = callback.saved_generations
    assert EXIT_SAVE not in drain.metadata
    assert set(drain.metadata.get(ANSWERED_NOTICES, {})) == {"local/td-drain"}
    assert exit_save.metadata.get(EXIT_SAVE) is True
    assert set(exit_save.metadata.get(ANSWERED_NOTICES, {})) == {"local/td-drain", "local/td-term"}
    assert callback.exit_code == 143
