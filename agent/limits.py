"""Bounds on what a control client may ask for: the syntax of notice ids and how many manual
notices may be active at once."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from forewarn.protocol.timefmt import format_time

# Manual notices are few in practice; the cap keeps `notify`, the state file and every
# heartbeat small whatever a client does.
MAX_MANUAL = 64
# How many acking clients the heartbeat and `status` name per notice (`acked_by`, sorted): a
# shell loop's one client among a few, while a heartbeat stays small with many clients.
ACKED_BY_LISTED = 16
# How the agent refuses a clear of an id that is not an active manual notice; `notify clear`
# reads it as 'nothing cleared' (exit 1), not as bad input.
NO_ACTIVE_MANUAL = "no active manual notice with id"
MAX_ID_LENGTH = 200
# The longest `--note` of a manual notice; the note travels in every replay of the notice.
MAX_NOTE_LENGTH = 2000
# The longest note of an ack (a client's word on its save, one line in the agent's log).
MAX_ACK_NOTE_LENGTH = 500
# An hour: far beyond any checkpoint flush worth doing before a reclaim.
MAX_FLUSH_SECONDS = 3600.0
# `<provider>/<rest>`: printable ASCII without spaces, so that an id never breaks a log line
# or a metric label, and never passes for another provider's. `\Z`, not `$`: `$` also
# matches before a final newline, which let "local/a\n" through.
_ID = re.compile(r"^[a-z0-9-]+/[\x21-\x7e]+\Z")
# A manual notice's id (`notify --id`) as the JSON Schema gives it, in ECMA-262's syntax (its
# `$` is the end of the text): `id_problem(id, "local")` in a pattern.
MANUAL_ID_PATTERN = "^local/[!-~]+$"


def id_problem(notice_id: str, provider: str) -> str | None:
    """Why `notice_id` is not a valid id for a notice of `provider`, or None when it is."""
    if len(notice_id) > MAX_ID_LENGTH:
        return f"longer than {MAX_ID_LENGTH} characters"
    if not _ID.match(notice_id):
        return f"{notice_id[:60]!r} is not <provider>/<name> in printable ASCII without spaces"
    if not notice_id.startswith(f"{provider}/"):
        return f"{notice_id[:60]!r} does not start with {provider + '/'!r}"
    return None


# Deadlines a person may ask for: not in the past (that is no notice at all) and not absurdly
# far ahead (a typo in the year). `forewarn notify` checks them before it sends, the agent
# again when it receives.
MAX_DEADLINE_AHEAD = timedelta(days=366)


def deadline_problem(deadline: datetime, now: datetime) -> str | None:
    """Why a requested deadline cannot be used, or None when it can."""
    if deadline <= now:
        return f"{format_time(deadline)} is in the past (now is {format_time(now)})"
    if deadline - now > MAX_DEADLINE_AHEAD:
        return f"{format_time(deadline)} is more than {MAX_DEADLINE_AHEAD.days} days ahead"
    return None


__all__ = [
    "MANUAL_ID_PATTERN",
    "MAX_DEADLINE_AHEAD",
    "MAX_ID_LENGTH",
    "MAX_MANUAL",
    "MAX_NOTE_LENGTH",
    "deadline_problem",
    "id_problem",
]
