"""Does a webhook receiver slow the event socket? notify → subscriber latency with no webhook
(the baseline, same run), with a receiver that answers at once, and with one that hangs for
60 s on every request (delivery timeout 30 s). Goal: the hung receiver adds nothing a
subscriber can see (p99 within noise of the baseline).

Then how fast a notice reaches the receiver: the notice's `sent_at` (the moment the agent
published it on the event socket) to the moment the receiver has read its body, on loopback,
for a receiver that answers at once (goal: within 1 s) and for one that answers 500 to the
first three attempts of every notice (the retries' backoff: 0.5 s doubling, with jitter).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from common import percentile, table
from forewarn.protocol import parse_time
from notify_latency import through_agent


@contextmanager
def receiver(hang: float, fail_first: int = 0, log: list[float] | None = None) -> Iterator[str]:
    """A loopback receiver. `hang`: seconds to hold each request; `fail_first`: answer 500 to
    that many attempts of each notice first; `log`: gets, for each delivered drain, the
    milliseconds from its `sent_at` to the moment its body was read here."""
    release = threading.Event()
    attempts: dict[str, int] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            payload = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            read_at = time.time()
            if hang:
                release.wait(hang)
            notice = json.loads(payload)
            key = f"{notice['id']} {notice['action']}"
            attempts[key] = attempts.get(key, 0) + 1
            if notice["action"] == "drain" and attempts[key] <= fail_first:
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if log is not None and notice["action"] == "drain":
                log.append((read_at - parse_time(notice["sent_at"]).timestamp()) * 1000)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--notices", type=int, default=300)
    parser.add_argument("--retried", type=int, default=5, help="notices of the 500s case")
    args = parser.parse_args(argv)
    rows = []
    cases: list[tuple[str, float | None]] = [
        ("no webhook (baseline)", None),
        ("webhook, receiver answers at once", 0.0),
        ("webhook, receiver hangs 60 s", 60.0),
    ]
    baseline_p50 = None
    for label, hang in cases:
        if hang is None:
            values = through_agent(1, args.notices)
        else:
            with receiver(hang) as url:
                values = through_agent(
                    1, args.notices, FOREWARN_WEBHOOK_URL=url, FOREWARN_WEBHOOK_TIMEOUT="30s"
                )
        p50 = percentile(values, 50)
        baseline_p50 = baseline_p50 if baseline_p50 is not None else p50
        rows.append(
            [
                label,
                f"{len(values)}/{args.notices}",
                f"{p50:.3f}",
                f"{percentile(values, 99):.3f}",
                f"{max(values):.3f}",
                f"{p50 / baseline_p50:.2f}x",
            ]
        )
        time.sleep(0.2)
    print(table(["case", "received", "p50 ms", "p99 ms", "max ms", "p50 vs baseline"], rows))
    print("\ngoal: a hung receiver delays no subscriber (p99 within noise of the baseline)")

    delivery_rows = []
    for label, notices, pace, fail_first in [
        ("answers at once, a notice every 50 ms", args.notices // 3, 0.05, 0),
        (f"answers at once, {args.notices} notices back to back", args.notices, 0.0, 0),
        ("answers 500, 500, 500, then 200", args.retried, 0.0, 3),
    ]:
        delays: list[float] = []
        with receiver(0.0, fail_first, delays) as url:
            through_agent(
                1,
                notices,
                pace=pace,
                until=lambda: len(delays) >= notices,  # noqa: B023 (called within the loop)
                FOREWARN_WEBHOOK_URL=url,
            )
        delivery_rows.append(
            [
                label,
                f"{len(delays)}/{notices}",
                f"{percentile(delays, 50):.1f}",
                f"{percentile(delays, 99):.1f}",
                f"{max(delays, default=float('nan')):.1f}",
            ]
        )
    print()
    print(
        table(
            ["receiver (loopback)", "delivered", "p50 ms", "p99 ms", "max ms"],
            delivery_rows,
        )
    )
    print(
        "\ngoal: delivered within 1 s of the event. Deliveries go one at a time, in order: "
        "back to back, each\nnotice also waits for those before it; with 500s, for their "
        "retries too (backoff 0.5 s doubling, jitter)."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
