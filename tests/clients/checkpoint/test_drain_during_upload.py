"""A drain that arrives while a background save uploads: a real agent, a real torch job in its
own process, a store whose upload is held until the test lets it go (a slow disk or link).
The drain's save waits for that upload without holding the loop: training goes on through it,
the drain's save comes at the first step after it ends, and takes no longer than a copy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from forewarn.testing import eventually, start_agent
from support import requires

JOB = """
import sys, time
from pathlib import Path
import torch
from forewarn.clients import CheckpointGuard
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.checkpoint.testing import DelegatingBackend

hold, release = Path(sys.argv[2]), Path(sys.argv[3])


class Held(DelegatingBackend):
    # The first save's upload waits for the test's release: a slow disk or link.
    def writer(self, key, on_done=None):
        writer = self.inner.writer(key, on_done)
        write = writer.write

        def held(data):
            if "step-000000000010" in key and not release.exists():
                hold.touch()
                while not release.exists():
                    time.sleep(0.01)  # the scenario: an upload that takes as long as the test says
            return write(data)

        writer.write = held
        return writer


store = CheckpointStore(backend=Held(CheckpointStore(sys.argv[1]).backend))
model = torch.nn.Linear(512, 1024)
opt = torch.optim.Adam(model.parameters())
guard = CheckpointGuard(every_steps=10, store=store, background=True, flag_file=None)
step = 0
while step < 10_000:
    model(torch.randn(8, 512)).sum().backward()
    opt.step()
    step += 1
    print("step", step, flush=True)
    if guard.due(step):
        result = guard.save_state(step, {"model": model.state_dict(), "optim": opt.state_dict()})
        print("saved", step, result.reasons, flush=True)
        if result.exit:
            break
guard.close()
sys.exit(guard.exit_code)
"""


@requires("torch")
def test_a_drain_during_an_upload_keeps_training_and_saves_once_after_it(tmp_path: Path) -> None:
    """found: a torch job saving 6 MiB in the background every 10 steps, a drain raised while
    step 10 still uploaded (a slow disk): the loop stood in save_state at step 11 for the
    whole upload (1.87 s against a 0.32 s copy, with a 75 MiB state over a 40 MiB/s disk),
    where a periodic save due then is skipped and training goes on."""
    hold, release = tmp_path / "holding", tmp_path / "release"
    out = tmp_path / "job.out"
    with start_agent("local") as agent:
        with out.open("w") as sink:
            job = subprocess.Popen(
                [sys.executable, "-c", JOB, str(tmp_path / "ckpt"), str(hold), str(release)],
                stdout=sink,
                stderr=subprocess.STDOUT,
                env={**os.environ, **agent.env},
                start_new_session=True,
            )
        try:
            eventually(hold.exists, 120, "step 10's upload to begin", interval=0.02)
            notice = agent.notify("drain")
            # The loop sees the drain within a step or two; held in save_state it stops there.
            eventually(
                lambda: "step 25\n" in out.read_text(),
                30,
                "training to go on while step 10 uploads",
                interval=0.05,
            )
            assert "saved 11" not in out.read_text()
            release.touch()
            ack = agent.wait_for_ack(notice, timeout=60)
            assert job.poll() is None, out.read_text()
        finally:
            release.touch()
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
        text = out.read_text()
        assert ack["outcome"] == "saved" and ack["step"] > 25, ack
        # Training did not wait for the upload: the stall is the copy's alone.
        assert ack["stall_seconds"] < 1.0, ack
        saves = [line for line in text.splitlines() if line.startswith("saved ")]
        # Step 10's save, then the drain's, once (a periodic step it came at is the same save).
        assert saves[0].startswith("saved 10 ") and "drain" in saves[1], saves
        assert sum("drain" in line for line in saves) == 1, saves
        drains = [a for a in agent.acks if a.get("notice_id") == notice]
        assert len(drains) == 1, drains
