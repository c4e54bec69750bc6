"""The aws notice contract: EC2's instance metadata service (IMDS).

`SPEC` names its faces, each loaded on first use so the agent loads only what it runs:
`watch` (the watcher), `simulate` (a faithful IMDS on loopback) and `drill` (a real spot
interruption through AWS FIS). This package itself imports neither httpx nor boto3.
"""

import importlib
from typing import TYPE_CHECKING, Any

from forewarn.providers.spec import ProviderSpec

from .settings import Settings

if TYPE_CHECKING:
    from .imds import (
        parse_aws_date,
        parse_identity,
        parse_instance_action,
        parse_lifecycle_state,
        parse_rebalance,
        parse_scheduled,
    )

# The parsers load on first use: an agent that does not run aws never needs them.
_LAZY = frozenset(
    (
        "parse_aws_date",
        "parse_identity",
        "parse_instance_action",
        "parse_lifecycle_state",
        "parse_rebalance",
        "parse_scheduled",
    )
)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.imds"), name)


SPEC = ProviderSpec.of_package(
    __name__,
    name="aws",
    summary="EC2 instance metadata (IMDSv2): spot, rebalance, scheduled events, ASG lifecycle",
    settings=Settings,
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
