"""How fast a reclaim email becomes a drain: IDLE against polling, on a real Dovecot.

For each mode the watcher runs in-process against a Dovecot on loopback (the tests' own
server, forewarn.testing.dovecot); each round files one matching
mail (IMAP APPEND) and times until the watcher emits its report. The baseline is polling,
measured in the same run at `--poll` seconds (the default interval is 30 s: its latency
scales with the interval, about half of it on average). A third row times the pure
recognition of one mail (`reclaim_verdict`).

    python bench/digitalocean_mailbox.py [--rounds 15] [--poll 2]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import percentile, table  # noqa: E402
from forewarn.agent.protocol import Report, utcnow  # noqa: E402
from forewarn.providers.base import PollHealth, WatcherContext  # noqa: E402
from forewarn.providers.digitalocean.mail import MatchRules, reclaim_verdict  # noqa: E402
from forewarn.providers.digitalocean.settings import (  # noqa: E402
    DEFAULT_SENDER,
    DEFAULT_SUBJECT,
    Settings,
)
from forewarn.providers.digitalocean.watch import DigitalOceanWatcher  # noqa: E402
from forewarn.testing.dovecot import Dovecot, MailUser, dovecot_binary  # noqa: E402


def mail() -> bytes:
    message = EmailMessage()
    message["From"] = "DigitalOcean <no-reply@digitalocean.com>"
    message["Subject"] = "Spot Droplet reclaim notice"
    message["Date"] = format_datetime(utcnow())
    message["Message-ID"] = make_msgid(domain="digitalocean.com")
    message.set_content("Droplet gpu-1 (ID 4242) will be reclaimed at 14:30 UTC on 2026-12-01.")
    return bytes(message)


async def latencies(
    server: Dovecot, user: MailUser, work: Path, rounds: int, pause: float, **extra: object
) -> list[float]:
    credentials = work / f"{user.name}.env"
    credentials.write_text(
        f"FOREWARN_IMAP_USER={user.name}\nFOREWARN_IMAP_PASSWORD={user.password}\n"
    )
    credentials.chmod(0o600)
    settings = Settings(
        url="http://127.0.0.1:9",
        droplet_id="4242",
        droplet_name="gpu-1",
        imap_host="127.0.0.1",
        imap_port=server.imaps_port,
        imap_ca_file=server.cert,
        credentials_file=credentials,
        **extra,
    )
    context = WatcherContext(work, work / user.name, PollHealth("digitalocean"))
    watcher = DigitalOceanWatcher(settings, context)
    reports: list[Report] = []
    task = asyncio.create_task(watcher.watch(reports.append))
    while context.health.polls < 1:
        await asyncio.sleep(0.01)
    found = []
    spread = random.Random(7)
    for number in range(rounds):
        # A random moment within a poll interval, so polling is not measured in phase.
        await asyncio.sleep(spread.uniform(0.05, pause))
        await asyncio.to_thread(server.append, user, mail())
        filed = time.monotonic()
        while len(reports) <= number:
            await asyncio.sleep(0.002)
        found.append(time.monotonic() - filed)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await watcher.aclose()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--poll", type=float, default=2.0, help="baseline poll interval (s)")
    args = parser.parse_args(argv)
    binary = dovecot_binary()
    if binary is None:
        print("dovecot is not installed (apt-get install dovecot-imapd)", file=sys.stderr)
        return 1
    idle_server = Dovecot(binary).start()
    poll_server = Dovecot(binary, idle=False).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            idle = asyncio.run(
                latencies(idle_server, idle_server.add_user(), work, args.rounds, args.poll)
            )
            poll = asyncio.run(
                latencies(
                    poll_server,
                    poll_server.add_user(),
                    work,
                    args.rounds,
                    args.poll,
                    poll_interval=args.poll,
                )
            )
    finally:
        idle_server.stop()
        poll_server.stop()
    rules = MatchRules.build(
        sender=DEFAULT_SENDER,
        subject=DEFAULT_SUBJECT,
        droplet_id="4242",
        droplet_name="gpu-1",
        lead=7200,
        max_age=86400,
    )
    raw, now = mail(), utcnow()
    parse = []
    for _ in range(2000):
        started = time.perf_counter()
        reclaim_verdict(raw, rules, "key", now)
        parse.append(time.perf_counter() - started)

    base = statistics.median(poll)
    rows = []
    for label, values in (
        ("IDLE", idle),
        (f"poll every {args.poll:g}s (baseline)", poll),
        ("recognise one mail (pure)", parse),
    ):
        median = statistics.median(values)
        rows.append(
            [
                label,
                f"{median * 1e3:.2f}",
                f"{percentile(values, 99) * 1e3:.2f}",
                f"{max(values) * 1e3:.2f}",
                f"{base / median:.1f}x",
            ]
        )
    print(f"mail filed -> drain emitted, {args.rounds} rounds each, real Dovecot on loopback\n")
    print(table(["mode", "median ms", "p99 ms", "max ms", "vs poll"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
