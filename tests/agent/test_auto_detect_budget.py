"""`--provider auto` probes every provider at once, each within its own budget (AWS 1 s).
Each watcher was built inside its probe, so a provider whose build was slow (its watch
module and SDK imported on a loaded machine) spent the other probes' budgets: on check 28f
AWS was not picked on an endpoint that answered within milliseconds. Later, beside five busy
loops (4 of 4 runs): the GCP watcher's HTTP client, made at its first request, and httpx's
async backend, loaded at the first request of all, blocked the probes' loop for over a
second inside their budgets, and every probe, AWS's too, timed out."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.simulator import SimServer
from support import DEAD_LOOPBACK, AgentProcess, agent_env

LAUNCH = """
import sys
sys.path.insert(0, sys.argv.pop(1))
from slow_build_provider import SPEC
from forewarn.agent.cli import main
from forewarn.providers import REGISTRY
sys.exit(main(sys.argv[1:], REGISTRY.plus(SPEC)))
"""


@pytest.fixture
def four_providers(tmp_path: Path) -> Iterator[dict[str, str]]:
    """An agent's environment where `--provider auto` has four providers to probe: the AWS
    simulator, which answers, and Azure, GCP and DigitalOcean at a dead loopback address."""
    with SimServer(ImdsSimulator()) as server:
        dead = f"http://{DEAD_LOOPBACK}"
        yield agent_env(
            tmp_path,
            FOREWARN_AWS_URL=server.url,
            FOREWARN_AZURE_URL=dead,
            FOREWARN_GCP_URL=dead,
            FOREWARN_DIGITALOCEAN_URL=dead,
        )


def test_a_slow_watcher_build_does_not_spend_another_providers_detection_budget(
    tmp_path: Path, four_providers: dict[str, str]
) -> None:
    agent = AgentProcess(tmp_path, env=four_providers)
    agent.argv = [
        sys.executable, "-c", LAUNCH, str(Path(__file__).parent), "agent", "--provider", "auto"
    ]  # fmt: skip
    with agent:
        providers = agent.control({"op": "status"})["agent"]["providers"]
        assert "aws" in providers, agent.output()
        assert "slowbuild" not in providers


# Stands in for a loaded machine at the two points of the HTTP stack that are slow once:
# making a client (its SSL context) and the first request's load of the async backend. Each
# blocks the thread, as a starved process's wait for the CPU does; longer than the AWS
# probe's budget (1 s) and the runner's (1.5 s).
SLOW_HTTP_LAUNCH = """
import sys, time
import httpx
CLIENT_SECONDS, IMPORT_SECONDS = float(sys.argv.pop(1)), float(sys.argv.pop(1))
made = httpx.AsyncClient.__init__
def slowly_made(self, *args, **kwargs):
    time.sleep(CLIENT_SECONDS)
    made(self, *args, **kwargs)
httpx.AsyncClient.__init__ = slowly_made
class SlowBackendImport:
    def find_spec(self, name, path=None, target=None):
        if name == "anyio._backends._asyncio":
            time.sleep(IMPORT_SECONDS)
        return None
sys.meta_path.insert(0, SlowBackendImport())
from forewarn.agent.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("client_seconds", "import_seconds"), [(1.6, 0.0), (0.0, 1.6)], ids=["client", "backend"]
)
def test_the_http_stacks_first_costs_are_paid_before_the_probes_budgets_start(
    tmp_path: Path, four_providers: dict[str, str], client_seconds: float, import_seconds: float
) -> None:
    agent = AgentProcess(tmp_path, env=four_providers)
    agent.argv = [
        sys.executable, "-c", SLOW_HTTP_LAUNCH, str(client_seconds), str(import_seconds),
        "agent", "--provider", "auto",
    ]  # fmt: skip
    # Each of its HTTP clients made slowly: counted in them, its start takes longer.
    agent.start(timeout=30.0 + 8 * client_seconds)
    try:
        providers = agent.control({"op": "status"})["agent"]["providers"]
        assert "aws" in providers, agent.output()
    finally:
        agent.stop()
