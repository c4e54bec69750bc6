"""One rank of a DCP job on the gloo backend (run as a subprocess by test_dcp.py).

    dcp_worker.py RANK WORLD save URL STEP         sharded state, saved through the store
    dcp_worker.py RANK WORLD async URL STEP MIB [HOLD]
                                                   async_save of a large state, then commit;
                                                   rank 0 writes no shard until HOLD exists
    dcp_worker.py RANK WORLD load URL              resume onto WORLD ranks, compare bits
    dcp_worker.py RANK WORLD partfail URL STEP     save_dcp; rank 1's part of the commit cannot
                                                   be written: how each rank's save ended
    dcp_worker.py RANK WORLD train URL             async saves while the loop all_reduces
    dcp_worker.py RANK WORLD odd URL STEP HOW KIND FAULTY SUFFIX
                                                   HOW (save, async, load; verify, fetch: a
                                                   load whose check or copy of the files
                                                   fails) with rank
                                                   FAULTY's
                                                   storage raising an odd_errors KIND error
                                                   at its first file ending in SUFFIX: how
                                                   each rank's save or load ended
    dcp_worker.py RANK WORLD stateful URL STEP HOW KIND FAULTY
                                                   HOW (save, async, load) of a state holding
                                                   a Stateful whose state_dict() raises on
                                                   rank FAULTY (KIND: plain, or odd_errors'):
                                                   how each rank's save or load ended
    dcp_worker.py RANK WORLD exit URL STEP LEAD    a terminate due in LEAD s, then its save as
                                                   the framework callbacks make it (save_dcp,
                                                   timeout=the guard's): how it ended, when

Prints one JSON line per event.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import odd_errors  # found next to this script (sys.path[0]), by every rank
import torch
import torch.distributed as dist
from forewarn.clients import CheckpointGuard
from forewarn.clients.checkpoint import CheckpointStore, ObjectWriter
from forewarn.clients.checkpoint.dcp import async_save_dcp, load_dcp, save_dcp
from forewarn.clients.checkpoint.testing import DelegatingBackend
from forewarn.clients.event import Event
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor


def expected(step: int, rows: int = 96) -> dict[str, torch.Tensor]:
    """The full tensors of step `step`: the same on every rank and every run."""
    generator = torch.Generator().manual_seed(1000 + step)
    return {
        "weight": torch.randn(rows, 33, generator=generator),
        "half": torch.randn(rows, 7, generator=generator).to(torch.bfloat16),
        "counts": torch.randint(0, 1 << 40, (rows,), generator=generator),
    }


def sharded(full: dict[str, torch.Tensor], mesh: object) -> dict[str, object]:
    return {name: distribute_tensor(t, mesh, [Shard(0)]) for name, t in full.items()}


class HeldShards(DelegatingBackend):
    """Writes no DCP shard until the `hold` file exists: the test kills the other rank in a
    window it controls (with both ranks free, the other rank's shard, rank 0's and the
    commit could all land between two of the test's listings on a loaded machine)."""

    def __init__(self, inner: Any, hold: Path) -> None:
        super().__init__(inner)
        self.hold = hold

    def writer(self, key: str, on_done: Any = None) -> ObjectWriter:
        if key.endswith(".distcp"):
            deadline = time.monotonic() + 600
            while not self.hold.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        return super().writer(key, on_done)


class UnwritableParts(DelegatingBackend):
    """Storage that takes the shards but refuses this rank's part of the commit (it stopped
    answering between the two, its requests bounded by an exit's time)."""

    def put_small(self, key: str, data: bytes) -> None:
        if "/parts/" in key:
            raise OSError(f"the storage refused {key}")
        super().put_small(key, data)


class OddErrors(DelegatingBackend):
    """Storage whose library raises an exception that does not cross ranks as DCP sends it
    (odd_errors) when the first file ending in `suffix` is opened."""

    def __init__(self, inner: Any, kind: str, suffix: str) -> None:
        super().__init__(inner)
        self.kind = kind
        self.suffix = suffix

    def writer(self, key: str, on_done: Any = None) -> ObjectWriter:
        if key.endswith(self.suffix):
            raise odd_errors.make(self.kind, key)
        return super().writer(key, on_done)


def raise_on_read(kind: str, suffix: str) -> None:
    """DCP's reader of this process raises an odd_errors `kind` error when it opens a file
    ending in `suffix` (a user's fsspec, a library under the reader)."""
    from torch.distributed.checkpoint.filesystem import FileSystem

    real = FileSystem.create_stream

    def create_stream(self: Any, path: Any, mode: str) -> Any:
        if str(path).endswith(suffix):
            raise odd_errors.make(kind, str(path))
        return real(self, path, mode)

    FileSystem.create_stream = create_stream  # type: ignore[method-assign]


def raise_on_check(kind: str, suffix: str, method: str) -> None:
    """`load_dcp`'s step before DCP's own collectives, the check of a local generation's
    files (`method` verify_file) or the copy of an S3 one (get_dir), raises an odd_errors
    `kind` error on this rank, at a name ending in `suffix`."""
    from forewarn.clients.checkpoint.generation import Generation

    real = getattr(Generation, method)

    def failing(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        if name.endswith(suffix):
            raise odd_errors.make(kind, name)
        return real(self, name, *args, **kwargs)

    setattr(Generation, method, failing)


class Progress:
    """A user's Stateful (DCP calls `state_dict()` for it, before its own collectives);
    `fail` makes `state_dict()` raise an error of that kind (plain, or odd_errors')."""

    def __init__(self, step: int, fail: str | None = None) -> None:
        self.step = step
        self.fail = fail

    def state_dict(self) -> dict[str, Any]:
        if self.fail == "plain":
            raise RuntimeError("the user's state_dict() failed")
        if self.fail is not None:
            raise odd_errors.make(self.fail, "the user's state_dict()")
        return {"step": torch.tensor(self.step)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])


def say(**fields: object) -> None:
    """One JSON line on stdout in one write: the ranks share its pipe, and a print (text,
    then newline) could let another rank's line in between."""
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


# In `train`, a collective that waits this long is the hang the mode looks for (DCP's
# collectives and the loop's in a different order on each rank): it raises in the rank,
# counted in the ranks' own wait, not in the run's whole time, which a loaded machine
# stretches (gloo's own default is 30 min).
TRAIN_COLLECTIVE_TIMEOUT = timedelta(seconds=60)


def say_failed(rank: int, exc: BaseException, started: float) -> None:
    """What ended this rank's DCP call with `exc`, its cause, and after how long."""
    cause = exc.__cause__
    say(
        rank=rank,
        failed=f"{type(exc).__name__}: {exc}",
        cause=None if cause is None else f"{type(cause).__name__}: {cause}",
        seconds=time.monotonic() - started,
    )


def main() -> None:
    rank, world, mode, url = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    if mode == "train":
        dist.init_process_group(
            "gloo", rank=rank, world_size=world, timeout=TRAIN_COLLECTIVE_TIMEOUT
        )
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    store = CheckpointStore(url)
    if mode == "save":
        step = int(sys.argv[5])
        state = {"model": sharded(expected(step), mesh), "step": step}
        generation = save_dcp(store, step, state, metadata={"world": world})
        say(rank=rank, saved=generation.step, files=sorted(generation.files))
    elif mode == "async":
        step, mib = int(sys.argv[5]), int(sys.argv[6])
        rows = (mib << 20) // (33 * 4)
        if rank == 0 and sys.argv[7:]:
            store = CheckpointStore(backend=HeldShards(store.backend, Path(sys.argv[7])))
        state = {"model": sharded(expected(step, rows), mesh), "step": step}
        handle = async_save_dcp(store, step, state)
        say(rank=rank, started=step)
        generation = handle.commit()
        say(rank=rank, saved=generation.step)
    elif mode == "exit":
        step, lead = int(sys.argv[5]), float(sys.argv[6])
        guard = CheckpointGuard(
            notices=False, handle_signals=False, flag_file=None, store=store, agree=False
        )
        now = datetime.now(timezone.utc)
        guard._on_event(
            Event(
                id=f"aws/terminate/{rank}",
                seq=1,
                action="terminate",
                reason="spot-interruption",
                provider="aws",
                deadline=now + timedelta(seconds=lead),
                noticed_at=now,
                sent_at=now,
            )
        )
        state = {"model": sharded(expected(step), mesh), "step": step}
        started = time.monotonic()
        try:
            # As ForewarnCallback(store=, dcp=True) and a loop of its own (the DCP example)
            # save for an exit.
            generation = save_dcp(store, step, state, timeout=guard.exit_save_timeout())
        except BaseException as exc:  # DCP's CheckpointException is a BaseException
            say(
                rank=rank, failed=f"{type(exc).__name__}: {exc}", seconds=time.monotonic() - started
            )
        else:
            say(rank=rank, saved=generation.step, seconds=time.monotonic() - started)
    elif mode == "partfail":
        step = int(sys.argv[5])
        if rank == 1:
            store = CheckpointStore(backend=UnwritableParts(store.backend))
        state = {"model": sharded(expected(step), mesh), "step": step}
        started = time.monotonic()
        try:
            save_dcp(store, step, state)
        except BaseException as exc:
            failed = f"{type(exc).__name__}: {exc}"
            say(rank=rank, failed=failed, seconds=time.monotonic() - started)
        else:
            say(rank=rank, saved=step, seconds=time.monotonic() - started)
    elif mode == "odd":
        step = int(sys.argv[5])
        how, kind, faulty, suffix = sys.argv[6:10]
        started = time.monotonic()
        try:
            if how in ("load", "verify", "fetch"):
                if rank == int(faulty) and how == "load":
                    raise_on_read(kind, suffix)
                elif rank == int(faulty):
                    raise_on_check(kind, suffix, "verify_file" if how == "verify" else "get_dir")
                generation = store.latest()
                assert generation is not None
                state = {"model": sharded(expected(generation.step), mesh), "step": -1}
                load_dcp(generation, state)
            else:
                if rank == int(faulty):
                    store = CheckpointStore(backend=OddErrors(store.backend, kind, suffix))
                state = {"model": sharded(expected(step), mesh), "step": step}
                if how == "async":
                    async_save_dcp(store, step, state).commit()
                else:
                    save_dcp(store, step, state)
        except BaseException as exc:  # DCP's CheckpointException is a BaseException
            say_failed(rank, exc, started)
        else:
            say(rank=rank, ended=how, seconds=time.monotonic() - started)
    elif mode == "stateful":
        step = int(sys.argv[5])
        how, kind, faulty = sys.argv[6:9]
        fail = kind if rank == int(faulty) else None
        started = time.monotonic()
        try:
            if how == "load":
                generation = store.latest()
                assert generation is not None
                target = sharded(expected(generation.step), mesh)
                load_dcp(generation, {"model": target, "progress": Progress(-1, fail)})
            else:
                state = {"model": sharded(expected(step), mesh), "progress": Progress(step, fail)}
                if how == "async":
                    async_save_dcp(store, step, state).commit()
                else:
                    save_dcp(store, step, state)
        except BaseException as exc:  # DCP's CheckpointException is a BaseException
            say_failed(rank, exc, started)
        else:
            say(rank=rank, ended=how, seconds=time.monotonic() - started)
    elif mode == "train":
        # The training loop goes on while DCP writes, with its own collectives on the default
        # group, as between `async_save_dcp` and `commit()` in a real job.
        saved, sums_ok = [], True
        for step in (10, 20, 30):
            handle = async_save_dcp(store, step, {"model": sharded(expected(step, 8192), mesh)})
            rounds = 0
            while rounds < 200 or not handle.done():
                grads = torch.full((64,), float(rank + 1))
                dist.all_reduce(grads)
                sums_ok = sums_ok and bool(torch.all(grads == world * (world + 1) / 2))
                rounds += 1
            saved.append(handle.commit().step)
        say(rank=rank, saved=saved, sums_ok=sums_ok)
    else:
        hashed: list[str] = []
        if sys.argv[5:] == ["sizes"]:  # count the files this rank hashes to load
            from forewarn.clients.checkpoint import generation as module

            real = module.digest_stream

            def counting(stream: Any, *args: Any, **kwargs: Any) -> Any:
                hashed.append(str(getattr(stream, "name", "?")))
                return real(stream, *args, **kwargs)

            module.digest_stream = counting  # type: ignore[assignment]
        generation = store.latest(verify="sizes" if sys.argv[5:] == ["sizes"] else "checksums")
        assert generation is not None
        step = generation.step
        target = {name: torch.zeros_like(t) for name, t in expected(step).items()}
        state = {"model": sharded(target, mesh), "step": -1}
        load_dcp(generation, state)
        full = {name: t.full_tensor() for name, t in state["model"].items()}  # type: ignore[attr-defined]
        same = all(torch.equal(full[name], t) for name, t in expected(step).items())
        local = state["model"]["weight"].to_local().shape[0]  # type: ignore[index]
        say(
            rank=rank,
            loaded=step,
            step_value=state["step"],
            identical=same,
            local_rows=local,
            hashed=hashed,
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Every rank has said its line (flushed) and left the process group cleanly. Leave without
    # interpreter finalization: in two full runs under load, one rank of a finished job died in
    # it with "terminate called without an active exception" (SIGABRT, no traceback), gloo's
    # C++ threads being torn down at exit, which PyTorch tracks upstream. The test judges what
    # each rank said, and the exit status should report that, not torch's teardown order.
    os._exit(0)
