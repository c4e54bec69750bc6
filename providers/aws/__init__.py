"""The aws notice contract: EC2's instance metadata service (IMDS).

`SPEC` names its faces, each loaded on first use so the agent loads only what it runs:
`watch` (the watcher), `simulate` (a faithful IMDS on loopback) and `drill` (a real spot
interruption through AWS FIS). This package itself imports neither httpx nor boto3.
"""

from forewarn.providers.base import Watcher, WatcherContext
from forewarn.providers.spec import CommandFace, ProviderSpec, SimulateFace

from .imds import (
    parse_aws_date,
    parse_identity,
    parse_instance_action,
    parse_lifecycle_state,
    parse_rebalance,
    parse_scheduled,
)
from .settings import Settings


def _watcher(settings: Settings, context: WatcherContext) -> Watcher:
    from .watch import build  # loads httpx: only for a provider the agent runs

    return build(settings, context)


def _simulate() -> SimulateFace:
    from . import simulate

    return simulate


def _drill() -> CommandFace:
    from . import drill

    return drill


SPEC = ProviderSpec(
    name="aws",
    summary="EC2 instance metadata (IMDSv2): spot, rebalance, scheduled events, ASG lifecycle",
    settings=Settings,
    watcher=_watcher,
    simulate=_simulate,
    drill=_drill,
)


__all__ = [
    "SPEC",
    "Settings",
    "parse_aws_date",
    "parse_identity",
    "parse_instance_action",
    "parse_lifecycle_state",
    "parse_rebalance",
    "parse_scheduled",
]
