"""Mail whose bytes are not in the charset it declares: 8-bit text with no charset (so
US-ASCII) or a wrong one, as older mail tools and forwarding relays send it. Each byte past
ASCII was decoded as U+FFFD, and a time written with a no-break space ("13:10\\xa0UTC", as
HTML turned to text writes it) was no time: Date + lead stood in, after the reclaim."""

from __future__ import annotations

import pytest
from do_support import RULES, SENT, utc
from forewarn.providers.digitalocean.mail import reclaim_verdict
from hypothesis import given
from hypothesis import strategies as st

_HEADERS = (
    b"From: DigitalOcean <no-reply@digitalocean.com>\r\n"
    b"Subject: Spot Droplet reclaim notice\r\n"
    b"Date: Tue, 01 Dec 2026 12:30:00 +0000\r\n"
    b"Message-ID: <charset@digitalocean.com>\r\n"
    b"MIME-Version: 1.0\r\n"
)


def _raw(content_type: bytes, body: bytes) -> bytes:
    return (
        _HEADERS
        + b"Content-Type: "
        + content_type
        + b"\r\nContent-Transfer-Encoding: 8bit\r\n\r\n"
        + body
    )


@pytest.mark.parametrize(
    ("encoding", "content_type"),
    [
        # Windows-1252 sent with no charset, with US-ASCII, with UTF-8.
        ("windows-1252", b"text/plain"),
        ("windows-1252", b"text/plain; charset=us-ascii"),
        ("windows-1252", b"text/plain; charset=utf-8"),
        # UTF-8 sent with no charset.
        ("utf-8", b"text/plain"),
        ("iso-8859-1", b"text/html"),
    ],
)
def test_a_time_in_a_charset_the_mail_does_not_declare_is_read(
    encoding: str, content_type: bytes
) -> None:
    body = "\u201cDroplet gpu-spot-1\u201d will be reclaimed at 13:10\u00a0UTC. Caf\u00e9.\r\n"
    if encoding == "iso-8859-1":
        body = "<p>Droplet gpu-spot-1 will be reclaimed at 13:10\u00a0UTC. Caf\u00e9.</p>"
    result = reclaim_verdict(_raw(content_type, body.encode(encoding)), RULES, "key", SENT)
    assert result.report is not None, result.why
    assert result.report.deadline == utc(13, 10), result.why


_LATIN = st.text(st.characters(codec="windows-1252", exclude_characters="\r\n"), max_size=40)


@given(before=_LATIN, after=_LATIN, declared=st.sampled_from([b"", b"; charset=us-ascii"]))
def test_any_text_around_the_notice_in_an_undeclared_charset_keeps_its_time(
    before: str, after: str, declared: bytes
) -> None:
    body = f"{before}\r\nDroplet gpu-spot-1 will be reclaimed at 13:10\u00a0UTC.\r\n{after}\r\n"
    raw = _raw(b"text/plain" + declared, body.encode("windows-1252"))
    result = reclaim_verdict(raw, RULES, "key", SENT)
    assert result.report is not None, result.why
    assert result.report.deadline <= utc(13, 10), result.why
