"""Bounds on what a control client may ask for: the syntax of notice ids and how many manual
notices may be active at once."""

from __future__ import annotations

import re

# Manual notices are few in practice; the cap keeps `notify`, the state file and every
# heartbeat small whatever a client does.
MAX_MANUAL = 64
MAX_ID_LENGTH = 200
# The longest `--note` of a manual notice; the note travels in every replay of the notice.
MAX_NOTE_LENGTH = 2000
# `<provider>/<rest>`: printable ASCII without spaces, so that an id never breaks a log line
# or a metric label, and never passes for another provider's. `\Z`, not `$`: `$` also
# matches before a final newline, which let "local/a\n" through.
_ID = re.compile(r"^[a-z0-9-]+/[\x21-\x7e]+\Z")


def id_problem(notice_id: str, provider: str) -> str | None:
    """Why `notice_id` is not a valid id for a notice of `provider`, or None when it is."""
    if len(notice_id) > MAX_ID_LENGTH:
        return f"longer than {MAX_ID_LENGTH} characters"
    if not _ID.match(notice_id):
        return f"{notice_id[:60]!r} is not <provider>/<name> in printable ASCII without spaces"
    if not notice_id.startswith(f"{provider}/"):
        return f"{notice_id[:60]!r} does not start with {provider + '/'!r}"
    return None


__all__ = ["MAX_ID_LENGTH", "MAX_MANUAL", "MAX_NOTE_LENGTH", "id_problem"]
