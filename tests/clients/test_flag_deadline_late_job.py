"""A flag file with a deadline and no agent: a job started on the node after the file was
handled (every job reading it saved, the file removed) and before its deadline saves and exits
within its exit margin of it, as the agent replays the kept drain to a client that connects
late. It knew nothing of it, and trained on until the machine went at the deadline."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from forewarn.protocol.timefmt import format_time, utcnow
from support import eventually

JOB = Path(__file__).with_name("flag_deadline_job.py")
MARGIN = 2.0
# Far enough for the second job to start (an interpreter and forewarn's import) before it.
AHEAD = 12.0


class Job:
    """One loop process, its printed lines gathered as they come."""

    def __init__(self, flag: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(JOB), str(flag), str(MARGIN)], stdout=subprocess.PIPE, text=True
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.strip())

    def ready(self) -> None:
        eventually(lambda: "ready" in self.lines, timeout=30, what="the job's guard")

    def saves(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in list(self.lines) if line.startswith("{")]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        self._reader.join(timeout=5)


@pytest.mark.parametrize("written", ["duration", "time"])
def test_a_job_started_after_the_flags_save_exits_before_its_deadline(
    tmp_path: Path, written: str
) -> None:
    flag = tmp_path / "checkpoint-now"
    first = Job(flag)
    second: Job | None = None
    try:
        first.ready()
        deadline = utcnow() + timedelta(seconds=AHEAD)
        flag.write_text(f"{AHEAD:g}s\n" if written == "duration" else format_time(deadline) + "\n")
        if written == "duration":
            deadline = utcnow() + timedelta(seconds=AHEAD)  # counted from the writing
        eventually(lambda: first.saves(), timeout=10, what="the first job's save for the flag")
        assert first.saves()[0]["reasons"] == ["flag"] and not first.saves()[0]["exit"]
        eventually(lambda: not flag.exists(), timeout=10, what="the flag handled and removed")

        second = Job(flag)  # after the save, before the deadline
        second.ready()
        assert utcnow() < deadline - timedelta(seconds=MARGIN), "started too late to tell"
        for job in (first, second):
            code = job.process.wait(timeout=AHEAD + 10)
            assert code == 143, f"exit code {code}; saves {job.saves()}"
            last = job.saves()[-1]
            assert last["exit"]  # its last step saved: no step lost
            at = last["at"]
            ends = deadline.timestamp()
            assert ends - MARGIN - 1.0 <= at < ends, (at - ends, job.saves())
        # As the agent replays the drain: the late job saves for it, then exits at the margin.
        assert [save["exit"] for save in second.saves()] in ([True], [False, True])
        assert "flag deadline" in second.saves()[-1]["reasons"]
    finally:
        first.stop()
        if second is not None:
            second.stop()
