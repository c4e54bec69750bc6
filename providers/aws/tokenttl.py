"""The token lifetimes IMDS accepts, in a module that loads nothing else: the settings
(`aws.token_ttl`) and the simulator share them, and `forewarn simulate aws` loads no
settings model (pydantic) for two numbers."""

from __future__ import annotations

# IMDS only accepts token lifetimes in this range (a PUT outside it gets 400).
MIN_TOKEN_TTL = 1
MAX_TOKEN_TTL = 21600

__all__ = ["MAX_TOKEN_TTL", "MIN_TOKEN_TTL"]
