"""`forewarn status`'s notice lines, read from a reply of any agent (older, newer, or a
peer that is not one): never a traceback, and each client named once on a notice's line."""

from __future__ import annotations

from datetime import timezone
from typing import Any

from forewarn.agent.cli import _status_lines, _waited_for
from forewarn.protocol.timefmt import format_time
from hypothesis import given
from hypothesis import strategies as st
from support import wire_notice

_ANY = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)
_CLIENTS = st.text("abcde", min_size=1, max_size=2)


@given(
    held=st.dictionaries(_CLIENTS, st.none() | st.integers(1, 2**31 - 1), max_size=4),
    late=st.lists(_CLIENTS, max_size=4, unique=True),
    gone=st.lists(_CLIENTS, max_size=4, unique=True),
)
def test_each_client_is_named_once(
    held: dict[str, int | None], late: list[str], gone: list[str]
) -> None:
    said = _waited_for(held, late, gone)
    names = [part for part in said.replace(",", " ").split() if part in {*held, *late, *gone}]
    assert sorted(names) == sorted({*held, *late, *gone}), said
    # One gone before its ack of a notice not past its deadline (a drain) is named so too.
    early = set(gone) - set(late) - set(held)
    assert ("  gone before its ack: " in said) == bool(early), said
    assert ("waiting for" in said) == bool(set(held) - set(late)), said
    assert ("not acked by" in said) == bool(late), said
    # One that left before its ack is said so, as the agent's warning says it; only such one.
    left = {client for client in late if client in gone and client not in held}
    assert said.count("(gone before its ack)") == len(left), said
    for client in left:
        assert f" {client} (gone before its ack)" in said, said


@given(held=_ANY, late=_ANY, unknown=_ANY, acked=_ANY, gone=_ANY, overdue=_ANY)
def test_any_reply_gives_lines(
    held: object, late: object, unknown: object, acked: object, gone: object, overdue: object
) -> None:
    notice = wire_notice()
    reply: dict[str, Any] = {
        "agent": {
            "agent": "a",
            "version": "0",
            "pid": 1,
            "providers": ["local"],
            "events": "ipc://e",
            "control": "ipc://c",
            "started_at": "2026-12-06T00:00:00Z",
            "seq": 1,
            "subscribers": 0,
        },
        "active": [notice],
        "held_for": {notice["id"]: held},
        "unacked_past_deadline": {notice["id"]: late},
        "past_deadline_receivers_unknown": unknown,
        "acked_by": acked,
        "gone_before_ack": gone,
        "overdue": {notice["id"]: overdue},
    }
    lines = _status_lines(reply)
    assert any(notice["id"] in line for line in lines)


def test_an_overdue_notice_is_said_so_beside_it() -> None:
    """Past its deadline plus the grace, its provider still showing it: kept active, and the
    operator's line says so (it read as any terminate past its deadline)."""
    notice = wire_notice()
    reply: dict[str, Any] = {
        "agent": {
            "agent": "a",
            "version": "0",
            "pid": 1,
            "providers": ["aws"],
            "events": "ipc://e",
            "control": "ipc://c",
            "started_at": "2026-12-06T00:00:00Z",
            "seq": 1,
            "subscribers": 0,
        },
        "active": [notice],
        "overdue": {notice["id"]: "2026-12-07T22:00:00Z"},
    }
    (line,) = [line for line in _status_lines(reply) if notice["id"] in line]
    assert "overdue since 2026-12-07T22:00:00Z: past its deadline plus the grace and " in line
    assert f"{notice['provider']} still shows it" in line
    older = {**reply, "overdue": {}}  # an older agent's reply has none
    assert not any("overdue" in line for line in _status_lines(older))


def test_noticed_is_said_only_of_another_moment_than_the_send() -> None:
    """The report's time and the send's, read microseconds apart, fell on two milliseconds
    now and then: `status` said "noticed 11:45:35.236Z" of a drain sent at 11:45:35.237Z,
    as if it had stood before. A restored notice, noticed long before its resend, still is."""
    from forewarn.agent.eventlines import describe

    moment = wire_notice(noticed_at="2026-12-06T11:45:35.236Z", sent_at="2026-12-06T11:45:35.237Z")
    assert "noticed" not in describe(moment, noticed=True)
    restored = wire_notice(
        noticed_at="2026-12-06T11:40:00.000Z", sent_at="2026-12-06T11:45:35.237Z"
    )
    assert "noticed 2026-12-06T11:40:00.000Z" in describe(restored, noticed=True)


_TIMES = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=30),
    st.datetimes(timezones=st.just(timezone.utc)).map(lambda when: format_time(when)),
    st.datetimes().map(lambda when: when.isoformat()),  # no offset: read as no time
)


@given(noticed_at=_TIMES, sent_at=_TIMES)
def test_any_noticed_and_sent_times_give_one_line(noticed_at: object, sent_at: object) -> None:
    from forewarn.agent.eventlines import describe

    """Whatever a peer put in them: never a traceback; the same text, or none, is not said."""
    line = describe(wire_notice(noticed_at=noticed_at, sent_at=sent_at), noticed=True)
    if noticed_at == sent_at or not noticed_at:
        assert "  noticed " not in line


# What a parsed notice may hold in its text fields: any string the client library's parser
# takes (it reads a time without the blanks around it, so a newline after one passes).
_ANY_TEXT = st.text(max_size=40)
_TIME_WITH_BLANKS = st.tuples(
    st.sampled_from(["", "\n", "\r\n", "\t", " \x0b"]),
    st.datetimes(timezones=st.just(timezone.utc)).map(lambda when: format_time(when)),
    st.sampled_from(["", "\n", "\r", " "]),
).map("".join)


@given(
    notice_id=_ANY_TEXT,
    action=st.sampled_from(["drain", "terminate", "clear"]) | _ANY_TEXT,
    reason=_ANY_TEXT,
    provider=_ANY_TEXT,
    sent_at=_TIME_WITH_BLANKS | _ANY_TEXT,
    noticed_at=_TIME_WITH_BLANKS,
    deadline=st.none() | _TIME_WITH_BLANKS,
)
def test_any_text_a_peer_sends_gives_one_printable_line(
    notice_id: str,
    action: str,
    reason: str,
    provider: str,
    sent_at: str,
    noticed_at: str,
    deadline: str | None,
) -> None:
    """`watch`, `wait` and `status` print a notice's fields as received: a publisher that is
    not the agent put a newline in `sent_at` (taken: a time is read without its blanks) and
    `watch` printed one notice as two lines; an escape in `reason` reached the terminal."""
    from forewarn.agent.eventlines import describe

    notice = wire_notice(
        id=notice_id,
        action=action,
        reason=reason,
        provider=provider,
        sent_at=sent_at,
        noticed_at=noticed_at,
        deadline=deadline,
    )
    for replay in (False, True):
        line = describe(notice, replay=replay, noticed=True)
        assert line.isprintable(), repr(line)
