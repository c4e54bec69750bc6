"""torch.distributed.checkpoint (DCP) through the store: sharded saves as generations.

Every rank's DCP shards (`__<rank>_<n>.distcp`) and the coordinator's `.metadata` are
written straight into the generation being saved (hashed while written, no staging copy on
disk), under `dcp/`. The CPU tensors DCP writes as they are (their whole storage) stay
allocated and unchanged until the save ends, so their bytes are hashed in place while DCP goes
on writing (see `StableMemory`); the rest (copies DCP makes of views, of GPU tensors) is hashed
before each write returns; the manifest lists every shard with its checksum, and the existing
multi-rank commit makes the generation count only once every rank's part is in. Loading
uses DCP's own reader, so a checkpoint saved by N ranks resumes on M (DCP reshards).

torch is imported by these functions only, never by the package.
"""

from __future__ import annotations

import io
import os
import tempfile
import threading
import time
from collections.abc import Callable, Generator, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from pathlib import PurePosixPath
from typing import Any

from .crossing import Crossing, crossable
from .errors import CommitTimeout, CorruptGenerationError, RankError
from .generation import Generation, GenerationWriter, to_load
from .hashing import StableMemory
from .needs import needs
from .store import CheckpointStore

PREFIX = "dcp"
# How long a failed write waits for DCP's other writer threads to end the file each is
# writing (see `stop`): past it the failure goes on, and a write still with the storage then
# meets an aborted file.
STOP_WITHIN = 30.0
_ROOT = PurePosixPath("/forewarn-generation")


class _Telling(io.RawIOBase):
    """DCP records each item's offset with `tell()`; the store's writers only append. Once
    `stopped` is set (the save failed), what is written is counted and dropped."""

    def __init__(self, inner: Any, stopped: threading.Event) -> None:
        self._inner = inner
        self._stopped = stopped
        self._position = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        stopped = self._stopped.is_set() or self._inner is None
        written: int = memoryview(data).nbytes if stopped else self._inner.write(data)
        self._position += written
        return written

    def tell(self) -> int:
        return self._position

    def close(self) -> None:
        if not self.closed and self._inner is not None:
            if self._stopped.is_set():
                self._inner.abort()  # its bytes were dropped: never a file of the generation
            else:
                self._inner.close()
        super().close()


def _file_system(gen: GenerationWriter, stable: StableMemory | None) -> Any:
    from torch.distributed.checkpoint.filesystem import FileSystemBase

    class GenerationFileSystem(FileSystemBase):
        """DCP's view of a generation being written: files become generation files."""

        def __init__(self) -> None:
            self.pending: dict[str, bytes] = {}
            # What failed a file, in any of DCP's writer threads (see `storage_writer`).
            self.failed: list[BaseException] = []
            # Set once this rank's save failed: DCP's other writer threads drop the rest of
            # their files (see `stop`).
            self.stopped = threading.Event()
            self._busy = 0  # files being written now
            self._idle = threading.Condition()

        def stop(self, within: float) -> None:
            """Stop DCP's writer threads: DCP raises a failure of its caller's thread without
            joining its own, and the generation was aborted under them (each died with
            `write ... after it was closed`). Waits up to `within` s for the files being
            written to end (a write already with the storage ends first)."""
            self.stopped.set()
            with self._idle:
                self._idle.wait_for(lambda: self._busy == 0, within)

        @contextmanager
        def _counted(self) -> Generator[None]:
            with self._idle:
                self._busy += 1
            try:
                yield
            finally:
                with self._idle:
                    self._busy -= 1
                    self._idle.notify_all()

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
            with self._counted():
                if self.stopped.is_set():  # the save failed: nothing of it is kept
                    yield _Telling(None, self.stopped)
                    return
                try:
                    writer = gen.open(name)
                except BaseException as exc:
                    self.failed.append(exc)
                    self.stopped.set()
                    raise
                writer.stable_memory = stable
                stream = _Telling(writer, self.stopped)
                try:
                    yield stream
                except BaseException as exc:
                    self.failed.append(exc)
                    self.stopped.set()
                    stream._inner.abort()
                    raise
                try:
                    stream.close()  # DCP closes it first; aborted if the save failed meanwhile
                except BaseException as exc:
                    self.failed.append(exc)
                    self.stopped.set()
                    raise

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


