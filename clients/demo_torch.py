"""A small but real torch training job, for the realistic reclaim drill and its benchmark.

Run under torchrun (gloo on CPU):

    torchrun --nproc-per-node 2 -m forewarn.clients.demo_torch --dir /tmp/ckpt --steps 400

Each rank trains a small MLP wrapped in DistributedDataParallel, fed by a DataLoader with
worker processes, with an evaluation pass every `--eval-every` steps whose batches take
`--eval-batch-time` seconds each in the workers (I/O-bound evaluation), and an optional long
first step (`--first-step-time`: compile or data warm-up). Checkpoints go to a
`CheckpointStore` (model, optimizer and RNG states, one file per rank).

`--handler guard` (default) is forewarn's way: `CheckpointGuard` with agent notices, signals,
rank agreement, `due_in_eval` inside evaluation and `worker_init_fn()` in the DataLoaders.
`--handler plain` is the baseline, what PyTorch Lightning (2.x) does by itself: a SIGTERM
handler that sets a flag (`trainer.received_sigterm`), checked after each training step
(agreed across ranks) and after each evaluation batch (on the rank alone); once set, the job
exits without a checkpoint (Lightning raises `SIGTERMException`, and its `ModelCheckpoint`
does not save on it). Only the periodic saves survive, as with transformers' `Trainer`, which
has no SIGTERM handler at all (`save_steps`). Plain DataLoaders.

With the guard a job stopped for a reclaim exits with `guard.exit_code` (143) after its save,
so that torchrun, systemd or a Kubernetes Job restarts it; 0 once its steps are done.

Rank 0 prints one JSON object per line: `started`, `step`, `eval_start`, `eval_end`,
`saving` (with the state hash about to be written), `saved`, `exit`, `done`, each with `t`
(wall clock). The state hash covers every parameter and optimizer buffer, so a resume that
does not restore the exact bytes shows up as a different hash.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from .checkpoint.errors import ExtraMissingError
from .checkpoint.needs import needs

_say_lock = threading.Lock()
RANK = 0


def say(event: str, **fields: Any) -> None:
    if RANK != 0:
        return
    line = json.dumps({"event": event, "t": time.time(), **fields}) + "\n"
    with _say_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m forewarn.clients.demo_torch")
    parser.add_argument("--dir", required=True, help="checkpoint store (path or URL)")
    parser.add_argument("--steps", type=int, default=400, help="train until this step")
    parser.add_argument("--step-time", type=float, default=0.05, help="extra seconds per step")
    parser.add_argument("--first-step-time", type=float, default=0.0, help="extra seconds, step 1")
    parser.add_argument("--eval-every", type=int, default=20, help="steps between evaluations")
    parser.add_argument("--eval-batches", type=int, default=16, help="batches per evaluation")
    parser.add_argument("--eval-batch-time", type=float, default=0.2, help="seconds per batch")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    parser.add_argument("--every-steps", type=int, default=None, help="periodic checkpoints")
    parser.add_argument("--flush-delay", type=float, default=0.0, help="slow storage: seconds")
    parser.add_argument("--agree-every", type=int, default=2, help="guard's agreement period")
    parser.add_argument("--handler", choices=("guard", "plain"), default="guard")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    global RANK
    args = parse(argv)
    try:
        needs("torch", "forewarn.clients.demo_torch")  # run as __main__
    except ExtraMissingError as error:
        # One line and exit 2, as the drill that runs this says a missing torch: the bare
        # `No module named 'torch'` traceback named neither the extra nor the command.
        print(f"forewarn: {error}", file=sys.stderr)
        return 2
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, Dataset

    from .checkpoint import CheckpointStore, load_training_state, save_training_state
    from .guard import CheckpointGuard
    from .workers import worker_init_fn

    dist.init_process_group("gloo")
    RANK = dist.get_rank()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    class Batches(Dataset[tuple[Any, Any]]):
        """Item i is the batch of global step i (or evaluation batch i) for this rank,
        generated from a seed: a resume reads exactly the batches it would have read."""

        def __init__(self, salt: int, delay: float) -> None:
            self.salt = salt
            self.delay = delay

        def __len__(self) -> int:
            return 1 << 30

        def __getitem__(self, index: int) -> tuple[Any, Any]:
            if self.delay:
                time.sleep(self.delay)
            generator = torch.Generator().manual_seed(
                (args.seed * 1_000_003 + index * 7919 + RANK * 104_729 + self.salt) % (1 << 62)
            )
            x = torch.randn(32, 64, generator=generator)
            return x, x[:, :8].sum(dim=1, keepdim=True)

    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def state_hash() -> str:
        digest = hashlib.sha256()
        for tensor in model.state_dict().values():
            digest.update(tensor.detach().numpy().tobytes())
        for state in optimizer.state_dict()["state"].values():
            for value in state.values():
                if torch.is_tensor(value):
                    digest.update(value.detach().numpy().tobytes())
        return digest.hexdigest()[:16]

    store = CheckpointStore(args.dir, keep=4)
    step, generation = 0, None
    # Through restore(): the store times it, and the guard reports that time (and no step
    # lost, from an exit's save) in its resume.
    latest = store.restore(
        lambda gen: load_training_state(gen, model=model, optimizer=optimizer),
        verify="checksums",
    )
    if latest is not None:
        step, generation = latest[1].step, latest[0].name
    resumed_at = step
    resumed_hash = state_hash()

    guard_mode = args.handler == "guard"
    init = worker_init_fn() if guard_mode else None
    train_loader = DataLoader(
        Batches(0, 0.0),
        batch_size=None,
        sampler=range(step, args.steps),
        num_workers=args.workers,
        worker_init_fn=init,
        prefetch_factor=2 if args.workers else None,
    )
    eval_loader = DataLoader(
        Batches(1 << 40, args.eval_batch_time),
        batch_size=None,
        sampler=range(args.eval_batches),
        num_workers=args.workers,
        worker_init_fn=init,
        generator=torch.Generator(),  # leaves the global RNG to training
    )

    def write(gen: Any) -> None:
        save_training_state(gen, model=model, optimizer=optimizer, extra={"step": gen.step})
        if args.flush_delay:
            time.sleep(args.flush_delay)  # slow storage: the commit comes after this

    guard: CheckpointGuard | None = None
    sigterm = {"seen": False}
    if guard_mode:
        guard = CheckpointGuard(
            every_steps=args.every_steps, store=store, agree_every=args.agree_every
        )
        if step:
            guard.resumed(step)
    else:

        def on_sigterm(signum: int, frame: object) -> None:
            sigterm["seen"] = True

        signal.signal(signal.SIGTERM, on_sigterm)
    # Said once the handlers are in place: from here a SIGTERM is the job's to handle.
    say("started", step=step, hash=resumed_hash, generation=generation, handler=args.handler)

    last_saved = {"step": step if latest is not None else -1}

    def save(reason_step: int) -> bool:
        """Save at `reason_step`; true when the job should exit."""
        last_saved["step"] = reason_step
        say("saving", step=reason_step, hash=state_hash())
        if guard is not None:
            result = guard.save(reason_step, write)
            say(
                "saved",
                step=reason_step,
                hash=state_hash(),
                seconds=result.flush_seconds,
                reasons=list(result.reasons),
                exit=result.exit,
            )
            return result.exit
        flushed = store.flush(reason_step, write)
        say(
            "saved",
            step=reason_step,
            hash=state_hash(),
            seconds=flushed.seconds,
            reasons=["periodic"],
            exit=False,
        )
        return False

    def plain_flag() -> bool:
        flag = torch.tensor([1 if sigterm["seen"] else 0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def evaluate() -> bool:
        """One evaluation pass; true when it was interrupted for a save-and-exit."""
        say("eval_start", step=step)
        model.eval()
        total = torch.zeros(1)
        with torch.no_grad():
            for batch, (x, y) in enumerate(eval_loader):
                if guard is not None and guard.due_in_eval(step):
                    say("eval_end", step=step, batches=batch, interrupted=True)
                    model.train()
                    return True
                if sigterm["seen"]:
                    say("eval_end", step=step, batches=batch, interrupted=True)
                    say("exit", step=step)
                    raise SystemExit(0)  # Lightning's SIGTERMException: no checkpoint
                total += torch.nn.functional.mse_loss(model(x), y)
        dist.all_reduce(total)
        model.train()
        say("eval_end", step=step, batches=args.eval_batches, interrupted=False)
        return False

    try:
        if guard is not None and guard.due(step) and save(step):
            say("exit", step=step)
            return guard.exit_code
        for x, y in train_loader:
            if step == resumed_at and args.first_step_time:
                time.sleep(args.first_step_time)  # compile, data warm-up
            if args.step_time:
                time.sleep(args.step_time)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            say("step", step=step)
            if guard is not None:
                if guard.due(step) and save(step):
                    say("exit", step=step)
                    # 143, as the README asks of a job: an exit 0 after the reclaim's save
                    # reads as done to torchrun, systemd and a Kubernetes Job.
                    return guard.exit_code
            else:
                if args.every_steps is not None and step % args.every_steps == 0:
                    save(step)
                if plain_flag():
                    say("exit", step=step)
                    return 0  # Lightning's SIGTERMException: no checkpoint
            evaluating = args.eval_every and step % args.eval_every == 0 and step < args.steps
            if evaluating and evaluate() and save(step):
                say("exit", step=step)
                return guard.exit_code if guard is not None else 0
        if last_saved["step"] != step:  # the same answer on every rank: the save is collective
            save(step)
        say("done", step=step, hash=state_hash())
    finally:
        if guard is not None:
            guard.close()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    sys.exit(main())
