"""A header value longer than the part the parser reads (HEADER_LIMIT characters, all of a
mail's together HEADERS_BUDGET) was read cut with nothing said: a reclaim whose Subject or
From was cut could be passed over, and the operator had no line to learn why."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from do_support import RULES
from forewarn.agent.protocol import utcnow
from forewarn.providers.digitalocean.mail import reclaim_verdict
from forewarn.providers.digitalocean.message import HEADER_LIMIT
from test_digitalocean_mailbox import _ScriptedServer, reclaim, running


def test_a_verdict_names_the_headers_read_cut() -> None:
    long_subject = "Spot Droplet reclaim notice " + "x" * HEADER_LIMIT
    verdict = reclaim_verdict(reclaim(subject=long_subject), RULES, "key", utcnow())
    assert verdict.cut_headers == ("Subject",)
    assert reclaim_verdict(reclaim(), RULES, "key", utcnow()).cut_headers == ()


async def test_a_mail_read_with_a_header_cut_is_said_once_in_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="forewarn")
    server = _ScriptedServer()
    # Cut before the words of a reclaim's subject: it raises nothing, and that is said.
    server.deliver(reclaim(subject="x" * HEADER_LIMIT + " Spot Droplet reclaim notice"))
    server.deliver(reclaim())
    try:
        async with running(server.settings(tmp_path), tmp_path / "s") as run:
            await run.until(lambda: len(run.reports) >= 1)
            await run.idling()
    finally:
        server.close()
    said = [r for r in caplog.records if "longer than" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert said[0].levelno == logging.WARNING
    assert "mail UID 1" in said[0].getMessage() and "Subject" in said[0].getMessage()
