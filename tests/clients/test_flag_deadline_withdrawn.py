"""A flag file's deadline kept for the jobs that start later (no agent) stops every job started
until it is dead, 300 s past it: a job under a restart policy on a machine that was not taken
restarted and exited for five minutes, and nothing it logged said why or how to stop it. Its
exit line says how: the flag file written again without a deadline withdraws it (a new
request, as the agent clears the drain then), and the next job saves once and trains on."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from forewarn.protocol.flagkept import KeptDeadlines
from support import eventually

JOB = Path(__file__).with_name("flag_deadline_job.py")
MARGIN = 1.0


class Job:
    """One loop process with the guard and no agent; its saves (stdout) and log (stderr)."""

    def __init__(self, flag: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(JOB), str(flag), str(MARGIN)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.log: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.process.stdout, self.lines)),
            threading.Thread(target=self._read, args=(self.process.stderr, self.log)),
        ]
        for reader in self._readers:
            reader.daemon = True
            reader.start()

    @staticmethod
    def _read(stream: Any, into: list[str]) -> None:
        for line in stream:
            into.append(line.rstrip("\n"))

    def ready(self) -> None:
        eventually(lambda: "ready" in self.lines, timeout=30, what="the job's guard")

    def saves(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in list(self.lines) if line.startswith("{")]

    def exited(self) -> int:
        code = self.process.wait(timeout=30)
        for reader in self._readers:
            reader.join(timeout=5)
        return code

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.exited()


def test_a_kept_flag_deadline_says_how_to_withdraw_it_and_that_way_works(
    tmp_path: Path,
) -> None:
    flag = tmp_path / "checkpoint-now"
    kept = KeptDeadlines(flag.with_name(flag.name + ".jobs"))
    jobs: list[Job] = []
    try:
        first = Job(flag)
        jobs.append(first)
        first.ready()
        flag.write_text("3s\n")  # the machine's reclaim, as the operator's script wrote it
        assert first.exited() == 143, first.log
        assert kept.in_force() is not None, "the deadline is kept for the jobs started later"

        # The machine was not taken: the job's restart policy starts it again, and it exits.
        restarted = Job(flag)
        jobs.append(restarted)
        assert restarted.exited() == 143, restarted.log
        (exit_line,) = [line for line in restarted.log if "exiting at step" in line]
        assert "flag deadline" in exit_line, exit_line
        assert f"write {flag} again, empty (`: > {flag}`), to withdraw it" in exit_line
        assert "every job started before " in exit_line, exit_line
        # One time format in what the operator reads: the warnings said `…59.152000+00:00`
        # beside the hint's `…59.152Z` in one line.
        mixed = [line for line in first.log + restarted.log if "+00:00" in line]
        assert not mixed, mixed

        # The way the line says: the next job takes the new request, saves once, trains on.
        flag.write_bytes(b"")  # `: > FILE`
        fixed = Job(flag)
        jobs.append(fixed)
        eventually(lambda: fixed.saves(), timeout=30, what="the next job's save for the flag")
        assert fixed.saves()[0]["reasons"] == ["flag"] and not fixed.saves()[0]["exit"]
        eventually(lambda: not flag.exists(), timeout=10, what="the flag handled and removed")
        assert kept.in_force() is None, "the old deadline still stands"
        assert fixed.process.poll() is None, fixed.log
        # And a job started after that finds nothing in force.
        after = Job(flag)
        jobs.append(after)
        after.ready()
        assert kept.in_force() is None
        assert all(not save["exit"] for save in fixed.saves() + after.saves())
        assert fixed.process.poll() is None and after.process.poll() is None
    finally:
        for job in jobs:
            job.stop()
