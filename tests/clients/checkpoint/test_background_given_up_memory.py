"""Saves given up as stalled (a hung mount) keep their snapshot while their write stays stuck:
the saver holds at most two copies of the state then, not one more per retry."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import forewarn.clients.checkpoint.background as background_module
import pytest
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.checkpoint.background import BackgroundSaveError, BackgroundSaver, load_state
from hung_mount import HungMount, stuck_saves, two_saves_stuck
from support import LazyModule, eventually, requires

pytestmark = requires("torch")
torch = LazyModule("torch")

# The stall bound (EXIT_STALL_SECONDS, 120 s in use), scaled down.
STALL_BOUND = 0.3


def test_saves_given_up_on_a_hung_mount_hold_two_copies_of_the_state_at_most(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(background_module, "EXIT_STALL_SECONDS", STALL_BOUND)
    backend = HungMount(CheckpointStore(str(tmp_path / "store")).backend)
    store = CheckpointStore(backend=backend)
    saver = BackgroundSaver(store)
    state = {"w": torch.zeros(64, 64)}
    try:
        saver.save(1, state)  # stuck in its first write
        with pytest.raises(BackgroundSaveError) as first:
            saver.save(2, state)  # gives step 1 up, raised as its failure
        assert first.value.step == 1
        saver.save(2, state)  # a second copy: step 1's write is still stuck
        with pytest.raises(BackgroundSaveError) as second:
            saver.save(3, state)
        assert second.value.step == 2
        assert len(stuck_saves()) == 2
        # A third copy is not taken while both given-up saves still hold theirs: on a mount
        # that stayed hung, each retry of the guard's took one more, until the OOM killer.
        with pytest.raises(BackgroundSaveError) as refused:
            saver.save(3, state)
        assert refused.value.step == 3
        assert "steps 1 and 2" in str(refused.value), refused.value
        assert saver.in_flight is None and len(stuck_saves()) == 2
    finally:
        backend.recover.set()
    # The mount recovers: the given-up saves end (never committing), their copies go, and
    # the next save is taken and committed.
    eventually(lambda: not stuck_saves(), timeout=30)
    assert store.latest() is None
    saver.save(4, state)
    generation = saver.wait()
    assert generation is not None and generation.step == 4
    saver.close()
    store.close()


def test_a_guard_retrying_on_a_hung_mount_keeps_two_copies_at_most_and_saves_once_it_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The guard retries a failed background save (backing off); each retry on a mount that
    stayed hung was given up in turn, and every one kept its copy of the state."""
    from forewarn.clients import CheckpointGuard, guard_background

    monkeypatch.setattr(background_module, "EXIT_STALL_SECONDS", STALL_BOUND)
    monkeypatch.setattr(guard_background, "RETRY_FIRST_SECONDS", 0.05)
    backend = HungMount(CheckpointStore(str(tmp_path / "store")).backend)
    store = CheckpointStore(backend=backend)
    guard = CheckpointGuard(
        store=store,
        background=True,
        handle_signals=False,
        notices=False,
        flag_file=None,
        every_steps=1,
    )
    state = {"w": torch.zeros(64, 64)}
    failures: list[BackgroundSaveError] = []
    most = 0
    step = 0
    try:
        while len(failures) < 5:
            step += 1
            assert step < 2000, f"only {len(failures)} failures by step {step}"
            try:
                if guard.due(step):
                    guard.save_state(step, state)
            except BackgroundSaveError as error:
                failures.append(error)
            most = max(most, len(stuck_saves()))
            state["w"].add_(1.0)  # the training step
            threading.Event().wait(0.01)
    finally:
        backend.recover.set()
    assert most <= 2, f"{most} stuck saves held a copy of the state each"
    assert any("still stuck in their writes" in str(error) for error in failures), failures
    eventually(lambda: not stuck_saves(), timeout=30)
    # Recovered: the next retry the guard asks for commits.
    while guard.durable_step is None:
        step += 1
        assert step < 5000, "no save committed after the mount recovered"
        with contextlib.suppress(BackgroundSaveError):
            if guard.due(step):
                guard.save_state(step, state)
                guard.saver.wait()
        threading.Event().wait(0.01)
    assert store.latest_hint() == guard.durable_step
    guard.close()
    store.close()


def _peak_rss_reset() -> None:
    """Start the process's peak resident size (VmHWM) again from its size now."""
    Path("/proc/self/clear_refs").write_text("5")


