"""`forewarn drill local --scenario NAME`: reclaims as platforms really do them.

A small torch job (`forewarn.clients.demo_torch`: an MLP under DistributedDataParallel on CPU,
gloo, `torchrun --nproc-per-node 2`, DataLoaders with worker processes, an evaluation pass of
a few seconds) is reclaimed the way each platform does it:

- `systemd`: `KillMode=control-group`: SIGTERM to every process of the job, SIGKILL to what is
  left at `TimeoutStopSec` (the lead);
- `kubernetes`: SIGTERM to the container's PID 1 (torchrun), SIGKILL to everything after
  `terminationGracePeriodSeconds` (the lead);
- `cloud`: a notice with a lead, then SIGKILL of everything at the deadline, no SIGTERM
  (AWS, GCP);
- `torchrun`: SIGTERM to torchrun only; torchrun forwards it to each rank's process group and
  escalates to SIGKILL after its `--shutdown-timeout` (30 s unless set; here the lead);
- `torchrun-restart`: torchrun with `--max-restarts 1` (the c10d rendezvous, the shared store
  off); at the deadline SIGKILL to the processes under torchrun the notice found (ranks,
  DataLoader workers), not to torchrun, which restarts the ranks in place: the cell's loss is
  measured at that restart's resume, and the drill then ends the job.

Every reclaim also raises a terminate notice (deadline = now + lead, sent as a duration) on
that machine's agent, at a random moment of the chosen kind: during a training step, in the
middle of an evaluation pass, or during the (long) first step. Each run is one "machine": a
fresh agent with its own runtime and state directories; all share one checkpoint store, and
the next run resumes from it. The drill reports per cell the steps lost, the time from
notice to durable checkpoint, whether the resumed state is bit-for-bit the saved one, and
partial generations left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forewarn.protocol.errors import UsageError
from forewarn.protocol.notifydeadline import for_an_older_agent, seconds_fields
from forewarn.protocol.wire import request

from .argtypes import word_as_written
from .drill_limits import MAX_LEAD, MAX_SEED, count_within, seconds_within, written_bound
from .drill_local import Machine, json_objects
from .plan import ReclaimLoss, Timing, notice, reclaim_loss
from .reclaim_procs import JobTree, started_at, subreaper
from .tethered import tethered

RESTARTED = "torchrun-restart"
PLATFORMS = ("systemd", "kubernetes", "cloud", "torchrun", RESTARTED)
MOMENTS = ("mid-step", "mid-eval", "first-step")
SCENARIOS = ("quick", *PLATFORMS, "matrix", "ci")
START_TIMEOUT = 120.0  # torchrun, two ranks and their imports on a loaded 2-core machine
EVENT_TIMEOUT = 60.0
SHORT_LEAD = 0.3
SLOW_FLUSH = 1.5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The realistic drill's flags on `forewarn drill local`."""
    parser.add_argument(
        "--scenario",
        type=word_as_written,
        choices=SCENARIOS,
        default="quick",
        help="quick (default: the demo loop above), a platform (systemd, kubernetes, cloud, "
        "torchrun, torchrun-restart: that reclaim at each notice moment), matrix (all five, "
        "plus short leads), or ci (a reduced matrix)",
    )
    # A lead of 0 s sent every notice with its deadline already past: the agent refused each,
    # and the drill ran its cells on without one.
    parser.add_argument(
        "--lead",
        type=seconds_within(MAX_LEAD, zero=False),
        default=None,  # 8 s; None tells `drill local` the flag was not given
        help="time from notice to SIGKILL in the realistic scenarios, e.g. 8s (default 8s; "
        f"more than 0 and at most {written_bound(MAX_LEAD)})",
    )
    parser.add_argument(
        "--seed",
        type=count_within(0, MAX_SEED),
        default=None,
        help=f"seed of the random moments (0 to {MAX_SEED}; default: a random one, printed)",
    )
    parser.add_argument(
        "--handler",
        type=word_as_written,
        choices=("guard", "plain"),
        default=None,  # guard
        help="the job's handling: forewarn's guard (default), or plain: what Lightning does "
        "by itself (on SIGTERM it exits without a checkpoint; only periodic saves survive)",
    )


