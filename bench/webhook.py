"""Does a webhook receiver slow the event socket? notify → subscriber latency with no webhook
(the baseline, same run), with a receiver that answers at once, and with one that hangs for
60 s on every request (delivery timeout 30 s). Goal: the hung receiver adds nothing a
subscriber can see (p99 within noise of the baseline).
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from common import percentile, table
from notify_latency import through_agent


@contextmanager
def receiver(hang: float) -> Iterator[str]:
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if hang:
                release.wait(hang)
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
