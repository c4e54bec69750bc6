"""The local notice contract: a flag file and manual notices (`forewarn notify`).

It has no simulator or drill of its own: `forewarn drill local` is the agent's.
"""

from forewarn.providers.spec import ProviderSpec

from .settings import Settings

SPEC = ProviderSpec.of_package(
    __name__,
    name="local",
    summary="a flag file and `forewarn notify` on this machine",
    settings=Settings,
    detect=False,
    simulate=False,
    drill=False,
    reasons=("manual", "drill"),
)


__all__ = ["SPEC", "Settings"]
