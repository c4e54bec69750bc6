"""A transport error is said in one line that names what went wrong: httpx raises a reset
connection as `ReadError('')`, its reason down the chain of causes, and the watchers logged
`azure: transport: ReadError: ` and nothing more."""

from __future__ import annotations

import re

from forewarn.providers.errortext import MAX_CAUSES, error_text
from forewarn.testing import start_agent
from hypothesis import given
from hypothesis import strategies as st
from support import eventually


def test_a_reset_of_the_azure_endpoint_is_said_as_a_reset() -> None:
    with start_agent("azure") as agent:
        event_id = agent.azure.event("Reboot", in_="15m")
        drain = agent.wait_for_event(action="drain", timeout=15)
        fault = agent.fault("reset")
        line = eventually(
            lambda: re.search(r"^.*azure: transport: .*$", agent.log(), re.M),
            15,
            "the transport error's line",
        )
        assert "Connection reset by peer" in line.group(0), line.group(0)
        agent.end_fault(fault)
        eventually(lambda: "azure: polling recovered" in agent.log(), 15, "the recovery")
        # The notice stood through it: not cleared, not sent again.
        assert [(n["action"], n["id"]) for n in agent.events] == [("drain", drain["id"])]
        assert drain["id"].endswith(event_id)


def _chain(messages: list[str], explicit: list[bool]) -> BaseException:
    """Exceptions raised one from the other, the first of `messages` the outermost."""
    inner: BaseException | None = None
    for message, by_cause in zip(reversed(messages), reversed(explicit), strict=True):
        outer = OSError(message) if message else RuntimeError()
        if inner is not None:
            if by_cause:
                outer.__cause__ = inner
            else:
                outer.__context__ = inner
        inner = outer
    assert inner is not None
    return inner


@given(
    messages=st.lists(st.text(max_size=12), min_size=1, max_size=MAX_CAUSES + 3),
    explicit=st.lists(st.booleans(), min_size=MAX_CAUSES + 3, max_size=MAX_CAUSES + 3),
)
def test_the_line_is_the_outer_type_and_the_first_message_of_the_chain(
    messages: list[str], explicit: list[bool]
) -> None:
    error = _chain(messages, explicit[: len(messages)])
    text = error_text(error)
    name = type(error).__name__
    found = [str(OSError(m)).strip() for m in messages[:MAX_CAUSES] if m.strip()]
    assert text == (f"{name}: {found[0]}" if found else name)


def test_a_cycle_of_causes_ends() -> None:
    first, second = RuntimeError(), RuntimeError()
    first.__cause__, second.__cause__ = second, first
    assert error_text(first) == "RuntimeError"


def test_an_oversized_imds_answer_is_said_too_large_not_broken() -> None:
    with start_agent("aws") as agent:
        agent.aws.spot_interruption(in_="10m")
        terminate = agent.wait_for_event(action="terminate", timeout=15)
        fault = agent.fault("oversize", path="/latest/meta-data/spot", size=5_000_000)
        line = eventually(
            lambda: re.search(r"^.*aws: too-large: .*$", agent.log(), re.M),
            15,
            "the oversized answer's line",
        )
        assert "answer of 5000000 bytes larger than 1 MiB" in line.group(0), line.group(0)
        assert "broke off" not in agent.log(), agent.log()
        agent.end_fault(fault)
        eventually(lambda: "aws: polling recovered" in agent.log(), 15, "the recovery")
        assert [(n["action"], n["id"]) for n in agent.events] == [("terminate", terminate["id"])]
