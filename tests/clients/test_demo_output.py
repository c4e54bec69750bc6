"""The demo's JSON lines stay whole when several threads say things at once (the guard says
notices from its own thread while the loop says steps)."""

from __future__ import annotations

import json
import subprocess
import sys

SAY_FROM_THREADS = """
import threading
from forewarn.clients.demo import say

def run(name):
    for n in range(2000):
        say("step", thread=name, n=n, pad="x" * (n % 97))

threads = [threading.Thread(target=run, args=(f"t{i}",)) for i in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
"""


def test_lines_said_from_many_threads_stay_whole() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SAY_FROM_THREADS],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    events = [json.loads(line) for line in out.splitlines()]
    assert len(events) == 8 * 2000
    assert {(e["thread"], e["n"]) for e in events} == {
        (f"t{i}", n) for i in range(8) for n in range(2000)
    }
