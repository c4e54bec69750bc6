"""How a notifier names, at stop, the notices it has not passed on yet."""

from __future__ import annotations

from ..protocol import Notice


def named(notices: list[Notice], limit: int = 10) -> str:
    """`action id, ...`: the first `limit` of `notices`, then `...` when there are more."""
    shown = ", ".join(f"{notice.action} {notice.id}" for notice in notices[:limit])
    return shown + (", ..." if len(notices) > limit else "")


__all__ = ["named"]
