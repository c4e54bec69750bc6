"""The `Status` object the simulated API server answers with, as a real one does."""

from __future__ import annotations

from typing import Any


def api_status(
    code: int, reason: str = "", message: str = "", details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A Status as the API server answers (a Success has no reason or message; a refused
    eviction's `details` name its causes)."""
    answer: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
    }
    if message:
        answer["message"] = message
    if reason:
        answer["reason"] = reason
    if details is not None:
        answer["details"] = details
    return {**answer, "code": code}