@dataclass(frozen=True)
class Cell:
    platform: str
    moment: str
    lead: float
    flush_delay: float = 0.0  # a slow store: seconds added to each flush

    @property
    def label(self) -> str:
        return f"{self.platform}/{self.moment}"


@dataclass
class CellResult:
    cell: Cell
    notice_at: float | None = None
    notice_step: int | None = None
    last_step: int = 0
    started_step: int = 0
    exit_save: dict[str, Any] | None = None
    flush: float | None = None
    resumed_step: int | None = None
    state_match: bool | None = None
    partial: list[str] = field(default_factory=list)
    strays: int = 0
    job_code: int | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    # For `forewarn plan`'s prediction: the mean flush, notice to the start of the exit save,
    # the newest checkpoint the job completed, and the training speed.
    flush_mean: float | None = None
    detection: float | None = None
    checkpoint_step: int | None = None
    steps_per_second: float | None = None
    every_steps: int | None = None
    # A `torchrun-restart` cell: the restarted ranks' `started` line (their resume), where
    # the cell's loss is measured; None where torchrun restarted nothing.
    restarted: dict[str, Any] | None = None

    @property
    def resumed_seconds(self) -> float | None:
        """From the notice to the restarted ranks' resume (a `torchrun-restart` cell)."""
        if self.restarted is None or self.notice_at is None:
            return None
        return float(self.restarted["t"]) - self.notice_at

    def timing(self) -> Timing | None:
        """The cell's measured timing as `forewarn plan` takes it (None without a flush).
        Rounded as `plan_command` prints them, so the command gives the same verdict."""
        if self.flush is None:
            return None
        mean = self.flush if self.flush_mean is None else self.flush_mean
        return Timing(
            checkpoint_seconds=round(mean, 2),
            checkpoint_p95_seconds=round(self.flush, 2),
            detection_seconds=round(self.detection_or_lead, 2),
            notice_lead_seconds=self.cell.lead,
        )

    @property
    def detection_or_lead(self) -> float:
        """Notice to the start of the exit save; the whole lead when none began within it
        (the notice was not acted on in time)."""
        return self.cell.lead if self.detection is None else self.detection

    @property
    def predicted(self) -> ReclaimLoss | None:
        """What `forewarn plan`'s model predicts for this cell's measured timing."""
        timing = self.timing()
        if timing is None or self.flush_mean is None or self.checkpoint_step is None:
            return None
        return reclaim_loss(timing, step=self.last_step, checkpoint_step=self.checkpoint_step)

    def plan_command(self) -> str:
        """The `forewarn plan` command that gives this cell's notice verdict."""
        assert self.flush is not None and self.flush_mean is not None
        detection = self.detection_or_lead
        command = (
            f"forewarn plan --checkpoint {self.flush_mean:.2f}s --checkpoint-p95 "
            f"{self.flush:.2f}s --detection {detection:.2f}s --notice-lead {self.cell.lead:g}s"
        )
        if self.every_steps and self.steps_per_second:
            command += (
                f" --interval-steps {self.every_steps} --steps-per-second "
                f"{self.steps_per_second:.3g}"
            )
        return command

    @property
    def lost(self) -> int | None:
        if self.resumed_step is None or self.resumed_step > self.last_step:
            # Past the last step the job reported: its lines were not all read, so how many
            # steps were lost is not known (it used to read as 0, a pass).
            return None
        return self.last_step - self.resumed_step

    @property
    def durable_seconds(self) -> float | None:
        if self.exit_save is None or self.notice_at is None:
            return None
        return float(self.exit_save["t"]) - self.notice_at

    @property
    def lead_is_enough(self) -> bool:
        """The lead covers detection and the flush's p95, by `forewarn plan`'s own rule
        (`notice`). Twice the flush was the rule here: a 4 s lead, a flush of 1.5 s begun 3 s
        after the notice, 9 steps lost read "FAILED ... although the lead was enough" beside
        a plan command that predicted those 9 steps."""
        # Only a measured flush can show the lead was short: with none (no save completed in
        # the cell) a loss was excused as "the SIGKILL came before the save was durable" and
        # the cell passed, 10 steps lost with an 8 s lead.
        timing = self.timing()
        return timing is None or notice(timing).usable

    @property
    def ok(self) -> bool:
        if self.error or self.strays or self.state_match is False or self._unaccounted:
            return False
        if self.lead_is_enough:
            return self.lost == 0
        # A short lead may lose steps, exactly as many as the plan's model says.
        predicted = self.predicted
        return predicted is None or self.lost is None or self.lost == predicted.steps

    @property
    def _unaccounted(self) -> bool:
        return self.resumed_step is not None and self.resumed_step > self.last_step

    def outcome(self) -> str:
        if self.error:
            return f"FAILED: {self.error}"
        if self._unaccounted:
            return (
                f"FAILED: resumed from step {self.resumed_step}, after the last step the job "
                f"reported ({self.last_step}): steps lost unknown"
            )
        if self.state_match is False:
            return "FAILED: the resumed state differs from the saved one"
        if self.strays:
            return f"FAILED: {self.strays} process(es) left behind"
        if self.lost == 0:
            return "ok"
        if self.lead_is_enough:
            if self.flush is None:
                return (
                    f"FAILED: {self.lost} steps lost; no save completed in this cell, so the "
                    f"lead ({self.cell.lead:g}s) is not shown to be too short"
                    + (f" (job exit code {self.job_code})" if self.job_code else "")
                )
            return (
                f"FAILED: {self.lost} steps lost although the lead {self.cell.lead:g}s covers "
                f"detection {self.detection_or_lead:.2f}s + flush {self.flush:.2f}s"
            )
        why = (
            f"lead {self.cell.lead:g}s < detection {self.detection_or_lead:.2f}s + flush "
            f"{self.flush:.2f}s: the SIGKILL came before the save was durable; resumed from "
            "the last complete generation "
            f"(step {self.resumed_step})"
        )
        if self.partial:
            why += f"; the partial generation {', '.join(self.partial)} was not used"
        predicted = self.predicted
        if predicted is not None:
            verdict = "as" if predicted.steps == self.lost else "FAILED: not as"
            why += (
                f"; {verdict} `forewarn plan` predicts: {predicted.why} (last step "
                f"{self.last_step}, last completed checkpoint step {self.checkpoint_step}; "
                f"`{self.plan_command()}`)"
            )
        return f"{self.lost} steps lost: {why}"


