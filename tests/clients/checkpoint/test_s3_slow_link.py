"""Background saves to S3 over a slow link (a thin uplink: each part takes longer than the
bound on a save that stopped moving, while its bytes keep flowing), against the moto server
behind a proxy that carries the uploads slowly."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, S3Options, background
from forewarn.clients.checkpoint.s3 import MIN_PART
from slow_link import SlowLink, small_send_buffers
from support import eventually

# The bound on a save that moves nothing (EXIT_STALL_SECONDS, 120 s in use), scaled down.
STALL = 1.5
# Each connection's upload rate: a 5 MiB part takes twice STALL to go through, and the link
# moves a read's worth of a part's body (128 KiB) every ~70 ms, far inside STALL.
RATE = MIN_PART / (2 * STALL)


# A final save's grace (FINAL_SAVE_GRACE_SECONDS) where the tests are not about it.
REAL_GRACE = 60.0


def grace_at_stall_while_bodies_move(
    link: SlowLink, store: CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FINAL_SAVE_GRACE_SECONDS at STALL for what an exit save's test is about: the timeout
    made of it (STALL past a deadline come), and while the link carries a body at its slow
    rate (each pause in its bytes is held to it); the real one otherwise. At STALL
    throughout, a loaded moto's answers to the save's claim, its upload's creation and the
    commit's requests, which move no byte, came later than STALL and the save was given up
    ("moves nothing") outside the slow link the tests are about."""

    def grace(seconds: float) -> None:
        monkeypatch.setattr(background, "FINAL_SAVE_GRACE_SECONDS", seconds)

    grace(STALL)
    flush = store.flush

    def flush_with_the_real_grace(*args: Any, **kwargs: Any) -> Any:
        grace(REAL_GRACE)  # its timeout is made, of STALL
        return flush(*args, **kwargs)

    monkeypatch.setattr(store, "flush", flush_with_the_real_grace)
    link.on_bodies = lambda moving: grace(STALL if moving else REAL_GRACE)


@pytest.fixture
def link(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowLink]:
    small_send_buffers(monkeypatch)
    with SlowLink(moto_endpoint) as proxy:
        yield proxy


def test_the_exit_waits_for_a_part_slower_than_the_stall_bound_while_its_bytes_move(
    link: SlowLink, bucket: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Progress was marked only when the oldest part in flight was collected, so at the exit
    a part slower than EXIT_STALL_SECONDS (8 MiB parts at under 70 KB/s each) was given up
    as hung while it was uploading, and the run's last checkpoint was lost. Bytes taken by
    the connection count as progress now."""
    url = f"s3://{bucket}/run"
    store = CheckpointStore(url, s3=S3Options(endpoint_url=link.url, part_size=MIN_PART))
    saver = BackgroundSaver(store)
    assert store.latest() is None  # the client is made before the link slows and the clock runs
    # The stall bound at STALL while the link carries a part's bytes, what the test is about;
    # the real one otherwise. At STALL throughout, a loaded moto's answers (the save's claim,
    # the upload's creation, a part's reply after its last byte) came later than STALL and
    # the exit gave the save up ("the parts it still had to upload sent nothing for 2 s").
    moving = threading.Event()

    def stall_bound_while_bodies_move(bodies: bool) -> None:
        monkeypatch.setattr(background, "EXIT_STALL_SECONDS", STALL if bodies else 120.0)
        if bodies:
            moving.set()

    link.on_bodies = stall_bound_while_bodies_move
    link.rate = RATE
    saver.save(7, {"w": os.urandom(MIN_PART + (1 << 20))})  # two parts: a multipart upload
    # The exit's wait begins under the bound of a moving part: it looks again within STALL.
    eventually(moving.is_set, what="a part's bytes moving")
    with caplog.at_level(logging.ERROR, logger="forewarn.clients"):
        saver.finish_in_flight("the process is exiting", "call close() before exiting")
    assert "wrote nothing" not in caplog.text
    link.rate = None
    latest = store.latest()
    assert latest is not None and latest.step == 7
    store.close()


def test_a_final_save_still_moving_past_its_deadline_and_grace_is_waited_for(
    link: SlowLink, bucket: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A terminate's final save was given up at its deadline plus FINAL_SAVE_GRACE_SECONDS
    whatever it was doing: over a slow link, with its bytes flowing, it raised CommitTimeout
    saying the storage had stopped answering (the guard's ERROR repeated it), and the process
    exited without the state of the exit, on a machine that often stays past its deadline.
    Past that point it is now waited for while its bytes move, saying it is not durable yet."""
    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(endpoint_url=link.url, part_size=MIN_PART)
    )
    saver = BackgroundSaver(store)
    assert store.latest() is None  # the client is made before the link slows and the clock runs
    grace_at_stall_while_bodies_move(link, store, monkeypatch)
    link.rate = RATE  # the 5 MiB part takes twice the grace
    with caplog.at_level(logging.WARNING, logger="forewarn.checkpoint"):
        final = saver.final(9, {"w": os.urandom(MIN_PART + (1 << 20))}, seconds_left=0.0)
    assert final.generation.step == 9
    assert "still moving" in caplog.text
    link.rate = None
    latest = store.latest()
    assert latest is not None and latest.step == 9
    store.close()


