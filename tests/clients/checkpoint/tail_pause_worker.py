"""A background save of two parts over a slow link, then a terminate's `final()` that waits
for its last parts past the deadline (run by test_s3_tail_pause.py, which pauses this process
with SIGSTOP while it waits, as a loaded machine does).

    tail_pause_worker.py URL ENDPOINT LOOKS

Prints `final` just before calling final(), then one JSON line: the choice, its reason and
the store's steps after it. Each look the wait takes at the link's quiet appends a byte to
the file LOOKS, so the test can wait for the looks a resumed process takes.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Any

from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, S3Options, background
from forewarn.clients.checkpoint.quiet import QuietTime
from forewarn.clients.checkpoint.s3 import MIN_PART


def small_send_buffers() -> None:
    """slow_link.small_send_buffers, for this process (see slow_link.py)."""
    from urllib3.util import connection

    create = connection.create_connection

    def with_small_buffer(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        options = list(kwargs.pop("socket_options", None) or [])
        options.append((socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10))
        return create(address, *args, socket_options=options, **kwargs)

    connection.create_connection = with_small_buffer


def count_looks(path: str) -> None:
    """Each look of the wait at the link's quiet appends a byte to `path`."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    class CountedQuietTime(QuietTime):
        def look(self, last_moved: float, now: float) -> float:
            seen = super().look(last_moved, now)
            os.write(fd, b".")
            return seen

    background.QuietTime = CountedQuietTime  # type: ignore[misc]


def main() -> None:
    url, endpoint, looks = sys.argv[1], sys.argv[2], sys.argv[3]
    small_send_buffers()
    count_looks(looks)
    store = CheckpointStore(url, s3=S3Options(endpoint_url=endpoint, part_size=MIN_PART))
    saver = BackgroundSaver(store)
    saver.save(1, {"w": b"one"})
    saver.wait()
    print("slow the link", flush=True)
    sys.stdin.readline()  # the link is slow now
    saver.save(2, {"w": os.urandom(2 * MIN_PART)})
    while not saver._writes_done:
        time.sleep(0.01)
    # Saves were timed at 1.5 s and this one started 10 s ago: due to end at once, and the
    # final save alone does not fit in the time left (none): its last parts are waited for.
    saver._durable_estimate = 1.5
    saver._started = time.monotonic() - 10.0
    print("final", flush=True)
    final = saver.final(3, {"w": b"three"}, seconds_left=0.0)
    steps = [generation.step for generation in store.generations()]
    print(json.dumps({"choice": final.choice, "reason": final.reason, "steps": steps}), flush=True)
    store.close()


if __name__ == "__main__":
    main()