def _crossing(process_group: Any, no_dist: bool) -> Crossing:
    """What a DCP save or load through `process_group` names as this rank in a `RankError`:
    the rank DCP names (its process group's)."""

    def rank() -> int:
        import torch.distributed as dist

        if no_dist or not (dist.is_available() and dist.is_initialized()):
            return 0
        return int(dist.get_rank(process_group))

    return Crossing(rank)


def storage_writer(
    gen: GenerationWriter,
    *,
    thread_count: int = 1,
    stable: StableMemory | None = None,
    crossing: Crossing | None = None,
) -> Any:
    """A DCP `StorageWriter` whose files become files of `gen` (under `dcp/`). `stable`: the
    memory that stays unchanged until the files are closed (`stable_planner` fills it).
    `crossing`: guards what its methods raise inside DCP's collectives (see `crossing.py`)."""
    from torch.distributed.checkpoint import FileSystemWriter, StorageWriter

    # The store makes each file durable when it is closed: DCP's own fsync (os.sync() on a
    # stream without a file descriptor) would only repeat it, machine-wide.
    writer = FileSystemWriter(str(_ROOT), sync_files=False, thread_count=thread_count)
    writer.fs = fs = _file_system(gen, stable)
    writer.path = _ROOT
    write_data = writer.write_data

    def checked_write_data(plan: Any, planner: Any) -> Any:
        # With thread_count > 1 DCP writes files in threads of its own and never looks at
        # how they ended: a file that failed there was left out of DCP's metadata, and the
        # generation committed without it.
        try:
            written = write_data(plan, planner)
        except BaseException:
            fs.stop(STOP_WITHIN)
            raise
        if fs.failed:
            raise fs.failed[0]
        return written

    writer.write_data = checked_write_data  # type: ignore[method-assign]
    return writer if crossing is None else crossing.guard(writer, StorageWriter)


def stable_planner(stable: StableMemory, crossing: Crossing | None = None) -> Any:
    """DCP's default save planner, noting in `stable` the storage of every CPU tensor that
    DCP will write as it is (it copies views of a larger storage, and tensors on other
    devices, first), with a reference that keeps it allocated until `stable.clear()`.

    Those tensors are the caller's (or DCP's staged copies, for `async_save`), which nobody
    changes until the save ends: `save_dcp` blocks its caller, and the staged copies are
    DCP's own. `crossing`: as `storage_writer`'s."""
    import torch
    from torch.distributed.checkpoint import DefaultSavePlanner, SavePlanner

    class StablePlanner(DefaultSavePlanner):
        def resolve_data(self, write_item: Any) -> Any:
            data = super().resolve_data(write_item)
            if isinstance(data, torch.Tensor) and data.device.type == "cpu":
                storage = data.untyped_storage()
                # DCP's loader writes this same storage when it holds nothing but the tensor.
                if storage.nbytes() == data.nbytes:
                    stable.add(storage.data_ptr(), storage.nbytes(), data)
            return data

    planner = StablePlanner()
    return planner if crossing is None else crossing.guard(planner, SavePlanner)


