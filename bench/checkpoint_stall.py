"""What a checkpoint costs the training loop: background saves against synchronous ones.

For a state of CPU tensors (1 GiB by default), saved to local disk and to an S3 server (moto
on loopback, or --endpoint), in the same run:

- plain in-memory copy of the tensors into buffers already allocated (the physical floor of
  any snapshot);
- synchronous save: `store.flush(step, torch.save(state) into the generation)`; the loop
  waits until it is committed, so its stall is its durable time;
- background save (`BackgroundSaver`): the stall is the snapshot, the durable time runs from
  the call until the generation is committed (the next save waits for it; between saves the
  loop would be training). Steady state: the first save allocates the buffers and is not
  counted.

Each store case starts on an empty target (every generation deleted, then `os.sync()`), and
the cases alternate their order. A background saver with `overlap=True` (the write starts while
the snapshot is copied) is shown beside the default one, without a goal: it trades stall for
durable time.
- local only: DCP through the store (`save_dcp`) against a plain `dcp.save` to a directory
  (one of each first, not counted: the first DCP save of a process sets DCP up).

Goals (issue 20): background stall <= 1.5x the plain copy and <= 10 % of the synchronous
stall; background durable time <= 1.05x synchronous; DCP through the store <= 1.1x plain DCP.
Figures are medians of --repeat runs; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

from checkpoint_commit import parse_size
from common import median, table
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.checkpoint.background import BackgroundSaver
from forewarn.clients.checkpoint.dcp import save_dcp
from forewarn.clients.checkpoint.testing import loopback_s3_env, moto_server


def make_state(size: int) -> dict[str, Any]:
    import torch

    # A model-like state: a few large tensors and some small ones.
    pieces = 8
    rows = size // pieces // (1024 * 4)
    state: dict[str, Any] = {f"layer{i}.weight": torch.randn(rows, 1024) for i in range(pieces)}
    state["step"] = torch.tensor(7)
    return state


def sync_write(state: dict[str, Any]) -> Any:
    import torch

    def write(gen: Any) -> None:
        with gen.open("state.pt") as stream:
            torch.save(state, stream)

    return write


def bench_store(
    where: str, make_store: Any, state: dict[str, Any], repeat: int, size: int
) -> list[list[Any]]:
    import torch

    buffers = {k: torch.empty_like(v) for k, v in state.items()}
    copies: list[float] = []
    syncs: list[float] = []
    stalls: list[float] = []
    durables: list[float] = []
    store = make_store()
    saver = BackgroundSaver(store)
    overlapping = BackgroundSaver(store, overlap=True)
    overlap_stalls: list[float] = []
    overlap_durables: list[float] = []
    step = 1
    for each in (saver, overlapping):
        step += 1
        each.save(step, state)  # allocates the buffers: not counted
        each.wait()

    def clear() -> None:
        # Each case starts on an empty target, the disk idle: the other case's output deleted
        # (in a VM, memory freed seconds ago may have gone back to the host, and the page
        # cache a case writes into costs several times more to fault in again: the case
        # that writes while another's output still holds the recently freed pages pays it).
        for old in store.steps():
            store.delete(old)
        os.sync()

    def synchronous() -> None:
        nonlocal step
        clear()
        step += 1
        started = time.perf_counter()
        store.flush(step, sync_write(state))
        syncs.append(time.perf_counter() - started)

    def background_with(saver: BackgroundSaver, stalls: list[float], durables: list[float]) -> None:
        nonlocal step
        clear()
        step += 1
        timing = saver.save(step, state)
        saver.wait()
        saver.check()
        stalls.append(timing.stall_seconds)
        assert saver.last is not None and saver.last.durable_seconds is not None
        durables.append(saver.last.durable_seconds)

    def background() -> None:
        background_with(saver, stalls, durables)

    def overlapped() -> None:
        background_with(overlapping, overlap_stalls, overlap_durables)

    for index in range(repeat):
        started = time.perf_counter()
        for key, value in state.items():
            buffers[key].copy_(value)
        copies.append(time.perf_counter() - started)
        # Alternate which case goes first.
        cases = [synchronous, background, overlapped]
        for case in cases if index % 2 == 0 else reversed(cases):
            case()
    clear()
    copy, sync, stall, durable = map(median, (copies, syncs, stalls, durables))
    # The durable time runs from the call; the write overlaps the snapshot. This row is the
    # time after the snapshot.
    after = median([d - s for d, s in zip(durables, stalls, strict=True)])
    overlap_stall, overlap_durable = median(overlap_stalls), median(overlap_durables)
    mb = size / 1e6
    return [
        [where, "plain in-memory copy (floor)", f"{copy:.3f}", f"{mb / copy:.0f}", "1.00", ""],
        [where, "synchronous save: stall = durable", f"{sync:.3f}", f"{mb / sync:.0f}", "", ""],
        [
            where,
            "background save: stall vs copy",
            f"{stall:.3f}",
            "",
            f"{stall / copy:.2f}",
            goal(stall / copy, 1.5),
        ],
        [
            where,
            "background save: stall vs synchronous",
            f"{stall:.3f}",
            "",
            f"{stall / sync:.2f}",
            goal(stall / sync, 0.10),
        ],
        [
            where,
            "background save: durable vs synchronous",
            f"{durable:.3f}",
            f"{mb / durable:.0f}",
            f"{durable / sync:.2f}",
            goal(durable / sync, 1.05),
        ],
        [
            where,
            "background save: its write alone (durable - stall)",
            f"{after:.3f}",
            f"{mb / after:.0f}",
            f"{after / sync:.2f}",
            "",
        ],
        [
            where,
            "background, overlap=True: stall vs copy",
            f"{overlap_stall:.3f}",
            "",
            f"{overlap_stall / copy:.2f}",
            "",
        ],
        [
            where,
            "background, overlap=True: durable vs synchronous",
            f"{overlap_durable:.3f}",
            f"{mb / overlap_durable:.0f}",
            f"{overlap_durable / sync:.2f}",
            "",
        ],
    ]


def bench_dcp(state: dict[str, Any], repeat: int, directory: Path, size: int) -> list[list[Any]]:
    import torch.distributed.checkpoint as dcp

    plain: list[float] = []
    through: list[float] = []

    def plain_save(index: int) -> float:
        target = directory / f"dcp-plain-{index}"
        os.sync()
        started = time.perf_counter()
        dcp.save(state, checkpoint_id=str(target), no_dist=True)
        seconds = time.perf_counter() - started
        shutil.rmtree(target)
        return seconds

    def store_save(index: int) -> float:
        root = directory / f"dcp-store-{index}"
        store = CheckpointStore(root)
        os.sync()
        started = time.perf_counter()
        save_dcp(store, 1, state)
        seconds = time.perf_counter() - started
        shutil.rmtree(root)
        return seconds

    # One of each first, not counted: the first DCP save in a process imports and sets up
    # much of torch.distributed.checkpoint.
    plain_save(-1)
    store_save(-1)
    for index in range(repeat):
        if index % 2 == 0:  # alternate which goes first
            plain.append(plain_save(index))
            through.append(store_save(index))
        else:
            through.append(store_save(index))
            plain.append(plain_save(index))
    base, ours = median(plain), median(through)
    mb = size / 1e6
    return [
        ["local", "plain dcp.save to a directory", f"{base:.3f}", f"{mb / base:.0f}", "1.00", ""],
        [
            "local",
            "save_dcp through the store",
            f"{ours:.3f}",
            f"{mb / ours:.0f}",
            f"{ours / base:.2f}",
            goal(ours / base, 1.1),
        ],
    ]


def goal(ratio: float, limit: float) -> str:
    return f"<= {limit:g} {'met' if ratio <= limit else 'NOT met'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="checkpoint_stall", description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("1G"), help="state (1G)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (3)")
    parser.add_argument(
        "--dir", type=Path, default=Path(tempfile.gettempdir()), help="where local runs write"
    )
    parser.add_argument("--no-local", action="store_true", help="skip local disk")
    parser.add_argument("--no-s3", action="store_true", help="skip S3")
    parser.add_argument("--endpoint", help="an S3 endpoint instead of moto on loopback")
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("checkpoint_stall needs torch (pip install '.[torch]')", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore", module="torch.distributed")
    load_before = os.getloadavg()
    state = make_state(args.size)
    size = sum(t.numel() * t.element_size() for t in state.values())
    rows: list[list[Any]] = []
    if not args.no_local:
        work = Path(tempfile.mkdtemp(prefix="forewarn-stall-", dir=args.dir))
        try:
            rows += bench_store(
                "local", lambda: CheckpointStore(work / "store"), state, args.repeat, size
            )
            rows += bench_dcp(state, args.repeat, work, size)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if not args.no_s3:
        saved = dict(os.environ)
        try:
            with moto_server() as local:
                endpoint = args.endpoint or local
                os.environ.update(loopback_s3_env(endpoint))
                import boto3

                bucket = f"stall-{uuid.uuid4().hex[:8]}"
                boto3.client("s3").create_bucket(Bucket=bucket)
                rows += bench_store(
                    "s3", lambda: CheckpointStore(f"s3://{bucket}/run"), state, args.repeat, size
                )
        finally:
            os.environ.clear()
            os.environ.update(saved)
    load_after = os.getloadavg()
    print(f"state: {size / (1 << 20):.0f} MiB of CPU tensors; median of {args.repeat} runs")
    # The machine may be shared: its load says how far to trust the figures.
    before, after = (
        " ".join(f"{value:.2f}" for value in load) for load in (load_before, load_after)
    )
    print(f"load average (1, 5, 15 min) before: {before}; after: {after}\n")
    print(table(["where", "case", "median s", "MB/s", "ratio", "goal"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
