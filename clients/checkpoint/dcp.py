"""torch.distributed.checkpoint (DCP) through the store: sharded saves as generations.

Every rank's DCP shards (`__<rank>_<n>.distcp`) and the coordinator's `.metadata` are
written straight into the generation being saved (hashed while written, no staging copy on
disk), under `dcp/`; the manifest lists every shard with its checksum, and the existing
multi-rank commit makes the generation count only once every rank's part is in. Loading
uses DCP's own reader, so a checkpoint saved by N ranks resumes on M (DCP reshards).

torch is imported by these functions only, never by the package.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Generator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import PurePosixPath
from typing import Any

from .generation import Generation, GenerationWriter
from .store import CheckpointStore

PREFIX = "dcp"
_ROOT = PurePosixPath("/forewarn-generation")


class _Telling(io.RawIOBase):
    """DCP records each item's offset with `tell()`; the store's writers only append."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._position = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        written: int = self._inner.write(data)
        self._position += written
        return written

    def tell(self) -> int:
        return self._position

    def close(self) -> None:
        if not self.closed:
            self._inner.close()
        super().close()


def _file_system(gen: GenerationWriter) -> Any:
    from torch.distributed.checkpoint.filesystem import FileSystemBase

    class GenerationFileSystem(FileSystemBase):
        """DCP's view of a generation being written: files become generation files."""

        def __init__(self) -> None:
            self.pending: dict[str, bytes] = {}

        def _name(self, path: str | os.PathLike[str]) -> str:
            relative = PurePosixPath(os.fspath(path)).relative_to(_ROOT).as_posix()
            return f"{PREFIX}/{relative}"

        @contextmanager
        def create_stream(self, path: str | os.PathLike[str], mode: str) -> Generator[Any]:
            if mode != "wb":
                raise ValueError(f"a generation being written only takes writes, not {mode!r}")
            name = self._name(path)
            if name.endswith(".tmp"):
                # The metadata goes to a temp name and is renamed: keep it until the rename.
                buffer = io.BytesIO()
                yield buffer
                self.pending[name] = buffer.getvalue()
                return
            stream = _Telling(gen.open(name))
            try:
                yield stream
            except BaseException:
                stream._inner.abort()
                raise
            stream.close()

        def concat_path(self, path: str | os.PathLike[str], suffix: str) -> PurePosixPath:
            return PurePosixPath(os.fspath(path)) / suffix

        def init_path(self, path: str | os.PathLike[str]) -> PurePosixPath:
            return PurePosixPath(os.fspath(path))

        def rename(self, path: str | os.PathLike[str], new_path: str | os.PathLike[str]) -> None:
            gen.write_bytes(self._name(new_path), self.pending.pop(self._name(path)))

        def mkdir(self, path: str | os.PathLike[str]) -> None:
            return None

        @classmethod
        def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
            return True

        def exists(self, path: str | os.PathLike[str]) -> bool:
            return False  # a generation is always new

        def rm_file(self, path: str | os.PathLike[str]) -> None:
            return None

    return GenerationFileSystem()


def storage_writer(gen: GenerationWriter, *, thread_count: int = 1) -> Any:
    """A DCP `StorageWriter` whose files become files of `gen` (under `dcp/`)."""
    from torch.distributed.checkpoint import FileSystemWriter

    # The store makes each file durable when it is closed: DCP's own fsync (os.sync() on a
    # stream without a file descriptor) would only repeat it, machine-wide.
    writer = FileSystemWriter(str(_ROOT), sync_files=False, thread_count=thread_count)
    writer.fs = _file_system(gen)
    writer.path = _ROOT
    return writer


def save_dcp(
    store: CheckpointStore,
    step: int,
    state_dict: dict[str, Any],
    *,
    metadata: Mapping[str, Any] | None = None,
    process_group: Any = None,
    thread_count: int = 1,
) -> Generation:
    """Save `state_dict` with DCP as generation `step` on every rank; returns it committed.

    Every rank of the process group calls this with the same step (as `dcp.save`)."""
    import torch.distributed.checkpoint as dcp

    with store.save(step, metadata=metadata, group=process_group) as gen:
        dcp.save(
            state_dict,
            storage_writer=storage_writer(gen, thread_count=thread_count),
            process_group=process_group,
            no_dist=gen.world_size == 1,
        )
    assert gen.committed is not None
    return gen.committed


class DcpAsyncSave:
    """An `async_save` in flight: `done()` says whether DCP finished writing; `commit()`
    waits for it and commits the generation (every rank calls it, at the same point)."""

    def __init__(self, gen: GenerationWriter, future: Future[Any]) -> None:
        self.gen = gen
        self.step = gen.step
        self._future = future

    def done(self) -> bool:
        return self._future.done()

    def commit(self, timeout: float | None = None) -> Generation:
        try:
            self._future.result(timeout)
        except BaseException as exc:
            self.gen.abort(f"{type(exc).__name__}: {exc}")
            raise
        return self.gen.commit()


def async_save_dcp(
    store: CheckpointStore,
    step: int,
    state_dict: dict[str, Any],
    *,
    metadata: Mapping[str, Any] | None = None,
    process_group: Any = None,
) -> DcpAsyncSave:
    """`dcp.async_save` into generation `step`: returns once the state is staged in host
    memory; DCP writes the shards in the background, and `commit()` on the handle commits
    (LATEST moves only then). Needs a torch with `dcp.async_save` (2.3 and newer)."""
    import torch.distributed.checkpoint as dcp

    if not hasattr(dcp, "async_save"):
        raise RuntimeError("this torch has no torch.distributed.checkpoint.async_save")
    gen = store.save(step, metadata=metadata, group=process_group)
    try:
        response = dcp.async_save(
            state_dict,
            storage_writer=storage_writer(gen),
            process_group=process_group,
            no_dist=gen.world_size == 1,
        )
    except BaseException as exc:
        gen.abort(f"{type(exc).__name__}: {exc}")
        raise
    future: Any = getattr(response, "upload_completion", response)
    return DcpAsyncSave(gen, future)


def load_dcp(
    generation: Generation,
    state_dict: dict[str, Any],
    *,
    process_group: Any = None,
) -> None:
    """Load a DCP generation into `state_dict` in place (DCP reshards onto this job's
    ranks). Local stores are read where they are; S3 generations are copied to a temporary
    directory first, every file verified."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader

    no_dist = not (dist.is_available() and dist.is_initialized())
    local = generation.backend.local_path(f"{generation.name}/{PREFIX}")
    if local is not None:
        dcp.load(
            state_dict,
            storage_reader=FileSystemReader(str(local)),
            process_group=process_group,
            no_dist=no_dist,
        )
        return
    with tempfile.TemporaryDirectory(prefix="forewarn-dcp-") as directory:
        generation.get_dir(PREFIX, directory)
        dcp.load(
            state_dict,
            storage_reader=FileSystemReader(directory),
            process_group=process_group,
            no_dist=no_dist,
        )
