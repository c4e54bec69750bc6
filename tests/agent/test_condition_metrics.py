"""Standing conditions (`forewarn status`'s `condition` lines) in /metrics: a fleet watched by
Prometheus alone never runs `status`, and a condition that comes with no poll error (the API
server refusing NodeClaims, a state file that cannot be written) showed nowhere in it."""

from __future__ import annotations

from pathlib import Path

from forewarn.agent.metrics import MetricsObserver
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.simulator import SimServer
from prometheus_client import generate_latest
from support import AgentProcess, agent_env, eventually
from test_metrics import Samples, metrics_url, samples, scrape_url, value


def conditions_exported(found: Samples) -> dict[tuple[str, str], float]:
    return {
        (dict(labels)["provider"], dict(labels)["condition"]): sample
        for (name, labels), sample in found.items()
        if name == "forewarn_condition"
    }


def test_each_standing_condition_is_a_series_while_it_holds() -> None:
    """Read at scrape time from where the agent keeps them: a provider's and the agent's own,
    one series each at 1, gone once resolved (an alert on the series fires while it holds)."""
    standing: dict[str, dict[str, str]] = {
        "kubernetes": {"nodeclaim-refused": "get on nodeclaims is forbidden"},
        "agent": {"state": "cannot write /x/state.json"},
    }
    observer = MetricsObserver()
    observer.watch_conditions(lambda: {name: dict(kinds) for name, kinds in standing.items()})
    found = conditions_exported(samples(generate_latest(observer.registry).decode()))
    assert found == {("kubernetes", "nodeclaim-refused"): 1, ("agent", "state"): 1}, found
    standing["kubernetes"].clear()
    found = conditions_exported(samples(generate_latest(observer.registry).decode()))
    assert found == {("agent", "state"): 1}, found


def test_a_source_that_fails_costs_the_series_not_the_scrape() -> None:
    def broken() -> dict[str, dict[str, str]]:
        raise RuntimeError("changed while read")

    observer = MetricsObserver()
    observer.watch_conditions(broken)
    found = samples(generate_latest(observer.registry).decode())
    assert not conditions_exported(found)
    assert value(found, "forewarn_ready") == 0


def test_a_real_agents_imds_token_condition_is_in_metrics_until_a_token_comes(
    tmp_path: Path,
) -> None:
    """A hop limit of 1 (a container on EC2) fails every token PUT: `status` names the fix,
    and /metrics showed only `token-timeout` errors, the cause nowhere an alert could say."""
    sim = ImdsSimulator()
    fault = sim.add_fault("hop-limit", seconds=30)
    with SimServer(sim) as server:
        env = agent_env(
            tmp_path,
            FOREWARN_AWS_URL=server.url,
            FOREWARN_AWS_TIMEOUT="0.2",
            FOREWARN_METRICS_ADDRESS="127.0.0.1:0",
        )
        with AgentProcess(tmp_path, providers=("aws",), env=env) as agent:
            url = metrics_url(agent)
            eventually(
                lambda: conditions_exported(scrape_url(url)) == {("aws", "imds-token"): 1},
                10,
                "the condition in /metrics",
            )
            sim.remove_fault(fault)
            eventually(lambda: conditions_exported(scrape_url(url)) == {}, 10, "the condition gone")


def test_the_agents_own_condition_is_in_metrics(tmp_path: Path) -> None:
    env = agent_env(tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0")
    with AgentProcess(tmp_path, env=env) as agent:
        url = metrics_url(agent)
        state = Path(env["FOREWARN_STATE_DIR"]) / "state.json"
        state.mkdir()  # a directory in its place fails every write, as a full disk would
        agent.control({"op": "notify", "action": "drain", "id": "local/kept"})
        eventually(
            lambda: conditions_exported(scrape_url(url)) == {("agent", "state"): 1},
            10,
            "the failed write in /metrics",
        )
        state.rmdir()
        eventually(lambda: conditions_exported(scrape_url(url)) == {}, 10, "resolved")