# It imports torch, the worker's first time maybe (over 20 s beside busy loops), and waits
# for its save while that moves on a loaded machine: over 120 s once, load 22.
@pytest.mark.timeout(300)
def test_a_guards_synchronous_exit_save_still_moving_past_its_deadline_and_grace_is_waited_for(
    link: SlowLink, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`CheckpointGuard(store=...).save_state` without `background` (the default) writes the
    state itself, as the final background save does, but its exit's save was still given up
    at the terminate's deadline plus FINAL_SAVE_GRACE_SECONDS whatever it was doing: over a
    slow link, its bytes flowing, CommitTimeout, the guard's ERROR and exit code 1, and the
    state of the exit lost on a machine that often stays past its deadline."""
    from datetime import datetime, timezone

    import torch
    from forewarn.clients import CheckpointGuard
    from forewarn.clients.event import Event

    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(endpoint_url=link.url, part_size=MIN_PART)
    )
    guard = CheckpointGuard(notices=False, handle_signals=False, flag_file=None, store=store)
    now = datetime.now(timezone.utc)
    guard._on_event(
        Event(
            id="aws/spot-itn/slow",
            seq=1,
            action="terminate",
            reason="spot-interruption",
            provider="aws",
            deadline=now,  # passed: the save has the grace, then only while it moves
            noticed_at=now,
            sent_at=now,
        )
    )
    assert guard.due(9) and guard.should_exit
    assert store.latest() is None  # the client is made before the link slows and the clock runs
    grace_at_stall_while_bodies_move(link, store, monkeypatch)
    link.rate = RATE  # the 5 MiB part takes twice the grace
    state = {"w": torch.frombuffer(bytearray(os.urandom(MIN_PART + (1 << 20))), dtype=torch.uint8)}
    result = guard.save_state(9, state)
    assert result.exit and result.generation is not None and result.generation.step == 9
    assert guard.exit_code == 143
    link.rate = None
    latest = store.latest()
    assert latest is not None and latest.step == 9
    guard.close()
    store.close()


def test_a_guards_exit_save_of_the_users_files_still_moving_past_the_grace_is_waited_for(
    link: SlowLink, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's store loop, `guard.save(step, write)` with `write(gen)` writing the
    user's bytes into the generation (`gen.write_bytes("model.pt", ...)`): its exit's save
    was given up at the terminate's deadline plus FINAL_SAVE_GRACE_SECONDS while the file's
    bytes still flowed over a slow link (CommitTimeout, exit code 1, the exit's state lost)."""
    from forewarn.clients import CheckpointGuard

    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(endpoint_url=link.url, part_size=MIN_PART)
    )
    guard = CheckpointGuard(notices=False, handle_signals=False, flag_file=None, store=store)
    guard._on_event(_passed_terminate("aws/spot-itn/slow-files"))
    assert guard.due(9) and guard.should_exit
    assert store.latest() is None  # the client is made before the link slows and the clock runs
    grace_at_stall_while_bodies_move(link, store, monkeypatch)
    link.rate = RATE  # the 5 MiB part takes twice the grace
    model = os.urandom(MIN_PART + (1 << 20))
    result = guard.save(9, lambda gen: gen.write_bytes("model.pt", model))
    assert result.exit and result.generation is not None and result.generation.step == 9
    assert guard.exit_code == 143
    link.rate = None
    latest = store.latest()
    assert latest is not None and latest.step == 9
    guard.close()
    store.close()


