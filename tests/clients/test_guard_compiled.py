"""A `torch.compile`d model in the README's plain loop with the guard, on notices from a real
agent: a drain saves and training goes on, a terminate saves and the loop stops, and the
resume restores the exit's step and weights whether the restart compiles its model or not
(the compiled module's state_dict keys are `_orig_mod.`-prefixed)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from support import AgentProcess, LazyModule, eventually, requires

pytestmark = [requires("torch"), pytest.mark.usefixtures("forked_agents")]
torch = LazyModule("torch")


def build() -> tuple[Any, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    return model, torch.optim.AdamW(model.parameters(), lr=0.01)


def compiled(model: Any) -> Any:
    # aot_eager: the same OptimizedModule wrapper and autograd tracing as inductor's, without
    # its C++ build (70 s of CPU for this model on the shared machine).
    return torch.compile(model, backend="aot_eager")


def batch(step: int) -> tuple[Any, Any]:
    """The batch of `step`, the same in every run: the resume's data position is its step."""
    generator = torch.Generator().manual_seed(step)
    return torch.randn(16, 4, generator=generator), torch.randn(16, 1, generator=generator)


def train_step(model: Any, optimizer: Any, step: int) -> None:
    x, y = batch(step)
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


@pytest.mark.timeout(600)
def test_a_compiled_loop_saves_on_drain_and_terminate_and_resumes_compiled_or_not(
    tmp_path: Path,
) -> None:
    from forewarn.clients import CheckpointGuard
    from forewarn.clients.checkpoint import (
        CheckpointStore,
        load_training_state,
        save_training_state,
    )

    store = CheckpointStore(str(tmp_path / "store"))
    with AgentProcess(tmp_path) as agent:
        bare, optimizer = build()
        model = compiled(bare)
        guard = CheckpointGuard(
            store=store,
            handle_signals=False,
            flag_file=None,
            events=agent.events,
            control=agent.control_endpoint,
        )
        progress = {"step": 0}
        saved: list[int] = []
        weights: dict[int, dict[str, Any]] = {}

        def operator() -> None:
            eventually(lambda: progress["step"] >= 3, 300, "three compiled steps")
            agent.control({"op": "notify", "action": "drain", "id": "local/c-drain"})
            eventually(lambda: len(saved) == 1, 60, "the drain's save")
            eventually(lambda: progress["step"] >= saved[0] + 3, 60, "training after it")
            agent.control({"op": "notify", "action": "terminate", "id": "local/c-term"})

        thread = threading.Thread(target=operator, daemon=True)
        thread.start()
        step = 0
        guard.resumed(step)
        while step < 100_000:
            train_step(model, optimizer, step)
            step += 1
            progress["step"] = step
            if guard.due(step):
                result = guard.save(
                    step,
                    # The generation's step is the one saved (gen.step).
                    lambda gen: save_training_state(gen, model=model, optimizer=optimizer),
                )
                saved.append(step)
                weights[step] = {k: v.clone() for k, v in bare.state_dict().items()}
                if result.exit:
                    break
        thread.join(timeout=10)
        guard.close()
        assert len(saved) == 2 and saved[1] > saved[0] and step == saved[1], saved
        assert guard.exit_code == 143
        eventually(lambda: "ack local/c-term" in agent.output(), what="the terminate's ack")

    latest = store.latest()
    assert latest is not None and latest.step == step
    # The restart builds the model, restores it, then compiles it (PyTorch's order), or
    # restores into the compiled module, or does not compile at all: all get the exit's state.
    for wrap in ("restore_then_compile", "compile_then_restore", "uncompiled"):
        fresh, fresh_optimizer = build()
        target = compiled(fresh) if wrap == "compile_then_restore" else fresh
        state = load_training_state(latest, model=target, optimizer=fresh_optimizer)
        assert state.step == step, wrap
        for key, value in fresh.state_dict().items():
            assert torch.equal(value, weights[step][key]), (wrap, key)
        assert fresh_optimizer.state_dict()["state"][0]["step"] == step, wrap
    store.close()
