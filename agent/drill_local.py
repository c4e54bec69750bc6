"""`forewarn drill local`: a whole reclaim rehearsed on this machine.

It starts an agent (and, with `--provider P`, P's simulator as the notice source), runs the
demo training loop, sends a drain (the demo flushes and goes on), then a terminate (the demo
flushes and exits), restarts the demo and checks that it resumed from the flushed step. It
prints a timeline and the steps lost, and exits non-zero if any step was lost.

With `--background` the demo saves through background uploads over a slow link
(`--upload-delay`), the terminate (with a deadline `--deadline` seconds out) is sent while a
periodic save is uploading, and the drill also fails unless the final checkpoint was durable
before that deadline.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from forewarn.protocol.errors import DrillError, UsageError
from forewarn.protocol.timefmt import format_time
from forewarn.protocol.wire import IPC_PATH_MAX, request

from .drill_limits import MAX_STEPS
from .tethered import tethered

READY_TIMEOUT = 60.0  # a loaded machine starts Python slowly; a live agent answers long before
PHASE_TIMEOUT = 30.0
QUIET_TIMEOUT = 30.0  # how long the demo may say nothing, beyond what the drill asks of it
# The demo's exit after its terminate save: 128 + SIGTERM, as `CheckpointGuard.exit_code`.
RECLAIMED_EXIT = 143
# The drain goes out a fifth into the run (step 20 at the least), the terminate AFTER_DRAIN
# steps after the drain's save. A run shorter than MIN_STEPS finished before one of them
# (`--steps 10`): the drill started an agent and a demo only to fail, exit 1, late.
AFTER_DRAIN = 20
MIN_STEPS = 100
# What MIN_STEPS leaves after the terminate is due: notice latency on a loaded machine.
_MARGIN = MIN_STEPS - MIN_STEPS // 5 - AFTER_DRAIN


def periodic_every(step_time: float, upload_delay: float) -> int:
    """The --background demo's periodic save interval, in steps: about two uploads' time, so
    that uploads overlap training but never each other."""
    return max(20, int(2 * upload_delay / max(step_time, 0.001)))


def minimum_steps(step_time: float, background: bool, upload_delay: float) -> int:
    """The least --steps the quick drill runs in. With --background the terminate waits, after
    the drain's save and AFTER_DRAIN steps, for the next periodic save: up to a whole interval
    more, which the run must leave room for, with MIN_STEPS' margin after it."""
    if not background:
        return MIN_STEPS
    # The least n with n - n // 5 (all but the fifth before the drain) >= needed.
    needed = AFTER_DRAIN + periodic_every(step_time, upload_delay) + _MARGIN
    return max(MIN_STEPS, 5 * (needed - 1) // 4 + 1)


def check_steps(steps: int, step_time: float, background: bool, upload_delay: float) -> None:
    """Refuse, before anything starts, a --steps too few for the drill to send its notices."""
    least = minimum_steps(step_time, background, upload_delay)
    if least > MAX_STEPS:
        # Each flag within its range, together past the most steps: an hour's upload at
        # --step-time 0 spaced the periodic saves 7.2e6 steps apart, and the drill ran on.
        raise UsageError(
            f"drill local: --steps: this drill needs at least {least} (a periodic save every "
            f"{periodic_every(step_time, upload_delay)} steps: --upload-delay {upload_delay:g}s "
            f"at --step-time {step_time:g}s), more than the most, {MAX_STEPS}: give a shorter "
            "--upload-delay or a longer --step-time"
        )
    if steps >= least:
        return
    if background:
        every = periodic_every(step_time, upload_delay)
        shape = (
            f"a drain at step {least // 5}, and a terminate during the first periodic save "
            f"(every {every} steps) from {AFTER_DRAIN} steps after the drain's save"
        )
    else:
        shape = (
            f"a drain at step {MIN_STEPS // 5} and a terminate {AFTER_DRAIN} steps after that save"
        )
    raise UsageError(
        f"drill local: --steps: at least {least} for this drill ({shape}), got {steps}"
    )


# What runs the reclaim scenarios: (args, work directory, base environment) -> exit code.
ReclaimDrill = Callable[[argparse.Namespace, Path, dict[str, str]], int]


class DrillFailed(DrillError):
    pass


@dataclass
class Timeline:
    started: float = field(default_factory=time.monotonic)
    lines: list[str] = field(default_factory=list)

    def add(self, step: int | None, text: str) -> None:
        elapsed = time.monotonic() - self.started
        shown = "-" if step is None else str(step)
        line = f"  +{elapsed:6.2f}s  {shown:>6}  {text}"
        self.lines.append(line)
        print(line, flush=True)


def json_objects(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """The JSON objects among `lines` (a job's stdout, read as it writes it): a line that is
    not JSON, or JSON but not an object (a bare number a loop printed), is passed over."""
    for line in lines:
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            yield value


class Demo:
    """The demo training loop as a subprocess, its JSON lines read on a thread."""

    def __init__(self, argv: list[str], env: dict[str, str], quiet: float = 0.0) -> None:
        # Seconds the demo may be silent beyond QUIET_TIMEOUT: a step, or a final save that
        # waits for an upload in flight and then makes its own.
        self.quiet = quiet
        # Tethered: a drill killed outright (kill -9) left the demo training on. By SIGKILL,
        # as `stop` ends it: a SIGTERM is a reclaim to the demo, whose final save, nobody left
        # to read it, waited for an upload in flight and then made its own, up to twice
        # --upload-delay (an hour each at the most) of an orphan on the node.
        self.proc = subprocess.Popen(
            tethered(argv, signal.SIGKILL),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.step = 0
        self.stderr: list[str] = []
        self.waiting = "its first line"  # what the drill reads on for, said if the run ends
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for event in json_objects(self.proc.stdout):
            self.step = event.get("step", self.step)
            self.events.put(event)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip())

    def next(self, timeout: float | None = None, *, done_ok: bool = False) -> dict[str, Any]:
        if timeout is None:
            timeout = QUIET_TIMEOUT + self.quiet
        try:
            event = self.events.get(timeout=timeout)
        except queue.Empty:
            tail = "\n".join(self.stderr[-10:])
            raise DrillFailed(f"the demo said nothing for {timeout:g}s\n{tail}") from None
        if event.get("event") == "done" and not done_ok:
            # A run too short for the drill (`--steps 10`) waited 30 s here and failed as
            # "the demo said nothing for 30s"; so did a notice that never reached the demo.
            raise DrillFailed(
                f"the demo finished its run (step {event.get('step')}) before {self.waiting}"
            )
        return event

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class NoticeSource:
    """Raises the drill's drain and terminate: on the control socket, or in a simulator."""

    def __init__(self, name: str, control: str, env: dict[str, str], directory: Path) -> None:
        self.name = name
        self.control = control
        self.server: Any = None
        self.script: dict[str, Any] = {}
        if name == "local":
            return
        from forewarn.providers import REGISTRY
        from forewarn.providers.simulator import SimServer

        loader = REGISTRY[name].simulate
        if loader is None:
            raise DrillFailed(f"provider {name!r} has no simulator")
        module = loader()
        script = module.drill_script()
        if not script:
            raise DrillFailed(f"provider {name!r} has no local drill script")
        self.script = script
        self.server = SimServer(module.make_simulator()).start()
        env[f"FOREWARN_{name.upper()}_URL"] = self.server.url
        env.update(script.get("env", {}))
        for variable, (file_name, text) in script.get("files", {}).items():
            path = directory / file_name
            path.write_text(text)
            path.chmod(0o600)
            env[variable] = str(path)

    def raise_notice(self, action: str, deadline: str | None = None) -> str:
        if self.name == "local":
            notify = {"op": "notify", "action": action, "reason": "drill", "note": "forewarn drill"}
            if deadline is not None:
                notify["deadline"] = deadline
            # The agent answered `status` before the demo started, so a late answer means a
            # loaded machine (a real node is busy feeding GPUs), not a dead agent: the 2 s
            # default made the drill crash there instead of rehearsing the reclaim.
            try:
                reply = request(self.control, notify, timeout=PHASE_TIMEOUT)
            except TimeoutError:
                raise DrillFailed(
                    f"the agent did not answer the {action} on {self.control} "
                    f"within {PHASE_TIMEOUT:g}s"
                ) from None
            if not reply.get("ok"):
                raise DrillFailed(f"the agent refused the {action}: {reply.get('error')}")
            return str(reply["notice"]["id"])
        import httpx

        kind, fields = self.script[action]
        response = httpx.post(
            f"{self.server.url}/_sim/notices",
            json={"kind": kind, **fields},
            timeout=5,
            trust_env=False,
        )
        response.raise_for_status()
        return f"{self.name} {kind} {response.json().get('id', '')}".strip()

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()


def _wait_for_agent(control: str, agent: subprocess.Popen[str]) -> dict[str, Any]:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if agent.poll() is not None:
            raise DrillFailed(f"the agent exited with code {agent.returncode}")
        try:
            reply = request(control, {"op": "status"}, timeout=0.5)
            if reply.get("ok"):
                return reply
        except TimeoutError:
            pass
        time.sleep(0.05)
    raise DrillFailed(f"the agent did not answer on {control} within {READY_TIMEOUT:g}s")


def _until(demo: Demo, timeline: Timeline, want: str, **match: Any) -> dict[str, Any]:
    """Read demo events, putting the interesting ones on the timeline, until `want`."""
    while True:
        event = demo.next(done_ok=want == "done")
        kind = event["event"]
        if kind == "notice":
            flow = {
                "drain": "flush and continue",
                "terminate": "flush and exit",
                "clear": "withdrawn",
            }.get(event["action"], "")
            timeline.add(demo.step, f"demo received {event['action']} ({event['id']}): {flow}")
        elif kind == "saved" and event.get("background"):
            reasons = ", ".join(event["reasons"])
            timeline.add(
                event["step"],
                f"checkpoint of step {event['step']} ({reasons}) uploading in the background; "
                f"training waited {event['seconds'] or 0:.3f}s and continues",
            )
        elif kind == "saved":
            reasons = ", ".join(event["reasons"])
            then = "demo exits" if event["exit"] else "training continues"
            timeline.add(
                event["step"],
                f"checkpoint saved at step {event['step']} "
                f"({reasons}) in {event['seconds'] or 0:.3f}s; {then}",
            )
            if event.get("choice"):
                did = "waited for" if event["choice"] == "waited" else event["choice"]
                timeline.add(
                    event["step"],
                    f"final save: {did} the upload in flight: {event['choice_reason']}",
                )
        elif kind == "durable":
            timeline.add(
                demo.step,
                f"step {event['saved_step']} durable (LATEST moved) after {event['seconds']:.3f}s",
            )
        elif kind == "failed":
            failed = f"background save of step {event['saved_step']} failed: {event['error']}"
            timeline.add(demo.step, failed)
        if kind == want and all(event.get(key) == value for key, value in match.items()):
            return event


def _unanswered(action: str, step: int, too_short: str) -> str:
    return (
        f"saving for the {action} sent at step {step}: the notice did not reach it, or it did "
        f"not save for it (if it came late, {too_short})"
    )


def _until_saved_for(demo: Demo, timeline: Timeline, reason: str) -> dict[str, Any]:
    while True:
        event = _until(demo, timeline, "saved")
        if reason in event["reasons"]:
            return event


class Machine:
    """One spot machine of the drill: an agent and its notice source. The restart after the
    terminate happens on a new machine (fresh agent state, no notices), as after a reclaim."""

    def __init__(self, work: Path, source_name: str, base_env: dict[str, str], name: str) -> None:
        self.runtime = work / name / "run"
        self.state = work / name / "state"
        for directory in (self.runtime, self.state):
            directory.mkdir(parents=True, exist_ok=True)
        self.env = dict(base_env)
        self.env.update(FOREWARN_RUNTIME_DIR=str(self.runtime), FOREWARN_STATE_DIR=str(self.state))
        self.control = f"ipc://{self.runtime}/control"
        self.source = NoticeSource(source_name, self.control, self.env, work / name)
        self.providers = ["local"] + ([source_name] if source_name != "local" else [])
        # The node's own configuration (/etc/forewarn/forewarn.toml, as on a machine where the
        # real agent runs) is not the drill's: its metrics_address, taken by the real agent,
        # made the drill's agent exit 2 ("drill failed: the agent exited with code 2").
        config = work / name / "forewarn.toml"
        config.write_text("# the drill's agent: defaults, whatever this node's config says\n")
        argv = [sys.executable, "-m", "forewarn.agent.cli", "agent", "--config", str(config)]
        for provider in self.providers:
            argv += ["--provider", provider]
        self.log_path = work / name / "agent.log"
        self.log = self.log_path.open("w")
        # Tethered: a drill killed outright (kill -9) left its agent holding the runtime
        # directory and ports.
        self.agent = subprocess.Popen(
            tethered(argv), env=self.env, stdout=self.log, stderr=subprocess.STDOUT, text=True
        )
        try:
            _wait_for_agent(self.control, self.agent)
        except DrillFailed as error:
            self.stop()
            # Why it did not start is in its log, which goes with the work directory.
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-10:]
            raise DrillFailed("\n".join([str(error), *tail])) from None
        except BaseException:  # an interrupt too: the agent must not outlive the drill
            self.stop()
            raise

    def stop(self) -> None:
        if self.agent.poll() is None:
            self.agent.terminate()
            try:
                self.agent.wait(5)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait()
        self.log.close()
        self.source.close()


# Written into a --dir the quick drill uses: what it finds there next time is its own.
DRILL_MARK = ".forewarn-drill"
# What drills make in their --dir: the checkpoint store, one directory per machine (a
# --scenario drill has one per cell), and a --scenario drill's job logs.
_DRILL_FILES = re.compile(r"checkpoints|machine-\d+|job-\d+\.log")


def _clear_previous_run(work: Path) -> bool:
    """A second drill in the same --dir starts fresh: resumed from the first one's last
    checkpoint, with its terminate still in the old state, it hung ("said nothing for 30s").
    Only files a drill made are removed, and only where its mark is; anything else that
    looks like them is refused rather than deleted."""
    found = sorted(path for path in work.iterdir() if _DRILL_FILES.fullmatch(path.name))
    mark = work / DRILL_MARK
    if found and not mark.exists():
        raise UsageError(
            f"drill local: --dir: {work} already holds {found[0].name}, not from a drill; "
            "give an empty or new directory"
        )
    for path in found:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    mark.write_text("a forewarn drill's work directory: the next drill here replaces it\n")
    return bool(found)


def _lock_dir(work: Path) -> int:
    """Held while a drill runs in `work`: a second drill given the same --dir removed the
    running one's checkpoints and machine directories under it. Not inherited by children."""
    fd = os.open(work, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UsageError(
            f"drill local: --dir: {work}: a drill is running there; "
            "wait for it to end or give another directory"
        ) from None
    return fd


def longest_socket(work: Path, machines: int) -> str | None:
    """The longest agent socket path the drill makes under `work` when it is longer than a
    socket path can be (107 bytes on Linux), else None. zmq refused it only once the drill
    had started: "unexpected ZMQError: File name too long", exit 1."""
    path = f"{work}/machine-{machines}/run/control"
    return path if len(os.fsencode(path)) > IPC_PATH_MAX else None


def _work_directory(args: argparse.Namespace, machines: int) -> Path:
    if args.dir:
        return Path(args.dir)
    work = Path(tempfile.mkdtemp(prefix="forewarn-drill-"))
    # A deep TMPDIR (a CI runner's, pytest's basetemp) leaves no room for the agent's socket
    # path, which the user did not choose: /tmp does.
    if longest_socket(work, machines) is not None:
        work.rmdir()
        work = Path(tempfile.mkdtemp(prefix="forewarn-drill-", dir="/tmp"))
    return work


def run_local_drill(
    args: argparse.Namespace, reclaim: ReclaimDrill | None = None, machines: int = 2
) -> int:
    """The quick drill, or with `args.scenario` another one run by `reclaim` (the command
    line passes `drill_reclaim.run_reclaim_drill`, which builds on this module's Machine, and
    `machines`, how many machines it starts: `drill_reclaim.machines_for`)."""
    work = _work_directory(args, machines)
    work.mkdir(parents=True, exist_ok=True)
    lock = _lock_dir(work)
    try:
        return _run_in(work, args, reclaim)
    finally:
        os.close(lock)


def _run_in(work: Path, args: argparse.Namespace, reclaim: ReclaimDrill | None) -> int:
    checkpoints = work / "checkpoints"
    # In any case, as the agent reads every FOREWARN_ name: `forewarn_exit_margin` reached the
    # drill's agents.
    base_env = {
        key: value for key, value in os.environ.items() if not key.upper().startswith("FOREWARN_")
    }
    base_env["PYTHONUNBUFFERED"] = "1"
    # Every drill, a --scenario one too: its torch job used someone's DIR/checkpoints as its
    # store (resumed from it, pruned it to 4 generations), or an earlier drill's.
    reused = _clear_previous_run(work) if args.dir else False
    if getattr(args, "scenario", "quick") != "quick":
        if reclaim is None:
            raise DrillFailed(f"scenario {args.scenario!r} needs the reclaim drill")
        if reused:
            print("(the previous drill's checkpoints and machines in this directory were removed)")
        try:
            return reclaim(args, work, base_env)
        except DrillFailed as error:
            print(f"drill failed: {error}", file=sys.stderr)
            return 1
        finally:
            if not args.dir and not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    print(f"forewarn drill local (notice source: {args.source}; work directory {work})")
    if reused:
        print("  (the previous drill's checkpoints and machines in it were removed)")
    print("  time        step  event")
    timeline = Timeline()
    machine: Machine | None = None
    demo: Demo | None = None
    demo_argv = [
        sys.executable,
        "-m",
        "forewarn.clients.demo",
        "--dir",
        str(checkpoints),
        "--step-time",
        str(args.step_time),
    ]
    background = bool(getattr(args, "background", False))
    # `--upload-delay 45s` (a real checkpoint's upload, rehearsed) left the demo silent for
    # 90 s in its final save, and the drill failed as "the demo said nothing for 30s".
    quiet = args.step_time + (2 * args.upload_delay if background else 0.0)
    if background:
        every = periodic_every(args.step_time, args.upload_delay)
        demo_argv += ["--background", "--upload-delay", str(args.upload_delay)]
        demo_argv += ["--every-steps", str(every)]
    try:
        machine = Machine(work, args.source, base_env, "machine-1")
        if machine.source.server is not None:
            timeline.add(None, f"{args.source} simulator serving on {machine.source.server.url}")
        timeline.add(None, f"agent started (providers: {', '.join(machine.providers)})")
        demo = Demo([*demo_argv, "--steps", str(args.steps)], machine.env, quiet)
        first = demo.next()
        timeline.add(
            first["step"],
            "demo training started"
            + (
                f" (resumed from step {first['step']})"
                if first["event"] == "resumed"
                else " (fresh)"
            ),
        )
        drain_at = max(first["step"] + 20, args.steps // 5)
        too_short = "give it more steps (--steps) or slower ones (--step-time)"
        demo.waiting = f"step {drain_at}, where the drill sends its drain: {too_short}"
        while demo.step < drain_at:
            demo.next()
        notice = machine.source.raise_notice("drain")
        timeline.add(demo.step, f"drain sent ({notice})")
        demo.waiting = _unanswered("drain", demo.step, too_short)
        drained = _until_saved_for(demo, timeline, "drain")
        after = drained["step"] + AFTER_DRAIN
        demo.waiting = f"step {after}, {AFTER_DRAIN} steps after the drain's save: {too_short}"
        while demo.step < after:
            demo.next()
        timeline.add(demo.step, "training went on after the drain flush")

        deadline_at: float | None = None
        if background:
            # The terminate goes out the moment a periodic save starts its upload.
            demo.waiting = f"a periodic save, when the drill sends its terminate: {too_short}"
            uploading = _until(demo, timeline, "saved", background=True)
            deadline_at = time.time() + args.deadline
            deadline = format_time(datetime.fromtimestamp(deadline_at, timezone.utc))
            notice = machine.source.raise_notice("terminate", deadline)
            timeline.add(
                demo.step,
                f"terminate sent during the upload of step {uploading['step']} ({notice}, "
                f"deadline in {args.deadline:g}s)",
            )
        else:
            notice = machine.source.raise_notice("terminate")
            timeline.add(demo.step, f"terminate sent ({notice})")
        demo.waiting = _unanswered("terminate", demo.step, too_short)
        final = _until_saved_for(demo, timeline, "terminate")
        if background:
            assert deadline_at is not None
            if final.get("choice") not in ("waited", "cancelled"):
                raise DrillFailed(
                    "the terminate reached the demo after the upload had finished (a loaded "
                    "machine?): raise --upload-delay"
                )
            margin = deadline_at - float(final["t"])
            if margin <= 0:
                raise DrillFailed(f"the final checkpoint was durable {-margin:.2f}s too late")
            timeline.add(final["step"], f"final checkpoint durable {margin:.2f}s before deadline")
        _until(demo, timeline, "exit")
        code = demo.proc.wait(timeout=PHASE_TIMEOUT)
        last_step = final["step"]
        # 143 (CheckpointGuard.exit_code): stopped for a reclaim, not finished, so that an
        # orchestrator restarts it (an exit 0 completes a Kubernetes Job).
        if code != RECLAIMED_EXIT:
            timeline.add(last_step, f"demo exited with code {code}")
            raise DrillFailed(
                f"the demo exited with code {code} after terminate, not {RECLAIMED_EXIT} "
                "(stopped for a reclaim: to be restarted)"
            )
        timeline.add(last_step, f"demo exited with code {code}: stopped for a reclaim, to resume")
        machine.stop()
        timeline.add(None, "machine reclaimed; a replacement starts with a fresh agent")

        machine = Machine(work, args.source, base_env, "machine-2")
        demo = Demo([*demo_argv, "--steps", str(last_step + 20)], machine.env, quiet)
        resumed = demo.next()
        resumed_step = resumed["step"] if resumed["event"] == "resumed" else 0
        verified = resumed.get("state") == final.get("state") and bool(resumed.get("verified"))
        checked = (
            f"generation {resumed.get('generation')} verified ({resumed.get('verified')}), "
            f"state {'matches' if resumed.get('state') == final.get('state') else 'DIFFERS'}"
        )
        timeline.add(resumed_step, f"demo restarted: resumed from step {resumed_step} ({checked})")
        done = _until(demo, timeline, "done")
        demo.proc.wait(timeout=PHASE_TIMEOUT)
        timeline.add(done["step"], "demo finished its run")
        lost = max(0, last_step - resumed_step)
        if not verified:
            # The resume is not the save: "steps lost: 0" above an exit 1 claimed a loss
            # the drill could not measure.
            why = (
                f"the resumed state differs from the one saved at step {last_step}"
                if resumed.get("state") != final.get("state")
                else f"the resumed generation was not verified ({resumed.get('verified')})"
            )
            print(f"steps lost: unknown: resumed from step {resumed_step}, but {why}")
            return 1
        print(f"steps lost: {lost}")
        return 1 if lost else 0
    except DrillFailed as error:
        print(f"drill failed: {error}", file=sys.stderr)
        return 1
    finally:
        if demo is not None:
            demo.stop()
        if machine is not None:
            machine.stop()
        if not args.dir and not args.keep:
            shutil.rmtree(work, ignore_errors=True)


__all__ = [
    "AFTER_DRAIN",
    "MIN_STEPS",
    "ReclaimDrill",
    "check_steps",
    "json_objects",
    "longest_socket",
    "minimum_steps",
    "periodic_every",
    "run_local_drill",
]