def _rss(field: str) -> int:
    """The process's `field` of /proc/self/status (VmRSS, VmHWM), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/self/status")


@pytest.mark.parametrize("layout", ["one tensor", "four views"])
def test_an_exit_save_while_two_given_up_saves_hold_their_copies_takes_no_third(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """An exit's save is never refused (it is the job's last), but it copied the state as a
    background save does: with two given-up saves stuck on a hung mount holding theirs, the
    exit held three copies of a 200 MB state, 200 MB more at the worst moment of a notice.
    The training thread is in `final()` while it writes, so a tensor that is its whole
    storage is written as it is; any other (on a GPU, here a view of a quarter of one) is
    copied only as it is written, and let go once written."""
    from forewarn.clients.checkpoint.manifest import generation_name

    monkeypatch.setattr(background_module, "EXIT_STALL_SECONDS", STALL_BOUND)
    backend = HungMount(CheckpointStore(str(tmp_path / "store")).backend)
    backend.only = generation_name(0)[:-1]  # steps 1 to 9 hang; the exit's step 10 writes
    store = CheckpointStore(backend=backend)
    saver = BackgroundSaver(store)
    size = 200 << 20
    base = torch.ones(4, size // 16)  # touched: every page resident
    tensors = (
        {"w": base.view(-1)} if layout == "one tensor" else dict(zip("abcd", base, strict=True))
    )
    state: dict[str, object] = {**tensors, "step": 2}
    try:
        saver.save(1, state)
        with pytest.raises(BackgroundSaveError):
            saver.save(2, state)  # gives step 1 up
        saver.save(2, state)
        with pytest.raises(BackgroundSaveError):
            saver.save(3, state)  # gives step 2 up
        assert saver.refusing() and len(stuck_saves()) == 2
        base.add_(1.0)  # the step after: what the exit saves differs from the stuck copies
        _peak_rss_reset()
        before = _rss("VmRSS")
        final = saver.final(10, state, 30.0)
        grew = _rss("VmHWM") - before
        assert final.generation is not None and final.generation.step == 10
        # A copy is `size`; the write's own buffers (the file's, the hashing's) are far less.
        assert grew < size // 2, f"the exit's save grew the resident size by {grew >> 20} MiB"
    finally:
        backend.recover.set()
    eventually(lambda: not stuck_saves(), timeout=30)
    restored = load_state(store.get(10, verify="checksums"))
    assert restored.keys() == state.keys() and restored["step"] == 2
    for key, tensor in tensors.items():
        assert torch.equal(restored[key], tensor), key
        assert restored[key].untyped_storage().nbytes() == tensor.numel() * 4, "a view's own"
    saver.close()
    store.close()


def test_an_exit_save_copying_at_write_writes_a_whole_file_each_time_it_is_written() -> None:
    """The store writes a file again after making room on a full disk: the second write of a
    save that copies at write found the buffers the first let go (storages of 0 bytes)."""
    import io

    base = torch.arange(4 * 1000, dtype=torch.float32).reshape(4, 1000)
    state = {"rows": list(base), "whole": torch.ones(10), "tied": base[1], "step": 7}
    at_write = background_module._AtWrite()
    snapshot = {
        "rows": [background_module._place_at_write(torch, row, at_write) for row in base],
        "whole": background_module._place_at_write(torch, state["whole"], at_write),
        "step": 7,
    }
    snapshot["tied"] = snapshot["rows"][1]  # one tensor under two keys, as `_place` shares it
    written = []
    for _attempt in range(2):
        stream = io.BytesIO()
        background_module._save_copying_at_write(torch, snapshot, stream, at_write)
        written.append(stream.getvalue())
    for data in written:
        loaded = torch.load(io.BytesIO(data))
        assert [row.tolist() for row in loaded["rows"]] == base.tolist()
        tied = loaded["tied"].untyped_storage().data_ptr()
        assert tied == loaded["rows"][1].untyped_storage().data_ptr(), "saved once, shared"
        assert torch.equal(loaded["whole"], state["whole"]) and loaded["step"] == 7
    assert written[0] == written[1]


def test_a_refusal_backed_off_for_long_still_saves_at_the_first_step_a_stuck_save_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The refusal's back-off shares the ladder of failures in a row (the two given-up saves
    are two of them), so after a long outage it is RETRY_MAX_SECONDS (5 min). Kept so: that
    back-off spaces out only the refusal's tries (each an ERROR line); what a refusal waits
    for is a stuck save's end, which due() looks at every step, so the save after the mount
    recovers comes at the first step after it, never at the back-off's end."""
    import logging

    from forewarn.clients import CheckpointGuard, guard_background

    monkeypatch.setattr(background_module, "EXIT_STALL_SECONDS", STALL_BOUND)
    # The third failure in a row (the refusal) backs off 2 x 60 s: longer than this test.
    monkeypatch.setattr(guard_background, "RETRY_FIRST_SECONDS", 60.0)
    backend = HungMount(CheckpointStore(str(tmp_path / "store")).backend)
    store = CheckpointStore(backend=backend)
    guard = CheckpointGuard(
        store=store,
        background=True,
        handle_signals=False,
        notices=False,
        flag_file=None,
        every_steps=10**6,  # only the retry asks for a save after these
    )
    state = {"w": torch.zeros(64, 64)}
    caplog.set_level(logging.ERROR, logger="forewarn.clients")
    try:
        two_saves_stuck(guard, state)
        with pytest.raises(BackgroundSaveError, match="still stuck in their writes"):
            guard.save_state(3, state)
        assert "tried again in 120 s at the earliest" in caplog.text, caplog.text
        assert not guard.due(4), "the refusal is held back while the mount stays hung"
    finally:
        backend.recover.set()
    eventually(lambda: not stuck_saves(), timeout=30, what="the stuck saves to end")
    # The first step after it saves: no step in between, no wait for the back-off.
    assert guard.due(5), "the first step after the stuck saves ended saves nothing"
    guard.save_state(5, state)
    generation = guard.saver.wait()
    assert generation is not None and generation.step == 5 == guard.durable_step
    guard.close()
    store.close()
