"""`forewarn drill digitalocean`: rehearse a Spot droplet reclaim through the real path.

DigitalOcean has no API that triggers a reclaim or its email. The drill therefore files a
test reclaim mail, marked with an `X-Forewarn-Drill` header, into the mailbox the agent
watches (IMAP APPEND with the agent's own settings and credentials). The running agent then
publishes a drain with reason `drill` and the mail's deadline, and escalates it to
terminate at the deadline minus the exit margin, exactly as for a real reclaim mail.
Without `--yes` it only prints what it would file, and sends nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import datetime
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid, parseaddr
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .settings import Settings
    from .watch import Droplet

# Every `forewarn` command builds its parser with each provider's drill arguments; the mail
# module (hundreds of patterns, about 0.3 s of CPU to compile) and the watcher load only when
# this drill runs, so no other command pays for them.

DEFAULT_FROM = "forewarn drill <forewarn-drill@digitalocean.com>"
SUBJECT = "[forewarn drill] Spot Droplet reclaim notice"


# `forewarn drill --help`'s line: DigitalOcean has no test path to trigger.
HELP = "file a test reclaim mail into the mailbox the agent watches (DigitalOcean has no test path)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "DigitalOcean has no reclaim drill API. This files a test reclaim mail into the "
        "mailbox the agent watches (IMAP APPEND); the agent raises a drain (reason drill) "
        "and later a terminate. Acts only with --yes."
    )
    parser.add_argument(
        "--config", type=Path, help="TOML file of the agent (default: as `forewarn agent`)"
    )
    parser.add_argument(
        "--deadline",
        default="15m",
        help="deadline written in the mail: a duration from now or an RFC 3339 time (default 15m)",
    )
    parser.add_argument(
        "--from",
        dest="sender",
        default=DEFAULT_FROM,
        help=f"From header of the mail; must match digitalocean.sender (default {DEFAULT_FROM!r})",
    )
    parser.add_argument("--yes", action="store_true", help="file the mail (default: dry run)")


def compose(droplet: Droplet, deadline: datetime, sender: str, now: datetime) -> bytes:
    """The drill mail: a reclaim notice naming this droplet, with its deadline in words."""
    from .mail import DRILL_HEADER

    message = EmailMessage()
    message["From"] = sender
    message["To"] = "forewarn@localhost"
    message["Subject"] = SUBJECT
    message["Date"] = format_datetime(now)
    message["Message-ID"] = make_msgid("forewarn-drill")
    message[DRILL_HEADER] = "yes"
    named = " ".join(
        part
        for part in (
            droplet.name or "",
            f"(ID {droplet.id})" if droplet.id else "",
        )
        if part
    )
    message.set_content(
        "This is a forewarn drill, not a message from DigitalOcean.\n\n"
        f"Spot GPU Droplet {named} will be reclaimed at "
        f"{deadline:%H:%M:%S} UTC on {deadline:%Y-%m-%d}.\n"
    )
    return bytes(message)


def _fail(message: str, code: int = 2) -> int:
    print(f"forewarn: drill digitalocean: error: {message}", file=sys.stderr)
    return code


def _droplet(settings: Settings) -> Droplet:
    import httpx

    from .watch import identify

    async def ask() -> Droplet:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await identify(settings, client)

    return asyncio.run(ask())


def run(args: argparse.Namespace) -> int:
    from forewarn.protocol.errors import ConfigError
    from forewarn.protocol.timefmt import format_time, parse_deadline, utcnow

    from .imap import CredentialsError, MailboxError, MailboxSession, load_credentials
    from .mail import DRILL_HEADER, judge, read_mail
    from .settings import Settings
    from .watch import MetadataUnavailable, match_rules

    print(
        "DigitalOcean has no API to trigger a Spot reclaim or its email; this drill files a "
        "test reclaim mail into the mailbox the agent watches."
    )
    try:
        # The agent's configuration, loaded by the command line (providers never import it).
        settings = args.load_settings(args.config)
        assert isinstance(settings, Settings)
    except ConfigError as error:
        return _fail(str(error))
    if not settings.imap_host or settings.credentials_file is None:
        return _fail(
            "no mailbox configured: set digitalocean.imap_host and digitalocean.credentials_file "
            "(FOREWARN_DIGITALOCEAN_IMAP_HOST, FOREWARN_DIGITALOCEAN_CREDENTIALS_FILE)"
        )
    try:
        # Read now (a local file; nothing is sent): missing, it failed only after the plan
        # was printed, exit 1, and the dry run said all was set. Missing credentials are
        # bad input (2), as for the other clouds' drills.
        credentials = load_credentials(settings.credentials_file)
    except CredentialsError as error:
        return _fail(str(error))
    now = utcnow().replace(microsecond=0)
    try:
        deadline = parse_deadline(args.deadline, now).replace(microsecond=0)
    except ValueError as error:
        return _fail(f"--deadline: {error}")
    if deadline <= now:
        return _fail(f"--deadline: {format_time(deadline)} is not in the future")
    if parseaddr(args.sender)[1] == "":
        return _fail(f"--from: not an address: {args.sender!r}")
    try:
        droplet = _droplet(settings)
    except MetadataUnavailable as error:
        return _fail(str(error))
    raw = compose(droplet, deadline, args.sender, now)
    rules = match_rules(settings, droplet)
    verdict = judge(read_mail(raw), rules, "drill", now)
    if verdict.report is None:
        return _fail(
            f"the agent would ignore this mail ({verdict.why}): adjust --from or "
            "digitalocean.sender / digitalocean.subject / digitalocean.require_dkim"
        )
    where = f"{settings.imap_host}:{settings.port()} ({settings.imap_tls}), folder "
    where += repr(settings.imap_mailbox)
    print(f"mailbox:  {where}, user from {settings.credentials_file}")
    print(f"mail:     From {args.sender!r}, Subject {SUBJECT!r}, header {DRILL_HEADER}: yes")
    print(f"droplet:  id {droplet.id or '-'}, name {droplet.name or '-'}")
    print(f"deadline: {format_time(deadline)} (the agent escalates to terminate before it)")
    print("expect:   the agent publishes a drain, reason drill, provider digitalocean")
    if not args.yes:
        print("dry run: nothing was sent; add --yes to file the mail")
        return 0
    session = MailboxSession(
        settings.imap_host,
        settings.port(),
        settings.imap_tls,
        ca_file=settings.imap_ca_file,
        timeout=settings.imap_timeout,
    )
    try:
        session.open(credentials, settings.imap_mailbox)
        session.append(raw, settings.imap_mailbox)
    except MailboxError as error:
        return _fail(str(error), 1)
    finally:
        session.close()
    print(f"filed: the drill mail is in {settings.imap_mailbox!r}; delete it when done")
    return 0


__all__ = ["add_arguments", "compose", "run"]
