"""The fields of a control request this agent does not know, taken off before validation.

Within protocol v1 a field added to a request is optional, and an agent that does not know it
does what it can without it: a client library is often newer than the agent (the job's image
and the node's agent are upgraded apart), and a whole ack refused for a field added later lost
its flush time, which sizes the exit margin. Two kinds stay refused, as before: `v` (a request
that carries a protocol version is of a later protocol) and a name a typo away from one the
request has (`outcom` for `outcome`: ignored, an ack of a failed save would count as saved).
Each name ignored is logged once (a bounded number of them: a client sending new names on
every request cannot fill the log).
"""

from __future__ import annotations

import difflib
import json
import logging
from typing import Any, ClassVar

from pydantic import BaseModel

from .protocol import AckRequest, ClearRequest, HoldRequest, NotifyRequest, StatusRequest

log = logging.getLogger("forewarn.agent")

REQUEST_MODELS: dict[str, type[BaseModel]] = {
    "status": StatusRequest,
    "notify": NotifyRequest,
    "clear": ClearRequest,
    "ack": AckRequest,
    # Added with `forewarn wait --client`: missing here, a hold with a field of a newer
    # `forewarn wait` was refused whole, and a misspelled field got no hint.
    "hold": HoldRequest,
}
# A request names a later protocol with this: never ignored.
VERSION_FIELD = "v"
# How alike a name must be to a known one to be taken for its misspelling (difflib's ratio):
# `outcom`/`outcome` 0.92, `flush_second`/`flush_seconds` 0.96; `stall_seconds` (a field added
# later) against `flush_seconds` 0.77.
MISSPELLING = 0.8


def misspelled(name: str, op: object) -> str | None:
    """The field of an `op` request that `name` looks like a misspelling of, else None."""
    close = difflib.get_close_matches(name, sorted(known_fields(op)), n=1, cutoff=MISSPELLING)
    return close[0] if close else None


def known_fields(op: object) -> frozenset[str]:
    model = REQUEST_MODELS.get(op) if isinstance(op, str) else None
    return frozenset(model.model_fields) if model is not None else frozenset()


class UnknownFields:
    """Takes the fields a request's model does not know off it, logging each name once."""

    LOGGED: ClassVar[int] = 32

    def __init__(self) -> None:
        self._logged: set[tuple[str, str]] = set()
        self._quiet = False

    @staticmethod
    def known(op: object) -> frozenset[str]:
        return known_fields(op)

    def strip(self, request: dict[str, Any]) -> dict[str, Any]:
        """`request` without the fields to ignore; one of an op the agent does not know, and
        the fields to refuse, are left for validation to name."""
        op = request.get("op")
        known = known_fields(op)
        if not known:
            return request
        ignored = [
            key
            for key in request
            if key not in known and key != VERSION_FIELD and misspelled(key, op) is None
        ]
        if not ignored:
            return request
        assert isinstance(op, str)  # a known op
        for key in ignored:
            self._say(op, key)
        return {key: value for key, value in request.items() if key not in ignored}

    def _say(self, op: str, key: str) -> None:
        if (op, key) in self._logged or self._quiet:
            return
        if len(self._logged) >= self.LOGGED:
            self._quiet = True
            log.info(
                "ignored fields of %d kinds in control requests; further ones are not logged",
                len(self._logged),
            )
            return
        self._logged.add((op, key))
        log.info(
            "ignored the field %s of %s %s request: not one this agent (protocol v1) knows; "
            "a client newer than the agent may send it",
            json.dumps(key)[1:-1][:60],  # printable: no line forged in the log
            "an" if op == "ack" else "a",
            op,
        )


__all__ = ["REQUEST_MODELS", "UnknownFields", "known_fields", "misspelled"]
