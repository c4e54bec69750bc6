"""Helpers of the DigitalOcean mail tests."""

from __future__ import annotations

import email.policy
import functools
from datetime import datetime, timezone
from email.headerregistry import BaseHeader, HeaderRegistry
from email.message import EmailMessage
from email.utils import format_datetime

from forewarn.providers.digitalocean.mail import MatchRules, Verdict, find_deadline, reclaim_verdict
from forewarn.providers.digitalocean.settings import DEFAULT_SENDER, DEFAULT_SUBJECT


class _HeadersOnce(HeaderRegistry):
    """email's header registry, parsing each header value once: the tests build tens of
    thousands of mails of the same few headers, and the default policy parsed every one of
    them again at each set and when the mail was written out (0.67 ms a mail, 0.23 here).
    The mails come out byte for byte the same."""

    @functools.lru_cache(maxsize=4096)  # noqa: B019  (one registry, for the whole run)
    def __call__(self, name: str, value: str) -> BaseHeader:
        return super().__call__(name, value)


_BUILDING = email.policy.default.clone(header_factory=_HeadersOnce())


def new_mail() -> EmailMessage:
    """An empty mail under email's default policy, to be filled in and written out."""
    return EmailMessage(policy=_BUILDING)


# The default sender and subject rules for droplet 424242424 (gpu-spot-1): a 2 h lead, mail
# up to a day old.
RULES = MatchRules.build(
    sender=DEFAULT_SENDER,
    subject=DEFAULT_SUBJECT,
    droplet_id="424242424",
    droplet_name="gpu-spot-1",
    lead=7200.0,
    max_age=86400.0,
)

# When the mails of the late-reading hunts (test_digitalocean_mail_late*.py) were sent.
SENT = datetime(2026, 12, 1, 12, 30, tzinfo=timezone.utc)


def utc(hour: int, minute: int = 0, day: int = 1) -> datetime:
    """A moment of December 2026, UTC."""
    return datetime(2026, 12, day, hour, minute, tzinfo=timezone.utc)


def verdict(body: str, subtype: str = "plain") -> Verdict:
    """The verdict on a reclaim mail of `body` sent at SENT, under RULES."""
    message = new_mail()
    message["From"] = "DigitalOcean <no-reply@digitalocean.com>"
    message["Subject"] = "Spot Droplet reclaim notice"
    message["Date"] = format_datetime(SENT)
    message["Message-ID"] = "<reclaim-late@digitalocean.com>"
    message.set_content(body, subtype=subtype)
    return reclaim_verdict(bytes(message), RULES, "key", SENT)


def deadline(text: str) -> datetime | None:
    """The deadline read from "Droplet gpu-spot-1 will be `text`", sent at SENT."""
    found = find_deadline(f"Droplet gpu-spot-1 will be {text}", SENT)
    return None if found is None else found[0]
