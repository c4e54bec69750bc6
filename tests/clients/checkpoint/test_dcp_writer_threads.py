"""`save_dcp(thread_count=2)`: a file that fails in DCP's second writer thread fails the
save. DCP runs `_write_files_from_queue` in threads of its own and never looks at how they
ended: the exception was printed as `Exception in thread ...` and lost, DCP's metadata left
that file's tensors out, and the generation committed without them (LATEST named a
checkpoint that cannot be loaded)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore, ObjectWriter
from forewarn.clients.checkpoint.testing import DelegatingBackend
from support import requires

pytestmark = requires("torch")


class FailsInDcpsThread(DelegatingBackend):
    """Refuses the file DCP's own writer thread opens; the caller's thread, holding the
    other file, waits until it has (so that thread has a file to write, on any machine)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.refused = threading.Event()

    def writer(self, key: str, on_done: Any = None) -> ObjectWriter:
        if key.endswith(".distcp"):
            if "_write_files_from_queue" in threading.current_thread().name:
                self.refused.set()
                raise OSError(f"the disk refused {key}")
            assert self.refused.wait(60), "DCP's writer thread took no file"
        return super().writer(key, on_done)


@pytest.mark.timeout(120)
def test_a_file_failing_in_dcps_writer_thread_fails_the_save(tmp_path: Path) -> None:
    import torch
    from forewarn.clients.checkpoint.dcp import save_dcp

    store = CheckpointStore(str(tmp_path / "store"))
    backend = FailsInDcpsThread(store.backend)
    state = {"a": torch.ones(1000), "b": torch.full((1000,), 2.0)}
    with pytest.raises(BaseException, match="the disk refused") as raised:
        save_dcp(CheckpointStore(backend=backend), 1, state, thread_count=2)
    assert backend.refused.is_set()
    assert isinstance(raised.value, OSError) or "CheckpointException" in type(raised.value).__name__
    assert store.latest() is None  # nothing committed without the file


class FailsInCallersThread(DelegatingBackend):
    """Refuses the file the caller's thread opens once DCP's own writer thread is writing
    one; that thread's next write then waits for its file to be aborted (at most
    `WAIT_ABORT` s), as a slow upload's would."""

    WAIT_ABORT = 5.0

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.writing = threading.Event()
        self.aborted = threading.Event()

    def writer(self, key: str, on_done: Any = None) -> ObjectWriter:
        if not key.endswith(".distcp"):
            return super().writer(key, on_done)
        if "_write_files_from_queue" not in threading.current_thread().name:
            assert self.writing.wait(60), "DCP's writer thread wrote nothing"
            raise OSError(f"the disk refused {key}")
        writer = super().writer(key, on_done)
        write, abort = writer.write, writer.abort

        def slow_write(data: Any) -> int:
            self.writing.set()
            self.aborted.wait(self.WAIT_ABORT)
            return write(data)

        def noted_abort() -> None:
            self.aborted.set()
            abort()

        writer.write = slow_write  # type: ignore[method-assign]
        writer.abort = noted_abort  # type: ignore[method-assign]
        return writer


@pytest.mark.timeout(120)
def test_dcps_other_writer_threads_stop_writing_once_the_save_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file failing in the caller's thread: DCP raises at once, without joining its own
    writer threads, and the store aborted the generation under them: each went on writing
    into its closed file and died with `ValueError: write to ... after it was closed`
    (`Exception in thread ...`). Now they discard what is left and end before the save
    raises; the aborted generation is never what `latest()` gives."""
    import torch
    from forewarn.clients.checkpoint.dcp import save_dcp

    died: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: died.append(repr(args.exc_value)))
    store = CheckpointStore(str(tmp_path / "store"))
    backend = FailsInCallersThread(store.backend)
    state = {"a": torch.ones(1000), "b": torch.full((1000,), 2.0)}
    with pytest.raises(BaseException, match="the disk refused"):
        save_dcp(CheckpointStore(backend=backend), 1, state, thread_count=2)
    assert backend.writing.is_set()
    still = [t.name for t in threading.enumerate() if "_write_files_from_queue" in t.name]
    assert still == [], still  # DCP's threads ended before the save raised
    assert died == [], died
    assert store.latest() is None