def matrix(scenario: str, lead: float) -> list[Cell]:
    if scenario in PLATFORMS:
        return [Cell(scenario, moment, lead) for moment in MOMENTS]
    if scenario == "matrix":
        cells = [Cell(p, m, lead) for p in PLATFORMS for m in MOMENTS]
        return cells + [
            Cell("cloud", moment, SHORT_LEAD, SLOW_FLUSH) for moment in ("mid-step", "mid-eval")
        ]
    if scenario == "ci":
        return [
            Cell("systemd", "mid-eval", lead),
            Cell("kubernetes", "first-step", lead),
            Cell("cloud", "mid-step", lead),
            Cell("torchrun", "mid-eval", lead),
            Cell(RESTARTED, "mid-eval", lead),
            Cell("cloud", "mid-step", SHORT_LEAD, SLOW_FLUSH),
        ]
    raise ValueError(f"unknown scenario {scenario!r}")


def machines_for(args: argparse.Namespace) -> int:
    """How many machines a drill starts: the quick drill two, a scenario one per cell and one
    for the final resume. Here, beside `matrix`: drill_local, which this module builds on,
    cannot import it back."""
    scenario = getattr(args, "scenario", "quick")
    if scenario == "quick":
        return 2
    return len(matrix(scenario, args.lead)) + 1


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# torch 2.13's torchrun (its c10d rendezvous, as its static one) shares its TCPStore with the
# ranks and keeps it across a `--max-restarts` restart, no key telling one attempt from the
# next: restarted gloo ranks read the first attempt's addresses and fail in connectFullMesh
# (`Connection refused`; static: they hang). Without the shared store (this variable, heeded
# by the c10d rendezvous alone) rank 0 serves a fresh store each attempt.
RESTARTABLE_TORCHRUN_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def _rendezvous(max_restarts: int) -> list[str]:
    """torchrun's rendezvous options: the c10d rendezvous on 127.0.0.1 for a job torchrun
    restarts (with `RESTARTABLE_TORCHRUN_ENV`), else the static one on a fixed port."""
    port = str(_free_port())
    if max_restarts:
        endpoint = f"127.0.0.1:{port}"
        return [
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            endpoint,
            "--max-restarts",
            str(max_restarts),
        ]
    return ["--master-addr", "127.0.0.1", "--master-port", port]


