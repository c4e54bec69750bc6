"""The aws notice contract: EC2's instance metadata service (IMDS).

`SPEC` names its faces, each loaded on first use so the agent loads only what it runs:
`watch` (the watcher), `simulate` (a faithful IMDS on loopback) and `drill` (a real spot
interruption through AWS FIS). This package itself imports neither httpx nor boto3.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forewarn.providers.lazy import lazy_exports
from forewarn.providers.spec import ProviderSpec

if TYPE_CHECKING:
    from .imds import (
        parse_aws_date,
        parse_identity,
        parse_instance_action,
        parse_lifecycle_state,
        parse_rebalance,
        parse_scheduled,
    )
    from .settings import Settings

# The parsers load on first use: an agent that does not run aws never needs them.
__getattr__ = lazy_exports(
    __name__,
    {
        "settings": ("Settings",),
        "imds": (
            "parse_aws_date",
            "parse_identity",
            "parse_instance_action",
            "parse_lifecycle_state",
            "parse_rebalance",
            "parse_scheduled",
        ),
    },
)


SPEC: ProviderSpec[Settings] = ProviderSpec.of_package(
    __name__,
    name="aws",
    summary="EC2 instance metadata (IMDSv2): spot, rebalance, scheduled events, ASG lifecycle",
    reasons=("spot-interruption", "rebalance-recommendation", "scheduled-maintenance", "eviction"),
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
