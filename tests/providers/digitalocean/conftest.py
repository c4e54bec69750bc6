"""Fixtures of the DigitalOcean tests: Dovecot servers owned by the tests (the same helper
users get, forewarn.testing.dovecot).

Without Dovecot the mailbox tests are skipped, except under CI=true, where they fail: CI
installs it (.ci/setup.d/20-dovecot.sh).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from forewarn.testing.dovecot import Dovecot, MailUser, dovecot_binary


def _require_dovecot() -> str:
    binary = dovecot_binary()
    if binary is None:
        reason = "dovecot is not installed (apt-get install dovecot-imapd; see .ci/setup.d)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}: CI must run these tests")
        pytest.skip(reason)
    return binary


@pytest.fixture(scope="session")
def dovecot() -> Iterator[Dovecot]:
    server = Dovecot(_require_dovecot()).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def dovecot_without_idle() -> Iterator[Dovecot]:
    server = Dovecot(_require_dovecot(), idle=False).start()
    yield server
    server.stop()


@pytest.fixture
def mail_user(dovecot: Dovecot) -> MailUser:
    return dovecot.add_user()