def _passed_terminate(notice_id: str) -> Any:
    """A terminate whose deadline has come: its exit's save has the grace, then only while
    it moves."""
    from datetime import datetime, timezone

    from forewarn.clients.event import Event

    now = datetime.now(timezone.utc)
    return Event(
        id=notice_id,
        seq=1,
        action="terminate",
        reason="spot-interruption",
        provider="aws",
        deadline=now,
        noticed_at=now,
        sent_at=now,
    )


def test_a_final_save_of_a_file_smaller_than_a_part_still_moving_past_the_grace_is_waited_for(
    link: SlowLink, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file smaller than a part goes up in one PutObject, whose bytes were not counted as
    they moved (only a multipart upload's parts were): over a link slow enough, a final save
    of a small model (under the 8 MiB default part) was given up a grace past the deadline
    with its bytes still flowing, as if the storage had stopped answering."""
    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(endpoint_url=link.url, part_size=MIN_PART)
    )
    saver = BackgroundSaver(store)
    assert store.latest() is None  # the client is made before the link slows and the clock runs
    grace_at_stall_while_bodies_move(link, store, monkeypatch)
    link.rate = RATE  # the 4 MiB file takes 1.6 times the grace
    final = saver.final(9, {"w": os.urandom(4 << 20)}, seconds_left=0.0)
    assert final.generation.step == 9
    link.rate = None
    latest = store.latest()
    assert latest is not None and latest.step == 9
    store.close()


def _save_thread_alive(step: int) -> bool:
    return any(
        thread.name == f"forewarn-background-save-{step}" and thread.is_alive()
        for thread in threading.enumerate()
    )


def test_a_save_that_final_cancelled_with_its_parts_uploading_stops_and_never_commits(
    link: SlowLink, bucket: str
) -> None:
    """final() cancels the save in flight so that the final save has the link to itself; one
    past its last write, its parts still uploading, read no cancel: it went on sending them
    beside the final save, then committed after final() had said "cancelled" and returned
    the newer step, and `saver.last_durable` then named the older one. Its parts stop now at
    their next block, its upload is aborted, and it never commits."""
    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(endpoint_url=link.url, part_size=MIN_PART)
    )
    saver = BackgroundSaver(store)
    assert store.latest() is None  # the client is made before the link slows
    link.rate = MIN_PART / 2  # each part of the save in flight takes 2 s
    saver.save(5, {"w": os.urandom(2 * MIN_PART)})
    eventually(lambda: saver._writes_done, what="the save's last write (its parts uploading)")
    final = saver.final(6, {"w": os.urandom(64 << 10)}, seconds_left=None)
    assert final.choice == "cancelled" and final.generation.step == 6, final.reason
    carried = link.carried
    eventually(lambda: not _save_thread_alive(5), timeout=15, what="the cancelled save to end")
    # A part stopped at its next block sends at most what its socket buffers held.
    assert link.carried - carried < MIN_PART // 2
    assert saver.last_durable is not None and saver.last_durable.step == 6
    link.rate = None
    assert [generation.step for generation in store.generations()] == [6]
    latest = store.latest()
    assert latest is not None and latest.step == 6
    # The connections its parts were cut on are not handed to the next save.
    saver.save(7, {"w": os.urandom(MIN_PART + 1)})
    assert saver.wait() is not None and saver.last_durable.step == 7
    saver.check()
    store.close()


def test_an_upload_waited_for_past_its_deadline_is_not_cut_while_its_last_parts_move(
    link: SlowLink, bucket: str
) -> None:
    """A terminate too close for a final save waits for the upload in flight (nearer its end
    than a new save) until the deadline, then cancels it. One that was only sending its
    last parts then, bytes flowing, was cut there: the job lost the step nearly durable and
    resumed from the one before, unless the whole final save, which the time left had been
    judged too short for, still made it. Its last parts are waited for while they move."""
    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(endpoint_url=link.url, part_size=MIN_PART)
    )
    saver = BackgroundSaver(store)
    saver.save(1, {"w": b"one"})
    saver.wait()
    link.rate = MIN_PART / 3  # each part of step 2 takes 3 s
    saver.save(2, {"w": os.urandom(2 * MIN_PART)})
    eventually(lambda: saver._writes_done, what="the save's last write (its parts uploading)")
    # Saves were timed at 1.5 s and this one started 1 s ago: due to end within the 1 s
    # left, where the final save alone does not fit.
    saver._durable_estimate = 1.5
    saver._started = time.monotonic() - 1.0
    final = saver.final(3, {"w": b"three"}, seconds_left=1.0)
    assert final.choice == "waited", final.reason
    # Waited for while they moved; or, on a loaded machine whose upload thread took no block
    # for the cancel's grace, cancelled when its bytes were all but sent and committed in the
    # cancel's grace (check 35b): either way step 2 is not cut, as the generations show.
    assert "last parts" in final.reason or "already committing and committed" in final.reason, (
        final.reason
    )
    assert final.generation.step == 3
    link.rate = None
    assert [generation.step for generation in store.generations()] == [1, 2, 3]
    assert saver.last_durable is not None and saver.last_durable.step == 3
    store.close()


def test_an_exit_save_writing_into_a_short_lead_is_not_said_to_wait_on_a_hung_storage(
    link: SlowLink, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A terminate with a lead shorter than the final save needs, its bytes flowing over the
    link: 5 s before the deadline the guard says the exit's save has not ended, and it said
    `it waits on its storage (a hung mount, a write that does not return)` of a save moving
    at full pace, sending the reader of the log after a storage fault. Found: S3 through a
    slow link, 40 MiB background state, terminate with a 6 s lead: `has not ended 5s before
    the terminate's deadline (it has run 1s): it waits on its storage (a hung mount ...)`,
    while the final save sent its bytes and committed 3.8 s later. It now says the save is
    still writing."""
    from datetime import datetime, timedelta, timezone

    import torch
    from forewarn.clients import CheckpointGuard
    from forewarn.clients.event import Event

    caplog.set_level(logging.WARNING, "forewarn.clients")
    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(endpoint_url=link.url, part_size=MIN_PART)
    )
    guard = CheckpointGuard(
        notices=False, handle_signals=False, flag_file=None, store=store, background=True
    )
    assert store.latest() is None  # the client is made before the link slows
    now = datetime.now(timezone.utc)
    guard._on_event(
        Event(
            id="gcp/preempted/short",
            seq=1,
            action="terminate",
            reason="preemption",
            provider="gcp",
            deadline=now + timedelta(seconds=4),  # inside the 5 s the line is said within
            noticed_at=now,
            sent_at=now,
        )
    )
    link.rate = RATE  # the 6 MiB state takes about 4 s
    state = {"w": torch.frombuffer(bytearray(os.urandom(MIN_PART + (1 << 20))), dtype=torch.uint8)}
    assert guard.due(9)
    result = guard.save_state(9, state)
    link.rate = None
    assert result.exit and result.generation is not None and result.generation.step == 9
    said = [r.getMessage() for r in caplog.records if "has not ended" in r.getMessage()]
    assert len(said) == 1, said
    assert "it is still writing" in said[0], said[0]
    assert "hung mount" not in said[0], said[0]
    guard.close()
    store.close()
