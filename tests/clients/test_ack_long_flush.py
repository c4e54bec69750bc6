"""An ack of a save that took over an hour, from the client library to a real agent.

The agent takes no `flush_seconds` or `stall_seconds` over `MAX_FLUSH_SECONDS` (an hour: it
sizes the exit margin). The library sent the figure as it was timed, and the agent refused the
whole ack: the notice stayed unacked (`acked_by` without the job, so its provider was never told
it was saved for, and a job started after a restart did not know it), and the agent's exit margin
never learnt that this job's saves are slow. The library now sends such a figure as the hour
the agent takes: the ack goes, and the margin is the widest the agent gives.
"""

from __future__ import annotations

from pathlib import Path

from forewarn.clients.notices import Notices
from hypothesis import given, settings
from hypothesis import strategies as st
from support import AgentProcess, eventually

HOUR = 3600.0


def test_an_ack_of_a_save_over_an_hour_reaches_a_real_agent(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path).start()
    try:
        raised = agent.control({"op": "notify", "action": "drain", "id": "local/slow"})
        notice_id = raised["notice"]["id"]
        notices = Notices(agent.events, agent.control_endpoint)
        try:
            assert eventually(lambda: notice_id in notices.active)
            # A save to a slow store: 70 minutes until durable, training stalled 65 of them.
            assert notices.ack(notice_id, step=9, flush_seconds=4200.0, wait=True)
            assert notices.ack(
                notice_id,
                step=10,
                flush_seconds=4200.0,
                stall_seconds=3900.0,
                durable_seconds=4200.0,
                wait=True,
            )
            status = agent.control({"op": "status"})
            assert notices.client_id in status["acked_by"][notice_id], status["acked_by"]
            # The heartbeat's exit margin: twice the slowest flush, the widest the agent gives.
            assert eventually(
                lambda: notices.agent is not None and notices.agent["exit_margin"] == 2 * HOUR
            ), notices.agent
        finally:
            notices.close(ack_timeout=0.5)
    finally:
        agent.stop()


@settings(max_examples=40, deadline=None)
@given(seconds=st.floats(min_value=0, max_value=1e12, allow_nan=False))
def test_the_flush_and_stall_sent_are_what_the_agent_takes(seconds: float) -> None:
    from forewarn.clients.notices import _ack_figure

    sent = _ack_figure("flush_seconds", seconds)
    assert 0 <= sent <= HOUR
    assert sent == min(seconds, HOUR)
    assert _ack_figure("stall_seconds", seconds) == sent
    # The others have bounds of their own (a day), and go as they are up to it.
    assert _ack_figure("step", 10**12) == 10**12
    assert _ack_figure("flush_seconds", 5000) == HOUR  # an int, timed in whole seconds


def test_the_clients_maxima_are_the_agents() -> None:
    from forewarn.agent.protocol import AckRequest
    from forewarn.clients.notices import ACK_MAXIMA

    fields = AckRequest.model_json_schema()["properties"]
    for key, most in ACK_MAXIMA.items():
        (number,) = [kind for kind in fields[key]["anyOf"] if kind["type"] == "number"]
        assert number["maximum"] == most, key
