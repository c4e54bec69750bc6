"""The aws notice contract: EC2's instance metadata service (IMDS).

Faces, imported by name so the agent loads only what it runs: `watch` (the watcher),
`simulate` (a faithful IMDS on loopback) and `drill` (a real spot interruption through AWS
FIS). This package itself imports neither httpx nor boto3.
"""

from .imds import (
    parse_aws_date,
    parse_identity,
    parse_instance_action,
    parse_lifecycle_state,
    parse_rebalance,
    parse_scheduled,
)
from .settings import Settings

__all__ = [
    "Settings",
    "parse_aws_date",
    "parse_identity",
    "parse_instance_action",
    "parse_lifecycle_state",
    "parse_rebalance",
    "parse_scheduled",
]
