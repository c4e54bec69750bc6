"""A flag file whose mtime is past what a date holds (before year 1 or after 9999): tmpfs,
where the runtime directory lives (/run), keeps 64-bit seconds, so `touch -d @400000000000`
or a clock far off writes one. Its appearance is still the request: the agent raises the
drain (a duration in it counts from the read, as for any mtime the clock cannot have
written), and a guard that takes the flag itself saves for it and keeps ticking."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from flag_guard import save_for_flag
from forewarn.clients import CheckpointGuard
from forewarn.protocol.flagfile import (
    flag_deadline,
    flag_mtime_text,
    flag_written,
    written_anchor,
)
from forewarn.protocol.timefmt import parse_time, utcnow
from hypothesis import given, settings
from hypothesis import strategies as st
from support import AgentProcess, agent_env, examples

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")

# Year 14645 and year -249: neither is a date Python holds.
FAR_MTIMES_NS = [400_000_000_000 * 10**9, -70_000_000_000 * 10**9]


@pytest.fixture
def tmpfs_dir() -> Iterator[Path]:
    """A directory of this test's own on a tmpfs (/dev/shm), which keeps such mtimes."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    directory = Path(tempfile.mkdtemp(prefix="forewarn-flag-mtime-", dir="/dev/shm"))
    try:
        probe = directory / "probe"
        probe.write_text("")
        try:
            os.utime(probe, ns=(FAR_MTIMES_NS[0], FAR_MTIMES_NS[0]))
        except (OSError, OverflowError):
            pytest.skip("/dev/shm does not keep an mtime past year 9999")
        if os.stat(probe).st_mtime_ns != FAR_MTIMES_NS[0]:
            pytest.skip("/dev/shm does not keep an mtime past year 9999")
        probe.unlink()
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("mtime_ns", FAR_MTIMES_NS, ids=["year-14645", "year-minus-249"])
def test_a_flag_with_an_mtime_no_date_holds_raises_its_drain(
    tmp_path: Path, tmpfs_dir: Path, mtime_ns: int
) -> None:
    env = agent_env(tmp_path, FOREWARN_RUNTIME_DIR=str(tmpfs_dir))
    with AgentProcess(tmp_path, env=env, runtime=tmpfs_dir) as agent, agent.subscriber() as sub:
        flag = tmpfs_dir / "checkpoint-now"
        partial = tmpfs_dir / "checkpoint-now.partial"
        partial.write_text("5m\n")
        os.utime(partial, ns=(mtime_ns, mtime_ns))
        os.rename(partial, flag)
        drain = sub.notice(timeout=5)
        assert drain["action"] == "drain" and drain["id"].startswith("local/flag/"), drain
        # Counted from the read, as for a future mtime or one before the boot.
        assert drain["deadline"] is not None, drain
        left = (parse_time(drain["deadline"]) - utcnow()).total_seconds()
        assert 240 < left <= 300, drain
        health = agent.control({"op": "status"})["health"]
        assert [h["state"] for h in health if h["name"] == "local"] == ["healthy"], health
    output = agent.output()
    assert "out of range" not in output, output
    # The warning names the mtime as it is, not the date it reads as.
    assert f"its mtime @{mtime_ns // 10**9} (past any date) is not when it was written" in output


@pytest.mark.parametrize("mtime_ns", FAR_MTIMES_NS, ids=["year-14645", "year-minus-249"])
def test_a_guard_saves_for_a_flag_with_an_mtime_no_date_holds_and_keeps_ticking(
    tmpfs_dir: Path, mtime_ns: int
) -> None:
    flag = tmpfs_dir / "checkpoint-now"
    flag.write_text("5m\n")
    os.utime(flag, ns=(mtime_ns, mtime_ns))
    guard = CheckpointGuard(
        notices=False, handle_signals=False, flag_file=flag, agree=False, every_seconds=3600
    )
    try:
        save_for_flag(guard)
        deadline = guard._flag_deadline
        assert deadline is not None
        assert 240 < (deadline - utcnow()).total_seconds() <= 300, deadline
        assert guard._ticker.is_alive()
    finally:
        guard.close()


@settings(max_examples=examples(60))
@given(
    # Every magnitude alike (tmpfs keeps up to 2**63 seconds, ~9.2e27 ns): integers drawn
    # from the whole range alone are mostly far smaller or far larger.
    mtime_ns=st.integers(-(2**63), 2**63)
    | st.builds(lambda digit, power: digit * 10**power, st.integers(-9, 9), st.integers(0, 28)),
    content=st.sampled_from(["", "5m", "x"]),
)
def test_any_mtime_reads_as_a_time_and_never_raises(mtime_ns: int, content: str) -> None:
    written = flag_written(mtime_ns)
    assert written.tzinfo is not None
    if -(2**62) < mtime_ns < 2**62:  # within what datetime holds: the mtime itself
        exact = datetime.fromtimestamp(mtime_ns / 1e9, timezone.utc)
        assert abs(written - exact) < timedelta(seconds=1)
    now = utcnow()
    anchor = written_anchor(written, now, 100.0, None)
    assert anchor <= now + timedelta(seconds=3)
    flag_deadline(content, mtime_ns)
    assert "\n" not in flag_mtime_text(mtime_ns)
