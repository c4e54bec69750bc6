"""Helpers of the DigitalOcean mail tests."""

from __future__ import annotations

from forewarn.providers.digitalocean.mail import MatchRules
from forewarn.providers.digitalocean.settings import DEFAULT_SENDER, DEFAULT_SUBJECT

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
