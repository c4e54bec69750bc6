"""Checkpoints that do not stop training: snapshot to host memory, upload in the background.

`BackgroundSaver.save(step, state)` copies every tensor of `state` into host buffers it keeps
and reuses (the training thread waits only for that copy: the stall), then a background
thread serialises the snapshot into generation `step` and commits it (files, manifest,
marker, then LATEST: the generation counts, and LATEST moves, only once it is complete).
One save is in flight at a time: a save while one is in flight first waits for it, because
the buffers it would overwrite are the ones being uploaded, so memory stays at one extra
copy of the state. A failed background save is raised by the next `save()` or `check()`.

`final(step, state, seconds_left)` is the terminate path: it waits for an in-flight save only
when that and the final save fit in the time left, else cancels it, then saves
synchronously, and says what it chose and why.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from forewarn.protocol.errors import ForewarnError

from .errors import CheckpointError
from .generation import Generation, GenerationWriter
from .store import CheckpointStore

STATE_FILE = "state.pt"


class BackgroundSaveError(CheckpointError):
    """A background save failed; raised at the next `save()` or `check()`."""

    def __init__(self, step: int, cause: BaseException) -> None:
        self.step = step
        self.cause = cause
        super().__init__(
            f"the background checkpoint of step {step} failed: {type(cause).__name__}: {cause}"
        )


class _Cancelled(ForewarnError):
    """The terminate path gave up an in-flight save to write the final one."""


@dataclass(frozen=True)
class FinalSave:
    """What `final()` did: `choice` is "waited", "cancelled" or "nothing in flight"."""

    choice: str
    reason: str
    generation: Generation
    stall_seconds: float
    durable_seconds: float


@dataclass(frozen=True)
class SaveTiming:
    step: int
    stall_seconds: float  # what the training thread waited (the snapshot)
    durable_seconds: float | None = None  # from the call until committed, once known


class _CancellableStream:
    """Passes writes through until cancelled (then the save aborts at its next write)."""

    def __init__(self, inner: Any, cancelled: threading.Event) -> None:
        self._inner = inner
        self._cancelled = cancelled

    def write(self, data: Any) -> int:
        if self._cancelled.is_set():
            raise _Cancelled("cancelled for the final checkpoint")
        written: int = self._inner.write(data)
        return written

    def flush(self) -> None:
        return None


# Told, on the background thread, how each background save ended: its timing (with the
# durable time once committed), the committed generation or None, and the failure or None.
OnDone = Callable[[SaveTiming, "Generation | None", "BaseException | None"], None]


class BackgroundSaver:
    """Background checkpoints into a `CheckpointStore` (see the module's text).

    `on_done(timing, generation, error)` is called on the background thread when a background
    save is committed (`error` None) or failed (`generation` None); not for a save cancelled
    by `final()`, which reports itself."""

    def __init__(
        self, store: CheckpointStore, *, file_name: str = STATE_FILE, on_done: OnDone | None = None
    ) -> None:
        self.store = store
        self.file_name = file_name
        self.on_done = on_done
        self.last: SaveTiming | None = None
        self.last_durable: Generation | None = None
        self._buffers: dict[str, Any] = {}
        self._thread: threading.Thread | None = None
        self._in_flight: int | None = None
        self._started = 0.0
        self._error: BackgroundSaveError | None = None
        self._cancel = threading.Event()
        self._durable_estimate: float | None = None

    # -- the training thread's side -------------------------------------------------------

    @property
    def in_flight(self) -> int | None:
        """The step being saved in the background, if any."""
        return self._in_flight if self._thread is not None and self._thread.is_alive() else None

    def check(self) -> None:
        """Raise the failure of the last background save, once (call it at `due()`)."""
        error, self._error = self._error, None
        if error is not None:
            raise error

    def save(
        self, step: int, state: Mapping[str, Any], *, metadata: Mapping[str, Any] | None = None
    ) -> SaveTiming:
        """Snapshot `state` and save it as generation `step` in the background; returns once
        the snapshot is taken (`stall_seconds`). Raises the previous save's failure."""
        started = time.monotonic()
        self.wait()  # one in flight: its buffers are about to be reused
        self.check()
        snapshot = self._snapshot(state)
        stall = time.monotonic() - started
        timing = SaveTiming(step, stall)
        self.last = timing
        self._cancel = threading.Event()
        self._in_flight = step
        self._started = started
        self._thread = threading.Thread(
            target=self._run,
            args=(step, snapshot, dict(metadata or {}), timing, self._cancel),
            name=f"forewarn-background-save-{step}",
            daemon=True,
        )
        self._thread.start()
        return timing

    def wait(self, timeout: float | None = None) -> Generation | None:
        """Wait until the in-flight save is committed (or failed); the last durable one."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if not thread.is_alive():
                self._thread = None
        return self.last_durable

    def final(
        self,
        step: int,
        state: Mapping[str, Any],
        seconds_left: float | None,
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> FinalSave:
        """The terminate path: finish or cancel the in-flight save, then save `step`
        synchronously. `seconds_left` is the time until the deadline (None: unknown)."""
        started = time.monotonic()
        in_flight = self.in_flight
        final_estimate = self._durable_estimate
        if in_flight is not None and in_flight == step:
            # The save in flight already holds this step's state: finishing it is the final save.
            self.wait()
            durable = self.last_durable
            if durable is not None and durable.step == step:
                self._error = None
                seconds = time.monotonic() - started
                reason = f"the save in flight is of step {step} itself; waited for its commit"
                return FinalSave("waited", reason, durable, seconds, seconds)
            in_flight = None  # it failed: write it again, synchronously
        if in_flight is None:
            choice, reason = "nothing in flight", "no background save was running"
        elif seconds_left is None:
            choice, reason = "cancelled", f"step {in_flight} cancelled: the deadline is unknown"
            self._cancel_in_flight()
        elif final_estimate is None:
            choice = "cancelled"
            reason = f"step {in_flight} cancelled: no save has been timed yet to plan with"
            self._cancel_in_flight()
        else:
            running = started - self._started
            remaining = max(final_estimate - running, 0.0)
            needed = remaining + final_estimate
            if needed <= seconds_left:
                choice = "waited"
                reason = (
                    f"step {in_flight} needed about {remaining:.1f} s more and the final save "
                    f"about {final_estimate:.1f} s: {needed:.1f} s fit in {seconds_left:.1f} s"
                )
                self.wait()
            else:
                choice = "cancelled"
                reason = (
                    f"step {in_flight} needed about {remaining:.1f} s more and the final save "
                    f"about {final_estimate:.1f} s: {needed:.1f} s do not fit in "
                    f"{seconds_left:.1f} s"
                )
                self._cancel_in_flight()
        self._error = None  # a cancelled or failed older save is superseded by this one
        snapshot = self._snapshot(state)
        generation = self._write(step, snapshot, dict(metadata or {}), threading.Event())
        self.last_durable = generation
        seconds = time.monotonic() - started
        self.last = SaveTiming(step, seconds, seconds)
        return FinalSave(choice, reason, generation, seconds, seconds)

    def close(self) -> None:
        """Wait for the in-flight save; raise its failure, if any."""
        self.wait()
        self.check()

    # -- the snapshot ---------------------------------------------------------------------

    def _snapshot(self, state: Mapping[str, Any]) -> dict[str, Any]:
        return {key: self._copy(f"{key}", value) for key, value in state.items()}

    def _copy(self, path: str, value: Any) -> Any:
        torch = _torch()
        if torch is not None and isinstance(value, torch.Tensor):
            buffer = self._buffers.get(path)
            if (
                buffer is None
                or buffer.shape != value.shape
                or buffer.dtype != value.dtype
                or buffer.layout != value.layout
            ):
                pin = torch.cuda.is_available() and value.device.type == "cuda"
                buffer = torch.empty(value.shape, dtype=value.dtype, device="cpu", pin_memory=pin)
                self._buffers[path] = buffer
            buffer.copy_(value.detach(), non_blocking=False)
            return buffer
        if isinstance(value, Mapping):
            return {key: self._copy(f"{path}/{key}", item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            items = [self._copy(f"{path}/{index}", item) for index, item in enumerate(value)]
            return type(value)(items) if isinstance(value, list) else tuple(items)
        return copy.deepcopy(value)

    # -- the background side --------------------------------------------------------------

    def _run(
        self,
        step: int,
        snapshot: dict[str, Any],
        metadata: dict[str, Any],
        timing: SaveTiming,
        cancel: threading.Event,
    ) -> None:
        try:
            generation = self._write(step, snapshot, metadata, cancel)
        except BaseException as exc:
            if not isinstance(exc, _Cancelled):
                self._error = BackgroundSaveError(step, exc)
                self._tell(timing, None, exc)
            return
        durable = time.monotonic() - self._started
        self._durable_estimate = durable
        self.last_durable = generation
        done = SaveTiming(step, timing.stall_seconds, durable)
        if self.last is timing:
            self.last = done
        self._tell(done, generation, None)

    def _tell(
        self, timing: SaveTiming, generation: Generation | None, error: BaseException | None
    ) -> None:
        if self.on_done is None:
            return
        try:
            self.on_done(timing, generation, error)
        except Exception:  # a broken hook must not hide the save's own outcome
            logging.getLogger("forewarn.clients").exception("forewarn: on_done hook failed")

    def _write(
        self, step: int, snapshot: dict[str, Any], metadata: dict[str, Any], cancel: threading.Event
    ) -> Generation:
        torch = _torch()
        started = time.monotonic()
        gen: GenerationWriter
        with self.store.save(step, metadata=metadata) as gen, gen.open(self.file_name) as stream:
            target = _CancellableStream(stream, cancel)
            if torch is not None:
                torch.save(snapshot, target)
            else:
                import pickle

                pickle.dump(snapshot, target)
        if self._durable_estimate is None:
            self._durable_estimate = time.monotonic() - started
        assert gen.committed is not None
        return gen.committed

    def _cancel_in_flight(self) -> None:
        self._cancel.set()
        self.wait()


def _torch() -> Any:
    import sys

    return sys.modules.get("torch")


def load_state(generation: Generation, *, file_name: str = STATE_FILE) -> Any:
    """The state a `BackgroundSaver` saved into `generation` (checksum-checked)."""
    import io

    import torch

    return torch.load(io.BytesIO(generation.read_bytes(file_name)), weights_only=True)
