"""A background save of two parts over a slow link, then a terminate's `final()` that waits
for its last parts past the deadline (run by test_s3_tail_pause.py, which pauses this process
with SIGSTOP while it waits, as a loaded machine does).

    tail_pause_worker.py URL ENDPOINT RATE

Prints `final` just before calling final(), then one JSON line: the choice, its reason and
the store's steps after it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Any

from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, S3Options
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


def main() -> None:
    url, endpoint = sys.argv[1], sys.argv[2]
    small_send_buffers()
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