class Job:
    """One torchrun job: its own session (a platform signals it, not the terminal), rank 0's
    JSON lines read on a thread. Start it on the main thread: the kernel's signal to a
    tethered child comes when the thread that started it ends."""

    STEP_TIME = 0.05
    EVAL_EVERY = 20
    EVAL_BATCHES = 24
    EVAL_BATCH_TIME = 0.2
    FIRST_STEP_TIME = 2.0
    EVERY_STEPS = 10

    def __init__(
        self,
        store: Path,
        env: dict[str, str],
        log: Path,
        *,
        handler: str,
        shutdown_timeout: float,
        exclude: set[int],
        first_step_time: float = 0.0,
        flush_delay: float = 0.0,
        steps: int = 1_000_000,
        every_steps: int | None = EVERY_STEPS,
        max_restarts: int = 0,
    ) -> None:
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc-per-node",
            "2",
            *_rendezvous(max_restarts),
            "--shutdown-timeout",
            str(max(1, round(shutdown_timeout))),
            "-m",
            "forewarn.clients.demo_torch",
            *("--dir", str(store), "--steps", str(steps)),
            *("--step-time", str(self.STEP_TIME), "--eval-every", str(self.EVAL_EVERY)),
            *("--eval-batches", str(self.EVAL_BATCHES)),
            *("--eval-batch-time", str(self.EVAL_BATCH_TIME)),
            *("--first-step-time", str(first_step_time), "--flush-delay", str(flush_delay)),
            *("--handler", handler),
        ]
        if every_steps:
            argv += ["--every-steps", str(every_steps)]
        job_env = dict(env, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        if max_restarts:
            job_env.update(RESTARTABLE_TORCHRUN_ENV)
        self.log = log.open("w")
        # Tethered, as the drill's agents are: a drill killed outright (kill -9) left the job
        # training until rank 0's next line broke its pipe, which a rank still importing torch
        # or in a long first step does not write for a while. torchrun, its leader, now gets
        # SIGTERM and ends its ranks. Its own session is made by the launcher, before the exec.
        self.proc = subprocess.Popen(
            tethered(argv),
            env=job_env,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            start_new_session=True,
        )
        self.tree = JobTree(self.proc.pid, exclude)
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.step = 0
        self._start_reading()

    def _start_reading(self) -> None:
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for event in json_objects(self.proc.stdout):
            if "event" not in event:
                continue
            if event["event"] in ("started", "step", "saved"):
                self.step = max(self.step, int(event["step"]))
            self.seen.append(event)
            self.events.put(event)

    def until(self, kind: str, timeout: float = EVENT_TIMEOUT, **match: Any) -> dict[str, Any]:
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the job said no {kind!r} within {timeout:g}s")
            try:
                event = self.events.get(timeout=min(left, 0.5))
            except queue.Empty:
                if self.proc.poll() is not None and self.events.empty():
                    raise TimeoutError(
                        f"the job exited (code {self.proc.returncode}) before {kind!r}"
                    ) from None
                continue
            if event["event"] == kind and all(event.get(k) == v for k, v in match.items()):
                return event

    def alive(self) -> bool:
        """Whether any process of the job is left: in its tree (ranks in their own sessions,
        orphans re-parented to the drill) or in its process group. The top process is reaped
        first: ended and unreaped, it still answered the group's signal 0, and a loop on this
        alone saw a job alive that had exited (GCP's 30 s, where it had ended in 3 s)."""
        self.proc.poll()
        if self.tree.live():
            return True
        try:
            os.killpg(self.proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def kill(self) -> None:
        """SIGKILL to every process of the job, as a machine going away does."""
        self.tree.signal(signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def close(self) -> None:
        self.kill()
        self.tree.wait_gone(5)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        # The job's last lines may still be in the pipe: the cell's last step and exit save
        # are read from them right after this, and a step counted short is a loss not seen.
        self._reader.join(timeout=EVENT_TIMEOUT)
        self.log.close()


def _partial_generations(store: Path) -> list[str]:
    """Generation directories without a commit marker (what a kill mid-flush leaves)."""
    if not store.is_dir():
        return []
    return sorted(
        entry.name
        for entry in store.iterdir()
        if entry.is_dir() and entry.name.startswith("step-") and not (entry / "COMMIT").exists()
    )


def _complete_steps(store: Path) -> list[int]:
    if not store.is_dir():
        return []
    return sorted(
        int(entry.name.removeprefix("step-"))
        for entry in store.iterdir()
        if entry.is_dir() and entry.name.startswith("step-") and (entry / "COMMIT").exists()
    )


class Reclaim:
    """Runs cells one after another, each on a fresh machine, all on one checkpoint store."""

    def __init__(
        self,
        work: Path,
        base_env: dict[str, str],
        *,
        handler: str = "guard",
        seed: int | None = None,
        say: Any = print,
        every_steps: int = Job.EVERY_STEPS,
        skip_saved_evals: bool = False,
    ) -> None:
        self._machine = Machine
        self.every_steps = every_steps
        # Put mid-evaluation notices only in a pass that does not directly follow a save: in
        # one that does, the state is durable already and any handling loses nothing.
        self.skip_saved_evals = skip_saved_evals
        self.work = work
        self.base_env = base_env
        self.handler = handler
        self.random = random.Random(seed)
        self.say = say
        self.store = work / "checkpoints"
        self.hashes: dict[int, str] = {}  # step -> state hash when its save began
        self.results: list[CellResult] = []
        self.machines = 0

    def _new_machine(self) -> Any:
        self.machines += 1
        return self._machine(self.work, "local", self.base_env, f"machine-{self.machines}")

    def _job(self, machine: Any, cell: Cell | None, **options: Any) -> Job:
        exclude = {machine.agent.pid}
        lead = cell.lead if cell is not None else 30.0
        return Job(
            self.store,
            machine.env,
            self.work / f"job-{self.machines}.log",
            handler=self.handler,
            shutdown_timeout=lead if cell is not None and cell.platform == "torchrun" else 30,
            exclude=exclude,
            first_step_time=(
                Job.FIRST_STEP_TIME if cell is not None and cell.moment == "first-step" else 0.0
            ),
            flush_delay=cell.flush_delay if cell is not None else 0.0,
            max_restarts=1 if cell is not None and cell.platform == RESTARTED else 0,
            **{"every_steps": self.every_steps, **options},
        )

    def _resumed(self, started: dict[str, Any]) -> None:
        """Check the new run's resume against the previous cell."""
        if started.get("generation") is None and int(started["step"]) == 0:
            # A start from scratch (no generation yet): the seeded initial state.
            self.hashes.setdefault(0, str(started["hash"]))
        if not self.results:
            return
        previous = self.results[-1]
        if previous.restarted is not None:
            # Its loss was measured at torchrun's restart; this resume follows the drill's
            # end of the restarted job, no reclaim: only that it took the newest generation.
            error = self._not_newest(int(started["step"]))
            if error is not None:
                previous.error = previous.error or error
            return
        self._check_resume(previous, started, f"on machine {self.machines}")

    def _check_resume(self, result: CellResult, started: dict[str, Any], where: str) -> None:
        """A resume (`started`) against the cell before it: the step, the state's hash and
        the newest complete generation."""
        step = int(started["step"])
        result.resumed_step = step
        expected = self.hashes.get(step)
        result.state_match = expected is not None and expected == started["hash"]
        error = self._not_newest(step)
        if error is not None:
            result.error = error
        self.say(
            f"  resumed from step {step} {where}: state "
            + ("identical" if result.state_match else "DIFFERS")
            + f"; {result.outcome()}"
        )

    def _not_newest(self, step: int) -> str | None:
        complete = [s for s in _complete_steps(self.store) if s not in self._partial_steps()]
        newest = max(complete) if complete else 0
        if step != newest:
            return f"resumed from step {step}, the newest complete generation is {newest}"
        return None

    def _partial_steps(self) -> set[int]:
        return {int(name.removeprefix("step-")) for name in _partial_generations(self.store)}

    def _record(self, job: Job, events: list[dict[str, Any]] | None = None) -> None:
        for event in job.seen if events is None else events:
            if event["event"] == "saving":
                self.hashes[int(event["step"])] = str(event["hash"])

    def run(self, cells: list[Cell]) -> list[CellResult]:
        with subreaper():  # orphans of the jobs come back to the drill, which reaps them
            for cell in cells:
                self.results.append(self._run_cell(cell))
            self._final_resume()
        return self.results

    def _final_resume(self) -> None:
        machine = self._new_machine()
        job: Job | None = None
        try:
            job = self._job(machine, None, steps=0, every_steps=None)
            started = job.until("started", START_TIMEOUT)
            self._resumed(started)
            job.until("done")
            job.proc.wait(EVENT_TIMEOUT)
        except TimeoutError as error:
            if self.results:
                self.results[-1].error = f"the final resume failed: {error}"
        finally:
            if job is not None:
                job.close()
            machine.stop()

    def _run_cell(self, cell: Cell) -> CellResult:
        result = CellResult(cell)
        partial_before = set(_partial_generations(self.store))
        machine = self._new_machine()
        try:
            job = self._job(machine, cell)
        except BaseException:
            machine.stop()
            raise
        interrupted = False
        self.say(
            f"cell {len(self.results) + 1}: {cell.platform} reclaim, notice {cell.moment}, "
            f"lead {cell.lead:g}s"
            + (f", slow store +{cell.flush_delay:g}s" if cell.flush_delay else "")
        )
        try:
            started = job.until("started", START_TIMEOUT)
            result.started_step = int(started["step"])
            self._resumed(started)
            self._wait_for_moment(job, cell, result)
            self._reclaim(machine, job, cell, result)
        except TimeoutError as error:
            result.error = str(error)
        except BaseException:
            interrupted = True  # the job is still training: end it now, not after 10 s
            raise
        finally:
            result.strays = 0 if interrupted else len(job.tree.wait_gone(10))
            if result.strays:
                result.error = result.error or f"{result.strays} process(es) left behind"
            job.close()
            machine.stop()
            self._record(job)
            # A restarted job's cell is its first attempt's: the loss up to the restart, the
            # save that answered the notice; what the restarted ranks did is not the reclaim's.
            seen = _before(job.seen, result.restarted)
            result.last_step = _last_step(seen) if result.restarted is not None else job.step
            result.job_code = job.proc.returncode
            # A save at the already durable step writes nothing (0 s): not a flush.
            saves = [e for e in seen if e["event"] == "saved" and (e.get("seconds") or 0) > 0]
            exits = [e for e in seen if e["event"] == "saved" and e.get("exit")]
            result.exit_save = exits[-1] if exits else None
            if saves:
                result.flush = max(float(e["seconds"]) for e in saves)
                result.flush_mean = sum(float(e["seconds"]) for e in saves) / len(saves)
            if cell.flush_delay and result.flush is None:
                result.flush = result.flush_mean = cell.flush_delay
            self._plan_inputs(seen, result)
            result.partial = [
                name for name in _partial_generations(self.store) if name not in partial_before
            ]
        durable = result.durable_seconds
        self.say(
            f"  notice at step {result.notice_step}; "
            + (
                f"durable checkpoint at step {result.exit_save['step']} {durable:.2f}s later"
                if result.exit_save is not None and durable is not None
                else "no checkpoint after the notice"
            )
            + f"; last step {result.last_step}; job exit code {result.job_code}"
        )
        resumed = result.resumed_seconds
        if result.restarted is not None and resumed is not None:
            self.say(f"  torchrun restarted the ranks: resumed {resumed:.2f}s after the notice")
        return result

    def _plan_inputs(self, seen: list[dict[str, Any]], result: CellResult) -> None:
        """What the plan's model needs, from the job's own lines (not from the resume, which
        is what the prediction is checked against)."""
        completed = [int(e["step"]) for e in seen if e["event"] == "saved"]
        result.checkpoint_step = max([result.started_step, *completed])
        result.every_steps = self.every_steps
        if result.notice_at is not None:
            starts = [
                float(e["t"])
                for e in seen
                if e["event"] == "saving" and float(e["t"]) >= result.notice_at
            ]
            lead_end = result.notice_at + result.cell.lead
            if starts and starts[0] <= lead_end:
                result.detection = starts[0] - result.notice_at
        steps = [(float(e["t"]), int(e["step"])) for e in seen if e["event"] == "step"]
        if len(steps) >= 2 and steps[-1][0] > steps[0][0]:
            result.steps_per_second = (steps[-1][1] - steps[0][1]) / (steps[-1][0] - steps[0][0])

    def _wait_for_moment(self, job: Job, cell: Cell, result: CellResult) -> None:
        pick = self.random
        if cell.moment == "first-step":
            time.sleep(pick.uniform(0.2, 0.6) * Job.FIRST_STEP_TIME)
        elif cell.moment == "mid-eval":
            while True:
                start = job.until("eval_start")
                saved_here = any(
                    e["event"] == "saved" and e["step"] == start["step"] for e in job.seen
                )
                if not (self.skip_saved_evals and saved_here):
                    break
            duration = Job.EVAL_BATCHES * Job.EVAL_BATCH_TIME / 2
            time.sleep(pick.uniform(0.25, 0.6) * duration)
        else:
            if cell.flush_delay:
                job.until("saved")  # a periodic generation exists to fall back on
            target = job.step + pick.randint(3, 8)
            while target % Job.EVAL_EVERY in (0, Job.EVAL_EVERY - 1, Job.EVAL_EVERY - 2):
                target += 1
            while job.step < target:
                job.until("step")
            time.sleep(pick.uniform(0, Job.STEP_TIME))

    def _reclaim(self, machine: Any, job: Job, cell: Cell, result: CellResult) -> None:
        # The notice's clock starts when it is sent, as its deadline does: on a loaded machine
        # the agent's answer came after the 2 s default ("no agent answered ... within 2s",
        # the cell failed although the notice was out) and the lead was counted from it.
        result.notice_at = time.time()
        result.notice_step = job.step
        started = time.monotonic()
        kill_at = started + cell.lead
        # The lead as a duration: the agent counts it on the boot clock, as the drill's own
        # kill below counts it on the monotonic clock, so a step of the wall clock during the
        # cell moves the terminate's deadline with the kill (a fixed time stayed behind).
        notice: dict[str, Any] = {"op": "notify", "action": "terminate", "reason": "drill"}
        notice.update(seconds_fields(cell.lead), note=f"reclaim drill {cell.label}")
        reply = request(machine.control, notice, EVENT_TIMEOUT)
        older = for_an_older_agent(notice, reply)
        if older is not None:  # an agent older than `deadline_in`: the time alone
            reply = request(machine.control, older, EVENT_TIMEOUT)
        if not reply.get("ok"):
            raise TimeoutError(f"the agent refused the terminate: {reply.get('error')}")
        if cell.platform == RESTARTED:
            self._reclaim_ranks(job, result, kill_at)
            return
        if cell.platform == "systemd":
            job.tree.signal(signal.SIGTERM)
        elif cell.platform in ("kubernetes", "torchrun"):
            os.kill(job.proc.pid, signal.SIGTERM)
        deadline_at = kill_at
        if cell.platform == "torchrun":
            kill_at += 15  # torchrun escalates by itself; this only bounds a broken run
        while job.proc.poll() is None and time.monotonic() < kill_at:
            time.sleep(0.02)
        if job.proc.poll() is None:
            if cell.platform == "torchrun":
                result.notes.append("torchrun did not end its ranks; the drill killed them")
            elif job.tree.live() == [job.proc.pid]:
                # Every rank had saved and exited: what the SIGKILL cut short was torchrun's
                # own exit (its final garbage collection, 2.6-4.6 s on a loaded 2-core
                # machine), which shows as "job exit code -9".
                result.notes.append(
                    "torchrun outlived its ranks, which had all exited, until the SIGKILL: "
                    "its own exit took longer than the rest of the lead"
                )
        else:
            # What outlives torchrun (a rank still flushing, a worker) is killed at the
            # deadline as the machine would, not given 10 s more to finish its save.
            while time.monotonic() < deadline_at and job.alive():
                time.sleep(0.05)
            if job.alive():
                result.notes.append("processes outlived the job's main process until the deadline")
        job.kill()
        job.proc.wait(30)

    def _reclaim_ranks(self, job: Job, result: CellResult, kill_at: float) -> None:
        """`torchrun-restart`: SIGKILL at the deadline to what is left of the processes under
        torchrun at the notice (a rank that saved and exited is gone already), torchrun
        spared; it restarts the ranks, whose resume is checked here, then the job ends."""
        attempt = {
            pid: started_at(pid) for pid in job.tree.live() if pid != job.proc.pid
        }  # pids with their start times: the restarted ranks may reuse a pid

        def left() -> list[int]:
            return [pid for pid, since in attempt.items() if since and started_at(pid) == since]

        while left() and time.monotonic() < kill_at:
            time.sleep(0.05)
        if left():
            job.tree.signal(signal.SIGKILL, left())
        try:
            restarted = job.until("started", START_TIMEOUT)
        except TimeoutError as error:
            raise TimeoutError(f"torchrun did not restart the ranks: {error}") from None
        result.restarted = restarted
        self._record(job, _before(job.seen, restarted))
        self._check_resume(result, restarted, "after torchrun's restart")
        job.kill()
        job.proc.wait(30)


def _before(seen: list[dict[str, Any]], event: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The job's lines before `event` (all of them without one)."""
    if event is None:
        return list(seen)
    return seen[: next(i for i, e in enumerate(seen) if e is event)]


def _last_step(seen: list[dict[str, Any]]) -> int:
    return max(
        (int(e["step"]) for e in seen if e["event"] in ("started", "step", "saved")), default=0
    )


def report(results: list[CellResult], say: Any = print) -> None:
    header = (
        f"{'cell':<26} {'lead':>6} {'flush':>7} {'notice->durable':>16} {'steps lost':>11} "
        f"{'state':>10}  outcome"
    )
    say(header)
    say("-" * len(header))
    for result in results:
        durable = result.durable_seconds
        say(
            f"{result.cell.label:<26} {result.cell.lead:>5g}s "
            + (f"{result.flush:>6.2f}s " if result.flush is not None else f"{'-':>7} ")
            + (f"{durable:>15.2f}s " if durable is not None else f"{'none':>16} ")
            + (f"{result.lost:>11} " if result.lost is not None else f"{'?':>11} ")
            + f"{ ({True: 'identical', False: 'DIFFERS', None: '-'}[result.state_match]):>10}  "
            + result.outcome()
        )
        # What the drill had to do in the cell (kill ranks torchrun left, processes that
        # outlived the job): recorded and, until printed here, never shown.
        for note in result.notes:
            say(f"{'':<26} note: {note}")
        resumed = result.resumed_seconds
        if result.restarted is not None and resumed is not None:
            say(
                f"{'':<26} restarted: torchrun restarted the ranks, resumed from step "
                f"{result.restarted['step']} {resumed:.2f}s after the notice"
            )


def _torch_installed() -> bool:
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def run_reclaim_drill(args: argparse.Namespace, work: Path, base_env: dict[str, str]) -> int:
    # The job runs under torchrun: without torch every cell failed as "the job exited (code 1)
    # before 'started'", its traceback in a work directory the drill then removes.
    if not _torch_installed():
        from forewarn.protocol.install import extra_hint

        raise UsageError(
            f"drill local --scenario {args.scenario}: its job runs torch, which is not "
            f"installed: {extra_hint('torch')}"
        )
    cells = matrix(args.scenario, args.lead)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(
        f"forewarn drill local --scenario {args.scenario} (seed {seed}, handler {args.handler}; "
        f"work directory {work})"
    )
    drill = Reclaim(work, base_env, handler=args.handler, seed=seed)
    results = drill.run(cells)
    print()
    report(results)
    for line in summary(results):
        print(line)
    return 1 if any(not r.ok for r in results) else 0


def summary(results: list[CellResult]) -> list[str]:
    """The closing lines: the steps lost where the lead allowed none, and the cells failed.
    A cell whose loss is not known (its job never started, its resume failed) counted as 0
    lost, so a drill that could not run a cell still said 'steps lost ...: 0'."""
    enough = [r for r in results if r.lead_is_enough]
    lost = sum(r.lost or 0 for r in enough)
    unknown = [r.cell.label for r in enough if r.lost is None]
    failed = [r for r in results if not r.ok]
    counted = (
        f"at least {lost}; not known in {', '.join(unknown)} (the outcome says why)"
        if unknown
        else str(lost)
    )
    return [
        f"steps lost where the lead covered detection and the flush: {counted}",
        f"cells failed: {len(failed)} of {len(results)}",
    ]


__all__ = [
    "MOMENTS",
    "PLATFORMS",
    "RESTARTED",
    "SCENARIOS",
    "Cell",
    "CellResult",
    "Reclaim",
    "add_arguments",
    "machines_for",
    "matrix",
    "report",
    "run_reclaim_drill",
    "summary",
]
