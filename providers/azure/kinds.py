"""The Scheduled Events types Azure documents, in a module that loads nothing else: the
settings (`azure.approve_types`), the parser and the simulator share them, and
`forewarn simulate azure` loads no settings model (pydantic) for them."""

from __future__ import annotations

EVENT_TYPES = ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")

__all__ = ["EVENT_TYPES"]