def save_dcp(
    store: CheckpointStore,
    step: int,
    state_dict: dict[str, Any],
    *,
    metadata: Mapping[str, Any] | None = None,
    process_group: Any = None,
    thread_count: int = 1,
    timeout: float | None = None,
) -> Generation:
    """Save `state_dict` with DCP as generation `step` on every rank; returns it committed.

    Every rank of the process group calls this with the same step (as `dcp.save`).
    `timeout` (as `CheckpointStore.flush`'s; an exit's save): with a single rank, raise
    `CommitTimeout` once that many seconds pass without the commit and the save's bytes have
    stopped moving towards the storage; with several ranks (DCP's collectives and the
    commit's cannot be left behind on one rank) each rank's storage requests are bounded to
    end within it, so storage that stopped answering for one rank fails the save on every
    rank (DCP gathers the error) within `timeout`, and nothing is committed."""
    needs("torch", "save_dcp")
    import torch.distributed.checkpoint as dcp

    from .background import SaveMotion

    state_dict = _taken_on_every_rank(state_dict, process_group)

    # Told of each file's bytes moving: a slow link is waited for past the timeout, as an
    # exit's other saves are; storage that stopped answering fails it there.
    motion = SaveMotion()

    def write(gen: GenerationWriter) -> None:
        gen.on_open = motion.watch_file
        stable = StableMemory()
        crossing = _crossing(process_group, gen.world_size == 1)
        try:
            dcp.save(
                state_dict,
                storage_writer=storage_writer(
                    gen, thread_count=thread_count, stable=stable, crossing=crossing
                ),
                planner=stable_planner(stable, crossing),
                process_group=process_group,
                no_dist=gen.world_size == 1,
            )
        except BaseException as exc:
            crossing.blame(exc)
            raise
        finally:
            stable.clear()
            motion.completed()

    flushed = store.flush(
        step,
        write,
        metadata=metadata,
        timeout=timeout,
        moving=motion.moving,
        group=process_group,
    )
    return flushed.generation


