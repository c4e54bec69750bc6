"""Deployment files shipped in the package, and their renderers.

`files/` is the source tree's packaging/ directory (a symlink there, copied into the wheel),
so `forewarn render cloud-init` renders exactly the units the repository ships.
"""

from .cloud_init import RenderError, render, requirement

__all__ = ["RenderError", "render", "requirement"]
