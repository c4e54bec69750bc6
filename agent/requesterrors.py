"""The error a control request refused by validation is answered with: one line that names
each field and says what was wrong, in words a client in any language can act on.

The text goes back to whoever sent the request, who prints or logs it as it is (`forewarn
notify` prints it on stderr): the request's own keys and values appear in it, so each is
shown escaped where not printable and cut to a length, and so is the whole.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from .requestfields import REQUEST_MODELS, misspelled

# How much of each field name and each message is shown, and how many problems at most.
FIELD_CHARS = 60
MESSAGE_CHARS = 240
PROBLEMS_SHOWN = 5
# The ops a request may name, from the models the agent reads: a list kept apart here left
# out `hold` ("op: expected one of 'status', 'notify', 'clear', 'ack'").
OPS = tuple(REQUEST_MODELS)


def shown(text: str, limit: int) -> str:
    """`text` as one printable line of at most about `limit` characters: a control character
    (a newline, an escape sequence) is written as JSON escapes it, so it forges no line."""
    escaped = "".join(char if char.isprintable() else json.dumps(char)[1:-1] for char in text)
    return escaped if len(escaped) <= limit else escaped[:limit] + "…"


def _value(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return shown(text, 40)


def _problem(item: Any, op: Any) -> str:
    field = ".".join(str(part) for part in item["loc"][1:]) or "op"
    kind = item["type"]
    if kind == "union_tag_not_found":
        message = "missing; expected " + ", ".join(repr(o) for o in OPS)
    elif kind == "union_tag_invalid":
        message = f"expected one of {', '.join(repr(o) for o in OPS)}, got {_value(op)}"
    elif kind == "extra_forbidden":
        # A request carries no protocol version: "v" belongs to what the agent sends.
        # Every op is a known name here (one that is not fails the union's tag first):
        # "a ack request" read as a typo of ours in every client's log.
        article = "an" if str(op)[:1] in "aeiou" else "a"
        message = f"not a field of {article} {op} request"
        meant = misspelled(field, op)
        if meant is not None:
            message += f" (did you mean {meant}?)"
    else:
        # pydantic's words for a validator's refusal, not the client's: "deadline: Value
        # error, expected an RFC 3339 time" named a Python exception class.
        message = str(item["msg"]).removeprefix("Value error, ")
    return f"{shown(field, FIELD_CHARS)}: {shown(message, MESSAGE_CHARS)}"


def request_problems(error: ValidationError, request: dict[str, Any]) -> str:
    """What was wrong with `request`, one problem per field, for `bad request: ...`."""
    items = error.errors()
    problems = [_problem(item, request.get("op")) for item in items[:PROBLEMS_SHOWN]]
    if len(items) > PROBLEMS_SHOWN:
        problems.append(f"and {len(items) - PROBLEMS_SHOWN} more")
    return "; ".join(problems)


__all__ = ["request_problems", "shown"]
