"""What judging one DigitalOcean mail costs, by its size and kind: the parser's own CPU, which
delays every notice behind the mail (mails are judged one at a time).

Six kinds of mail, each at 10 KB, 100 KB and 1 MB (the watcher fetches 256 KiB of a mail;
the 1 MB row shows the growth is linear): plain prose, a hostile mail of one time form
repeated ("14:00 UTC (-0:30) on December 3, "), one of relative countdowns ("in 0:40 "),
one whose Subject is that long ("Spot Droplet reclaim notice " repeated), and two lines of
new times ("New reclaim time: 17:00 UTC (was 14:30 UTC) for droplet gpu-spot-1, "), for this
droplet and for another (gpu-spot-7). The baseline is the
plain reading, measured in the same run: every time's form read again at each match, RELATIVE
tried whole at every position, the dated times of the whole mail found and read again after
those from the droplet's line on, and every header value parsed whole, as before the shortcuts
and the header limit (tests/providers/digitalocean/test_digitalocean_mail_speed.py checks both
read the same mails the same; the subject row differs by design: its Subject is read to
message.HEADER_LIMIT characters).

    python bench/digitalocean_parse.py [--sizes 10000,100000,1000000] [--rounds 1]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from email.message import EmailMessage
from email.utils import format_datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import table  # noqa: E402
from forewarn.providers.digitalocean import deadline, message, written  # noqa: E402
from forewarn.providers.digitalocean.mail import MatchRules, Verdict, reclaim_verdict  # noqa: E402
from forewarn.providers.digitalocean.settings import DEFAULT_SENDER, DEFAULT_SUBJECT  # noqa: E402

SENT = datetime(2026, 12, 1, 12, 30, tzinfo=timezone.utc)
RULES = MatchRules.build(
    sender=DEFAULT_SENDER,
    subject=DEFAULT_SUBJECT,
    droplet_id="424242424",
    droplet_name="gpu-spot-1",
    lead=7200.0,
    max_age=86400.0,
)
KINDS = {
    "prose": "The reclaim of your droplet is scheduled soon and we apologise for it. ",
    "margins": "14:00 UTC (-0:30) on December 3, ",
    "countdowns": "in 0:40 ",
    "subject": "Spot Droplet reclaim notice ",
    # New times on one line, none a sentence's end: each a statement to judge, this
    # droplet's (the first is taken) and another's (each is judged, none taken).
    "new-times": "New reclaim time: 17:00 UTC (was 14:30 UTC) for droplet gpu-spot-1, ",
    "others-new-times": "New reclaim time: 17:00 UTC (was 14:30 UTC) for droplet gpu-spot-7, ",
}
# The kinds whose text is the Subject, not the body.
IN_SUBJECT = {"subject"}


def mail(unit: str, size: int, *, in_subject: bool = False) -> bytes:
    built = EmailMessage()
    built["From"] = "DigitalOcean <no-reply@digitalocean.com>"
    subject = "Spot Droplet reclaim notice"
    body = "Droplet gpu-spot-1 will be reclaimed.\n"
    if in_subject:
        subject = (unit * max(1, size // len(unit))).strip()
    else:
        body += unit * max(1, size // len(unit))
    built["Subject"] = subject
    built["Date"] = format_datetime(SENT)
    built["Message-ID"] = "<bench-parse@digitalocean.com>"
    built.set_content(body)
    return bytes(built)


def _read_every_time(
    match: re.Match[str],
    sent: datetime | None = None,
    *,
    order: str = "mdy",
    relative_day: str = "",
    shift: timedelta = timedelta(0),
) -> tuple[datetime, datetime] | None:
    form = id(match.re)
    written._GROUP_NAMES.setdefault(form, (match.re, tuple(match.re.groupindex.items())))
    return written._read_time.__wrapped__(  # type: ignore[attr-defined]
        form, match.groups(), sent, None, order, relative_day, shift
    )


@contextmanager
def plain() -> Iterator[None]:
    """The plain reading: as the parser read before its shortcuts."""
    saved = deadline.written_time, deadline.RELATIVE
    limits = message.HEADER_LIMIT, message.HEADERS_BUDGET
    context = deadline._DATED_CONTEXT
    deadline.written_time = _read_every_time
    deadline._DATED_CONTEXT = sys.maxsize  # each text's dated times found and read anew
    deadline.RELATIVE = re.compile(written._RELATIVE, re.IGNORECASE)
    message.HEADER_LIMIT = message.HEADERS_BUDGET = sys.maxsize
    try:
        yield
    finally:
        deadline.written_time, deadline.RELATIVE = saved
        message.HEADER_LIMIT, message.HEADERS_BUDGET = limits
        deadline._DATED_CONTEXT = context


def cpu(raw: bytes, rounds: int) -> tuple[float, Verdict]:
    """The least thread CPU of `rounds` verdicts on `raw`, each with cold caches."""
    best, found = float("inf"), None
    for _ in range(rounds):
        deadline._matches.cache_clear()
        deadline._dated_in.cache_clear()
        deadline._dated_by_form.cache_clear()
        deadline._recent.clear()
        written._read_time.cache_clear()
        started = time.thread_time()
        found = reclaim_verdict(raw, RULES, "key", SENT)
        best = min(best, time.thread_time() - started)
    assert found is not None
    return best, found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--kinds", default=",".join(KINDS))
    args = parser.parse_args(argv)
    rows = []
    differ = 0
    for kind in args.kinds.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            raw = mail(KINDS[kind], size, in_subject=kind in IN_SUBJECT)
            with plain():
                before, old = cpu(raw, args.rounds)
            after, new = cpu(raw, args.rounds)
            same = old == new
            differ += not same and kind not in IN_SUBJECT
            rows.append(
                [
                    kind,
                    f"{len(raw) / 1000:.0f} KB",
                    f"{before:.3f}",
                    f"{after:.3f}",
                    f"{before / after:.2f}x" if after else "-",
                    f"{after / len(raw) * 1e9:.0f}",
                    "yes" if same else "cut" if kind in IN_SUBJECT else "NO",
                ]
            )
            print(table(_HEADERS, rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(_HEADERS, rows))
    return 1 if differ else 0


_HEADERS = ["mail", "size", "plain CPU-s", "now CPU-s", "speed-up", "ns/byte now", "same"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
