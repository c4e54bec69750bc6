"""The pytest plugin of forewarn.testing (entry point `pytest11`: loaded whenever forewarn is
installed beside pytest).

- `forewarn_agent`: a ready agent for the test, local provider unless the test is marked
  `@pytest.mark.forewarn(provider="aws")` (any option of `RunningAgent` goes in the marker);
- `forewarn_agents`: a factory, `forewarn_agents("gcp", exit_margin="5s")`, for several agents
  or providers in one test; each is torn down after the test.

When a test fails, its report gains a section with the tail of every agent's log, and says
so when an agent had died."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

from .agent import RunningAgent

_AGENTS = pytest.StashKey[list[RunningAgent]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "forewarn(provider='local', **options): the provider (local, aws, gcp, azure, "
        "digitalocean, kubernetes) and options of the forewarn_agent fixture",
    )


def _start(request: pytest.FixtureRequest, provider: str, options: dict[str, Any]) -> RunningAgent:
    agent = RunningAgent(provider, **options)
    request.node.stash.setdefault(_AGENTS, []).append(agent)
    return agent.start()


@pytest.fixture
def forewarn_agents(request: pytest.FixtureRequest) -> Iterator[Callable[..., RunningAgent]]:
    """Start agents: `forewarn_agents(provider="aws", exit_margin="5s")`."""
    started: list[RunningAgent] = []

    def start(provider: str = "local", **options: Any) -> RunningAgent:
        agent = _start(request, provider, options)
        started.append(agent)
        return agent

    yield start
    # The last started was the last to set the environment: undo in reverse.
    for agent in reversed(started):
        agent.stop()


@pytest.fixture
def forewarn_agent(request: pytest.FixtureRequest) -> Iterator[RunningAgent]:
    """A ready agent (local provider, or the one named by `@pytest.mark.forewarn`)."""
    marker = request.node.get_closest_marker("forewarn")
    options: dict[str, Any] = dict(marker.kwargs) if marker else {}
    provider = options.pop("provider", marker.args[0] if marker and marker.args else "local")
    agent = _start(request, provider, options)
    yield agent
    agent.stop()


# The old-style wrapper: pytest 7 may run with pluggy 1.0, which knows no `wrapper=True`, and
# this plugin is loaded by every pytest run where forewarn is installed.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    agents = item.stash.get(_AGENTS, [])
    if report.failed and agents:
        for agent in agents:
            code = agent.proc.poll() if agent.proc is not None else None
            state = "running" if code is None else f"DIED with exit code {code}"
            report.sections.append(
                (
                    f"forewarn agent ({agent.provider}, pid {agent.pid}): {state}",
                    f"log tail:\n{agent.log_tail()}",
                )
            )


__all__ = ["forewarn_agent", "forewarn_agents"]
