"""What a user checks about their handler, against a real agent from the plugin."""

from __future__ import annotations

import pytest
from forewarn.clients import CheckpointGuard
from forewarn.testing import RunningAgent, eventually
from train import Background


def test_drain_is_saved_and_training_continues(forewarn_agent: RunningAgent) -> None:
    guard = CheckpointGuard(handle_signals=False)  # finds the fixture's agent by itself
    training = Background(guard)
    try:
        notice = forewarn_agent.notify("drain")
        ack = forewarn_agent.wait_for_ack(notice, timeout=20)
        eventually(lambda: training.run.steps >= ack["step"] + 50, 20, "steps after the save")
    finally:
        run = training.finish()
        guard.close()
    assert ack["outcome"] == "saved"
    assert [(step, reasons) for step, reasons, _ in run.saves] == [(ack["step"], ("drain",))]
    assert not run.exited_early, "a drain flushes and goes on"


def test_terminate_is_saved_and_training_exits(forewarn_agent: RunningAgent) -> None:
    guard = CheckpointGuard(handle_signals=False)
    training = Background(guard)
    try:
        notice = forewarn_agent.notify("terminate", deadline="2m")
        ack = forewarn_agent.wait_for_ack(notice, timeout=20)
        training.thread.join(20)
    finally:
        run = training.finish()
        guard.close()
    assert ack["outcome"] == "saved" and ack["step"] == run.steps
    assert run.exited_early and run.saves[-1][1:] == (("terminate",), True)


def raise_provider_notice(agent: RunningAgent) -> str:
    """Each cloud's own notice, raised in its simulator; the action it stands for."""
    if agent.provider == "aws":
        agent.aws.spot_interruption(in_="2m")
        return "terminate"
    if agent.provider == "gcp":
        agent.gcp.preempt()
        return "terminate"
    if agent.provider == "azure":
        agent.azure.event("Preempt")
        return "terminate"
    if agent.provider == "digitalocean":
        agent.digitalocean.reclaim(in_="2h")  # the email, in the agent's private mailbox
        return "drain"
    agent.kubernetes.cordon()
    return "drain"


@pytest.mark.parametrize(
    "provider",
    [
        pytest.param(name, marks=pytest.mark.forewarn(provider=name))
        for name in ("aws", "gcp", "azure", "digitalocean", "kubernetes")
    ],
)
def test_a_provider_notice_reaches_the_guard(forewarn_agent: RunningAgent, provider: str) -> None:
    guard = CheckpointGuard(handle_signals=False)
    training = Background(guard)
    try:
        action = raise_provider_notice(forewarn_agent)
        notice = forewarn_agent.wait_for_event(provider=provider, action=action, timeout=20)
        ack = forewarn_agent.wait_for_ack(notice["id"], timeout=20)
    finally:
        run = training.finish()
        guard.close()
    assert ack["outcome"] == "saved"
    assert run.saves[0][1] == (action,)
    assert run.exited_early == (action == "terminate")


@pytest.mark.forewarn(provider="azure")
def test_a_failing_endpoint_does_not_break_the_handler(forewarn_agent: RunningAgent) -> None:
    guard = CheckpointGuard(handle_signals=False)
    training = Background(guard)
    try:
        forewarn_agent.fault("status", status=500, count=3)  # Scheduled Events answers 500
        forewarn_agent.azure.event("Preempt")
        training.thread.join(30)
    finally:
        run = training.finish()
        guard.close()
    assert run.exited_early and run.saves[-1][1] == ("terminate",)
    assert forewarn_agent.alive
    # The watcher did meet the three 500s (a spent fault is gone), and got through them.
    assert forewarn_agent.azure.state()["faults"] == []
