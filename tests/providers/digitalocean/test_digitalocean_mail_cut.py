"""A reclaim mail larger than the part the watcher reads (FETCH_LIMIT): when that part names
neither this droplet's id nor its name, it was passed over in a DEBUG line, and a reclaim
named after the cut was missed with nothing said. It is said in one warning."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime, make_msgid

from do_support import new_mail
from forewarn.providers.digitalocean.imap import FETCH_LIMIT
from forewarn.testing import start_agent
from support import eventually


def _mail(
    droplet_id: str, filler: int, subject: str = "Your Spot Droplet will be reclaimed"
) -> bytes:
    message = new_mail()
    message["From"] = "DigitalOcean <no-reply@digitalocean.com>"
    message["Subject"] = subject
    message["Date"] = format_datetime(datetime.now(timezone.utc))
    message["Message-ID"] = make_msgid(domain="digitalocean.com")
    deadline = datetime.now(timezone.utc) + timedelta(hours=2)
    body = ("x" * 76 + "\n") * (filler // 77)
    message.set_content(body + f"Droplet {droplet_id} will be reclaimed at {deadline:%H:%M} UTC.\n")
    return bytes(message)


def test_a_reclaim_mail_cut_before_it_names_the_droplet_is_said_in_a_warning() -> None:
    with start_agent("digitalocean") as agent:
        droplet_id, _ = agent.digitalocean.droplet()
        # Past the cut: the droplet is named after the first FETCH_LIMIT bytes.
        agent.digitalocean.mail(_mail(droplet_id, 2 * FETCH_LIMIT))
        # Another sender's large mail, and a reclaim mail that fits: no warning for either.
        agent.digitalocean.mail(_mail(droplet_id, 2 * FETCH_LIMIT, subject="Your invoice"))
        agent.digitalocean.mail(_mail(droplet_id, 1000))
        drain = agent.wait_for_event(action="drain", timeout=20)
        assert drain["provider"] == "digitalocean"
        warned = eventually(
            lambda: re.findall(r"^.*WARNING.*digitalocean: mail UID \d+.*$", agent.log(), re.M),
            10,
            "the warning",
        )
        assert len(warned) == 1, warned
        line = warned[0]
        assert "mail UID 1," in line and f"first {FETCH_LIMIT // 1024} KiB" in line, line
        assert "names neither this droplet's id nor its name" in line, line
