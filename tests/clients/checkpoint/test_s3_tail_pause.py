"""A terminate too close for a final save waits, past the deadline, for the last parts of the
upload in flight while they move, and cancels them once they stop. "Moving" was a block taken
within the cancel's grace (1 s) on the wall clock: a link that paused a little longer (a lossy
link's retransmission backoff) or a process the machine did not schedule for a second (heavy
CPU load) read as stopped, and parts whose bytes flowed were cut, the step nearly durable lost.
Against the moto server behind a slow link on loopback, whose connections the test holds."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, S3Options, background
from forewarn.clients.checkpoint.quiet import QuietTime
from forewarn.clients.checkpoint.s3 import MIN_PART
from hypothesis import given
from hypothesis import strategies as st
from slow_link import SlowLink, small_send_buffers
from support import eventually

# Each part of the upload in flight takes 3 s at this rate per connection.
RATE = MIN_PART / 3
WORKER = Path(__file__).with_name("tail_pause_worker.py")


@pytest.fixture
def link(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowLink]:
    small_send_buffers(monkeypatch)
    with SlowLink(moto_endpoint) as proxy:
        yield proxy
        proxy.release()  # parts left behind on held connections end


def _upload_at_its_last_parts(
    link: SlowLink, bucket: str
) -> tuple[CheckpointStore, BackgroundSaver]:
    """Step 1 durable, step 2 (two parts) past its last write over the slow link, and the
    figures of a terminate that finds it due to end at once and no time for a final save."""
    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(endpoint_url=link.url, part_size=MIN_PART)
    )
    saver = BackgroundSaver(store)
    saver.save(1, {"w": b"one"})
    saver.wait()
    link.rate = RATE
    saver.save(2, {"w": os.urandom(2 * MIN_PART)})
    eventually(lambda: saver._writes_done, what="the save's last write (its parts uploading)")
    # Both parts on their way, each on its own connection, which `hold()` then holds.
    eventually(lambda: link.busy(256 << 10) >= 2, what="both parts' bytes moving")
    saver._durable_estimate = 1.5
    saver._started = time.monotonic() - 10.0
    return store, saver


def test_last_parts_a_lossy_link_pauses_past_the_cancel_grace_are_waited_for(
    link: SlowLink, bucket: str
) -> None:
    store, saver = _upload_at_its_last_parts(link, bucket)
    link.hold()  # its parts' connections send nothing for 2 s, then go on
    threading.Timer(2.0, link.release).start()
    final = saver.final(3, {"w": b"three"}, seconds_left=0.0)
    assert final.choice == "waited", final.reason
    assert "last parts" in final.reason, final.reason
    link.rate = None
    assert [generation.step for generation in store.generations()] == [1, 2, 3]
    store.close()


def test_last_parts_that_stop_are_cancelled_and_the_final_save_commits(
    link: SlowLink, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    store, saver = _upload_at_its_last_parts(link, bucket)
    link.hold()  # for good: a stalled path (new connections, the final save's, go through)
    started = time.time()  # the wall clock of the log records' `created`
    with caplog.at_level(logging.WARNING, logger="forewarn.clients"):
        final = saver.final(3, {"w": b"three"}, seconds_left=0.0)
    assert final.choice == "cancelled", final.reason
    assert "still uploading when the deadline came" in final.reason, final.reason
    # Until it chose, said before the final save's own write: counted to final()'s return,
    # a loaded moto's answers to the final save's requests took the wait to 12.6 s.
    (chose,) = [r for r in caplog.records if "writing it now" in r.getMessage()]
    waited = chose.created - started
    # The bound on their quiet, and the cancel's grace for the parts stuck in a send.
    bound = background.TAIL_QUIET_SECONDS + background.CANCEL_GRACE_SECONDS
    assert background.TAIL_QUIET_SECONDS <= waited < bound + 2.0, waited
    assert final.generation.step == 3
    link.rate = None
    assert [generation.step for generation in store.generations()] == [1, 3]
    store.close()


def test_last_parts_of_a_process_a_loaded_machine_stopped_are_waited_for(
    link: SlowLink, bucket: str, s3_env: dict[str, str], tmp_path: Path
) -> None:
    """The machine runs the job's process late (SIGSTOP for 4 s here, the extreme of a loaded
    machine's scheduling): while it does not run, neither its upload threads nor its wait
    look at the link, and the wait, on its first look after, read the whole gap as parts
    sending nothing and cancelled them; nothing had stopped but the process."""
    looks = tmp_path / "looks"  # a byte for each look the wait takes at the link's quiet
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), f"s3://{bucket}/run", link.url, str(looks)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        assert worker.stdin is not None and worker.stdout is not None
        assert worker.stdout.readline() == "slow the link\n"
        link.rate = RATE
        worker.stdin.write("go\n")
        worker.stdin.flush()
        assert worker.stdout.readline() == "final\n"
        eventually(lambda: link.busy(256 << 10) >= 2, what="both parts' bytes moving")
        link.hold()  # nothing drains the process's sockets while it is stopped
        worker.send_signal(signal.SIGSTOP)
        eventually(lambda: _state(worker.pid) == "T", what="the worker stopped")
        stopped_at = looks.stat().st_size if looks.exists() else 0
        time.sleep(4.0)  # the scenario's length, not a synchronisation
        worker.send_signal(signal.SIGCONT)
        # It runs and looks twice while its parts' connections still send nothing: counted
        # in its looks, not in a second of the test's, which a loaded machine stretched past
        # the parts' real quiet bound (a second look counts at most two ticks more).
        eventually(
            lambda: looks.exists() and looks.stat().st_size >= stopped_at + 2,
            what="two looks of the resumed process at the held link",
        )
        link.release()
        line = worker.stdout.readline()
        assert worker.wait(timeout=60) == 0
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGCONT)
            worker.kill()
            worker.wait()
    outcome = json.loads(line)
    assert outcome["choice"] == "waited", outcome["reason"]
    assert "last parts" in outcome["reason"], outcome["reason"]
    assert outcome["steps"] == [1, 2, 3]


def _state(pid: int) -> str:
    """The process's state letter in /proc (`T` once a SIGSTOP has stopped it)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


@given(
    st.floats(min_value=0.01, max_value=1.0),
    st.lists(
        st.tuples(st.floats(min_value=0.0, max_value=30.0), st.booleans()),
        min_size=1,
        max_size=40,
    ),
)
def test_quiet_time_counts_no_more_than_two_ticks_a_look_and_restarts_at_a_move(
    tick: float, looks: list[tuple[float, bool]]
) -> None:
    now = 1000.0
    moved = now - 5.0
    quiet = QuietTime(moved, tick, now)
    counted = min(5.0, tick)
    for gap, moves in looks:
        now += gap
        if moves:
            moved = now - gap / 2
        seen = quiet.look(moved, now)
        assert seen >= 0.0
        if moves:
            counted = min(gap / 2, tick)
        else:
            counted += min(gap, 2 * tick)
        assert abs(seen - counted) < 1e-6
        # Never more than the wall clock says, nor than two ticks per look since the move.
        assert seen <= now - moved + 1e-6
