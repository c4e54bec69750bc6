"""`--provider auto` probes every provider at once, each within its own budget (AWS 1 s).
Each watcher was built inside its probe, so a provider whose build was slow (its watch
module and SDK imported on a loaded machine) spent the other probes' budgets: on check 28f
AWS was not picked on an endpoint that answered within milliseconds."""

from __future__ import annotations

import sys
from pathlib import Path

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


def test_a_slow_watcher_build_does_not_spend_another_providers_detection_budget(
    tmp_path: Path,
) -> None:
    with SimServer(ImdsSimulator()) as server:
        dead = f"http://{DEAD_LOOPBACK}"
        env = agent_env(
            tmp_path,
            FOREWARN_AWS_URL=server.url,
            FOREWARN_AZURE_URL=dead,
            FOREWARN_GCP_URL=dead,
            FOREWARN_DIGITALOCEAN_URL=dead,
        )
        agent = AgentProcess(tmp_path, env=env)
        agent.argv = [
            sys.executable, "-c", LAUNCH, str(Path(__file__).parent), "agent", "--provider", "auto"
        ]  # fmt: skip
        with agent:
            providers = agent.control({"op": "status"})["agent"]["providers"]
            assert "aws" in providers, agent.output()
            assert "slowbuild" not in providers
