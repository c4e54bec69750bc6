"""The transformers callback through a whole reclaimed run, as the docs say to use it, on
notices from a real agent: a drain mid-epoch, a drain during an evaluation, a terminate in
the next epoch; `save_total_limit` rotating the Trainer's own saves; then the restart's
`train(resume_from_checkpoint=True)` continues from the exit's step and ends with the weights
of a run never interrupted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import AgentProcess, LazyModule, eventually, requires, resume_steps_lost

pytestmark = [requires("transformers"), pytest.mark.usefixtures("forked_agents")]
torch = LazyModule("torch")
hf = LazyModule("transformers")
models = LazyModule("transformers_models")

MAX_STEPS = 100  # SeededPoints in batches of 4: 64 steps an epoch
DRAIN_AT = 13  # mid-epoch
DRAIN_IN_EVALUATION = 20  # the evaluation of step 20, at its 3rd batch
TERMINATE_AT = 70  # mid-way through the 2nd epoch
TERMINATE_IN_EVALUATION = 80  # or the evaluation of step 80, at its 3rd batch


def arguments(folder: Path) -> Any:
    return models.arguments(
        folder,
        max_steps=MAX_STEPS,
        save_strategy="steps",
        save_steps=30,
        save_total_limit=2,
        per_device_eval_batch_size=4,
        eval_strategy="steps",
        eval_steps=20,
    )


def sender(agent: Any, forewarn: Any, terminate_in_evaluation: bool) -> Any:
    """A TrainerCallback, ahead of forewarn's, that has the agent send each notice at its step
    and waits until forewarn's guard holds it, so the run is the same every time."""

    class Sends(hf.TrainerCallback):  # type: ignore[misc,name-defined]
        def send(self, action: str, notice_id: str) -> None:
            reply = agent.control({"op": "notify", "action": action, "id": notice_id})
            assert reply["ok"], reply
            guard = forewarn.guard
            eventually(lambda: notice_id in guard._notice_ids, 30, notice_id)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == DRAIN_AT:
                self.send("drain", "local/w-drain")
            if state.global_step == TERMINATE_AT and not terminate_in_evaluation:
                self.send("terminate", "local/w-term")

        def on_prediction_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.batches = getattr(self, "batches", 0) + 1
            if state.global_step == DRAIN_IN_EVALUATION and self.batches == 3:
                self.send("drain", "local/w-drain-eval")
            if (
                terminate_in_evaluation
                and state.global_step == TERMINATE_IN_EVALUATION
                and self.batches == 3
            ):
                self.send("terminate", "local/w-term")

        def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.batches = 0

    return Sends()


def trainer(folder: Path, callbacks: list[Any]) -> Any:
    torch.manual_seed(0)
    return hf.Trainer(
        model=models.Tiny(),
        args=arguments(folder),
        train_dataset=models.SeededPoints(),
        eval_dataset=models.FewPoints(),
        callbacks=callbacks,
    )


@pytest.mark.timeout(600)
@pytest.mark.parametrize("in_evaluation", [False, True], ids=["mid_epoch", "in_evaluation"])
def test_a_reclaimed_trainer_run_resumes_with_true_from_the_exits_step(
    tmp_path: Path, in_evaluation: bool
) -> None:
    exit_step = TERMINATE_IN_EVALUATION if in_evaluation else TERMINATE_AT
    uninterrupted = trainer(tmp_path / "a", [])
    uninterrupted.train()
    expected = uninterrupted.model.state_dict()

    out = tmp_path / "b" / "out"
    with AgentProcess(tmp_path) as agent:
        forewarn = models.listening_callback(agent)
        stopped = trainer(tmp_path / "b", [sender(agent, forewarn, in_evaluation), forewarn])
        stopped.train()
        # A drain does not cut an evaluation short (only an exit does): its save is the next
        # step's, as the guard's `due_in_eval` says.
        assert forewarn.saved_steps == [DRAIN_AT, DRAIN_IN_EVALUATION + 1, exit_step]
        assert forewarn.exit_code == 143
        assert stopped.state.global_step == exit_step
        kept = sorted(path.name for path in out.iterdir() if path.name.startswith("checkpoint-"))
        assert f"checkpoint-{exit_step}" in kept, kept

    # The restart, as the docs say, on the machine that replaced it (its own agent: the old
    # one's terminate, still in force, makes a job started under it exit too).
    (tmp_path / "m2").mkdir()
    with AgentProcess(tmp_path / "m2") as agent:
        again = models.listening_callback(agent)
        resumed = trainer(tmp_path / "b", [again])
        resumed.train(resume_from_checkpoint=True)
        assert resume_steps_lost(agent, exit_step) == "0"
    assert resumed.state.global_step == MAX_STEPS
    assert again.exit_code == 0
    for name, tensor in resumed.model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