class DcpAsyncSave:
    """An `async_save` in flight: `done()` says whether DCP finished writing; `commit()`
    waits for it and commits the generation (every rank calls it, at the same point)."""

    def __init__(
        self,
        gen: GenerationWriter,
        future: Future[Any],
        stable: StableMemory | None = None,
        crossing: Crossing | None = None,
    ) -> None:
        self.gen = gen
        self.step = gen.step
        self._future = future
        self._stable = stable
        self._crossing = crossing

    def done(self) -> bool:
        return self._future.done()

    def commit(self, timeout: float | None = None) -> Generation:
        """Wait (up to `timeout` seconds) for DCP's writes, then commit. A timeout raises
        `CommitTimeout` and leaves the save in flight, untouched: call `commit()` again to
        go on waiting. Every rank calls it at the same point."""
        started = time.monotonic()
        try:
            self._future.result(timeout)
        except BaseException as exc:
            if not self._future.done():
                # DCP's thread is still writing into the generation and, with several ranks,
                # still inside its own collectives: aborting now would close files under it
                # and send the abort's collectives beside DCP's (gloo then kills the process
                # with a collective mismatch). Nothing is committed; the save stays as it is.
                if isinstance(exc, (TimeoutError, FutureTimeout)):  # distinct on 3.10
                    raise CommitTimeout(
                        f"{self.gen.name}: torch.distributed.checkpoint was still writing "
                        f"after {time.monotonic() - started:.1f} s (timeout {timeout} s); "
                        "nothing is committed and the save is still in flight: call commit() "
                        "again to wait for it"
                    ) from None
                raise
            self._release()
            if self._crossing is not None:
                self._crossing.blame(exc)
            self.gen.abort(f"{type(exc).__name__}: {exc}")
            raise
        self._release()  # every file is closed: nothing reads the staged tensors any more
        return self.gen.commit()

    def _release(self) -> None:
        if self._stable is not None:
            self._stable.clear()


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
    (LATEST moves only then). Without `process_group`, DCP's thread and the commit use a
    gloo group of every rank made for them at the first call (the training loop's collectives
    stay on the default group); a `process_group` given must be one nothing else uses while
    the save is in flight. Needs a torch with `dcp.async_save` (2.3 and newer)."""
    needs("torch", "async_save_dcp")
    import torch.distributed.checkpoint as dcp

    if not hasattr(dcp, "async_save"):
        raise RuntimeError("this torch has no torch.distributed.checkpoint.async_save")
    if process_group is None:
        process_group = _async_group()
    state_dict = _taken_on_every_rank(state_dict, process_group)
    gen = store.save(step, metadata=metadata, group=process_group)
    stable = StableMemory()
    crossing = _crossing(process_group, gen.world_size == 1)
    try:
        response = dcp.async_save(
            state_dict,
            storage_writer=storage_writer(gen, stable=stable, crossing=crossing),
            planner=stable_planner(stable, crossing),
            process_group=process_group,
            no_dist=gen.world_size == 1,
        )
    except BaseException as exc:
        stable.clear()
        crossing.blame(exc)
        gen.abort(f"{type(exc).__name__}: {exc}")
        raise
    future: Any = getattr(response, "upload_completion", response)
    return DcpAsyncSave(gen, future, stable, crossing)


# The process group async saves run their collectives on (see `_async_group`), and the
# default group it was made from.
_ASYNC_GROUP: tuple[Any, Any] | None = None


def _async_group() -> Any:
    """A gloo group of every rank, for DCP's thread: on the default group its collectives
    ran beside the training loop's (and the guard's agreement), in a different order on each
    rank, and two gloo ranks hung at the first save until the group's timeout. Made once per
    default group, by every rank at the same call (creating a group is itself collective);
    None without torch.distributed or with a single rank."""
    global _ASYNC_GROUP
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    default = dist.distributed_c10d._get_default_group()
    if _ASYNC_GROUP is None or _ASYNC_GROUP[1] is not default:
        _ASYNC_GROUP = (dist.new_group(backend="gloo"), default)
    return _ASYNC_GROUP[0]


def load_dcp(
    generation: Generation,
    state_dict: dict[str, Any],
    *,
    process_group: Any = None,
) -> None:
    """Load a DCP generation into `state_dict` in place (DCP reshards onto this job's
    ranks). Local stores are read where they are; S3 generations are copied to a temporary
    directory first, every file verified."""
    needs("torch", "load_dcp")
    import torch.distributed as dist

    generation = to_load(generation, "load_dcp")
    if not any(name.startswith(PREFIX + "/") for name in generation.files):
        # Saved another way (a job that moved to DCP, save_training_state into the same
        # store): DCP's reader said `AssertionError: metadata is None` on local disk.
        raise FileNotFoundError(
            f"{generation.name} holds no DCP save (no files under {PREFIX}/; it has "
            f"{', '.join(sorted(generation.files)) or 'no files'}): it was saved without "
            "save_dcp; load it the way it was saved (load_training_state, load_state)"
        )
    no_dist = not (dist.is_available() and dist.is_initialized())
    local = generation.backend.local_path(f"{generation.name}/{PREFIX}")
    if local is not None:
        # DCP reads shards without checking them, and latest() checks only sizes by default:
        # the files are checked here, as get_dir does for S3.
        _verify_in_place(generation, dist, process_group, no_dist)
        _load(state_dict, str(local), process_group, no_dist)
        return
    with tempfile.TemporaryDirectory(prefix="forewarn-dcp-") as directory:
        _on_every_rank(lambda: generation.get_dir(PREFIX, directory), dist, process_group, no_dist)
        _load(state_dict, directory, process_group, no_dist)


def _no_dist() -> tuple[Any, bool]:
    import torch.distributed as dist

    return dist, not (dist.is_available() and dist.is_initialized())


def _taken_on_every_rank(state_dict: dict[str, Any], process_group: Any) -> dict[str, Any]:
    """`state_dict` with each `Stateful`'s `state_dict()` taken here, agreed by every rank:
    DCP calls them itself, before its first collective, so one raising on one rank left that
    rank alone and the others waiting in DCP's collective for good (gloo's 30 min). Now the
    failing rank raises its own exception and every other rank a `RankError` naming it, and
    DCP is handed plain state (as `dcp.save` makes it: a shallow copy, `Stateful` values
    replaced by their state)."""
    from torch.distributed.checkpoint.stateful import Stateful

    dist, no_dist = _no_dist()
    taken: dict[str, Any] = {}

    def take() -> None:
        for key, value in state_dict.items():
            taken[key] = value.state_dict() if isinstance(value, Stateful) else value

    _on_every_rank(take, dist, process_group, no_dist)
    return taken


def _on_every_rank(
    step: Callable[[], Any], dist: Any, process_group: Any, no_dist: bool
) -> list[Any]:
    """`step()` on every rank, what each returned gathered to every rank. A rank whose step
    raised raises it, and every other rank a `RankError` naming it: raised on one rank alone
    (before DCP's collectives, which gather failures themselves), the others waited in DCP's
    first collective for good."""
    try:
        result, failure = step(), None
    except BaseException as exc:
        result, failure = None, exc
    if no_dist or dist.get_world_size(process_group) == 1:
        if failure is not None:
            raise failure
        return [result]
    rank = dist.get_rank(process_group)
    sent = None if failure is None else crossable(failure, rank)
    gathered: list[Any] = [None] * dist.get_world_size(process_group)
    dist.all_gather_object(gathered, (result, sent), group=process_group)
    if failure is not None:
        raise failure
    for other, (_, error) in enumerate(gathered):
        if isinstance(error, RankError):
            raise RankError(error.rank, error.kind, error.text)
        if error is not None:
            kind = f"{type(error).__module__}.{type(error).__qualname__}"
            raise RankError(other, kind, str(error)) from error
    return [found for found, _ in gathered]


def _load(state_dict: dict[str, Any], path: str, process_group: Any, no_dist: bool) -> None:
    """DCP's own load of the files in `path`, its reader and planner guarded (what they raise
    crosses ranks: `crossing.py`)."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import (
        DefaultLoadPlanner,
        FileSystemReader,
        LoadPlanner,
        StorageReader,
    )
    from torch.distributed.checkpoint.stateful import Stateful

    # As dcp.load does, but each Stateful's state_dict() and load_state_dict() agreed by every
    # rank (see `_taken_on_every_rank`): DCP calls them before and after its collectives, on
    # each rank alone.
    plain = _taken_on_every_rank(state_dict, process_group)
    crossing = _crossing(process_group, no_dist)
    try:
        dcp.load(
            plain,
            storage_reader=crossing.guard(FileSystemReader(path), StorageReader),
            planner=crossing.guard(DefaultLoadPlanner(), LoadPlanner),
            process_group=process_group,
            no_dist=no_dist,
        )
    except BaseException as exc:
        crossing.blame(exc)
        raise

    def give_back() -> None:
        for key, value in state_dict.items():
            if isinstance(value, Stateful):
                value.load_state_dict(plain[key])
            else:
                state_dict[key] = plain[key]

    _on_every_rank(give_back, dist, process_group, no_dist)


def _verify_in_place(generation: Generation, dist: Any, process_group: Any, no_dist: bool) -> None:
    """Check the checksums of every DCP file of a local generation. With a process group the
    ranks share the work (each hashes every world-th file; the findings are gathered), so a
    job of N ranks reads the checkpoint once, not N times."""
    if generation.checksummed:
        return
    names = sorted(name for name in generation.files if name.startswith(PREFIX + "/"))
    world = 1 if no_dist else dist.get_world_size(process_group)
    rank = 0 if no_dist else dist.get_rank(process_group)

    def check() -> list[str]:
        problems: list[str] = []
        for name in names[rank::world]:
            try:
                generation.verify_file(name)
            except CorruptGenerationError as exc:
                problems.extend(exc.problems)
        return problems

    gathered = _on_every_rank(check, dist, process_group, no_dist)
    problems = [problem for found in gathered for problem in found]
    if problems:
        raise CorruptGenerationError(generation.name, problems)
