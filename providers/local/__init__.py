"""The local notice contract: a flag file and manual notices (`forewarn notify`).

It has no simulator or drill of its own: `forewarn drill local` is the agent's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forewarn.providers.lazy import lazy_attributes
from forewarn.providers.spec import ProviderSpec

if TYPE_CHECKING:
    from .settings import Settings

# The settings model loads on first use (`SPEC.settings`, or `Settings` here): `forewarn
# simulate` and a drill's `--help` read the registry and never validate a configuration.
__getattr__ = lazy_attributes(__name__, "settings", ("Settings",))

SPEC: ProviderSpec[Settings] = ProviderSpec.of_package(
    __name__,
    name="local",
    summary="a flag file and `forewarn notify` on this machine",
    detect=False,
    simulate=False,
    drill=False,
    reasons=("manual", "drill"),
)


__all__ = ["SPEC", "Settings"]
