"""A terminate's final save that finds the background save in flight failing (a full disk, a
refused upload) says so: it said `waited` with the estimates it chose by ("step 20 needed
about 0.1 s more ... fit"), or, for a failed save of the final step itself, "no background
save was running", and that went to the agent as the ack's `note` and to the log as what
happened (real torch state, a real local store whose writes of one step fail)."""

from __future__ import annotations

import errno
import threading
import time
from pathlib import Path
from typing import Any

from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, load_state
from forewarn.clients.checkpoint.backend import Backend, ObjectWriter
from forewarn.clients.checkpoint.local import LocalBackend
from forewarn.clients.checkpoint.testing import DelegatingBackend
from support import requires

pytestmark = requires("torch")

# The scenario: an upload that goes on for this long before the storage refuses it.
FAIL_AFTER_SECONDS = 0.3


class RefusingStep(DelegatingBackend):
    """Writes of generation `step` fail with ENOSPC `FAIL_AFTER_SECONDS` in, `times` times."""

    def __init__(self, inner: Backend, step: int, times: int = 1) -> None:
        super().__init__(inner)
        self.prefix = f"step-{step:012d}/"
        self.left = times
        self.lock = threading.Lock()

    def writer(self, key: str, on_done: Any = None) -> ObjectWriter:
        writer = self.inner.writer(key, on_done)
        with self.lock:
            refuse = key.startswith(self.prefix) and self.left > 0
            if refuse:
                self.left -= 1
        if refuse:

            def write(data: Any) -> int:
                time.sleep(FAIL_AFTER_SECONDS)  # the scenario: the upload runs, then fails
                raise OSError(errno.ENOSPC, "No space left on device", key)

            writer.write = write  # type: ignore[method-assign]
        return writer


def _state(step: int) -> dict[str, Any]:
    import torch

    torch.manual_seed(step)
    return {"model": torch.nn.Linear(64, 64).state_dict(), "step": step}


def test_a_final_save_that_waited_for_a_failing_upload_says_it_failed(tmp_path: Path) -> None:
    store = CheckpointStore(backend=RefusingStep(LocalBackend(str(tmp_path)), 20))
    saver = BackgroundSaver(store)
    saver.save(10, _state(10))
    assert saver.wait() is not None  # timed: the final save plans with it
    saver.save(20, _state(20))
    final = saver.final(21, _state(21), seconds_left=30.0)
    assert final.generation.step == 21
    assert final.choice == "waited"
    assert "step 20 failed" in final.reason, final.reason
    assert "No space left on device" in final.reason, final.reason
    assert load_state(store.latest())["step"] == 21
    saver.close()


def test_a_final_save_whose_own_background_save_failed_says_so(tmp_path: Path) -> None:
    store = CheckpointStore(backend=RefusingStep(LocalBackend(str(tmp_path)), 21))
    saver = BackgroundSaver(store)
    saver.save(10, _state(10))
    assert saver.wait() is not None
    saver.save(21, _state(21))
    final = saver.final(21, _state(21), seconds_left=30.0)
    assert final.generation.step == 21
    assert final.choice != "nothing in flight", final.reason
    assert "no background save was running" not in final.reason, final.reason
    assert "of step 21 itself and failed" in final.reason, final.reason
    assert "No space left on device" in final.reason, final.reason
    assert load_state(store.latest())["step"] == 21
    saver.close()
