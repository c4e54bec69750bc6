"""One agent per state directory, whatever directory each agent runs in.

The state directory's lock is held by the agent's own process for its life (flock: two opens
in one process conflict as two processes do), so these tests take it in-process through
`AgentDirs` rather than start agent processes; `test_hostile.py` starts real ones.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from forewarn.agent.reserve import MIN_RESERVE_BYTES, RESERVE_FILE, SpaceReserve
from forewarn.agent.rundir import AgentDirs, flock_holder
from forewarn.protocol.errors import ConfigError
from hypothesis import given
from hypothesis import strategies as st
from support import fill_disk, tmpfs_disk


@pytest.mark.parametrize("first_runs_there", [True, False])
def test_an_agent_whose_state_dir_is_a_runtime_dir_still_holds_it_against_a_second(
    tmp_path: Path, first_runs_there: bool
) -> None:
    """An agent whose runtime and state directories are one (`--runtime-dir D --state-dir D`,
    one volume mounted in a container for both) took only the runtime lock there, so a
    second agent with a runtime directory of its own and the same state directory started:
    it restored and published the first's manual notices (a `notify terminate` included),
    and both wrote the same state file. The other way round too: an agent running in a
    directory that another agent keeps its state in took that state as its own. The second
    is refused, naming the directory and the first's pid."""
    shared, own = tmp_path / "shared", tmp_path / "own"
    if first_runs_there:
        first, second = AgentDirs(shared, shared), AgentDirs(own, shared)
    else:
        first, second = AgentDirs(own, shared), AgentDirs(shared, shared)
    first.hold()
    try:
        with pytest.raises(ConfigError) as refused:
            second.hold()
        message = str(refused.value)
        assert f"another agent (pid {os.getpid()})" in message, message
        assert f"keeps its state in {shared}" in message, message
        assert "--state-dir" in message, message
        # The refused agent left the first's locks as they were, and took none.
        assert second.lock is None and second.state_lock is None
    finally:
        second.release()
        first.release()
    # Released, the directories are the next agent's.
    second.hold().release()


@pytest.mark.parametrize("lock_name", ["agent.lock", "state.lock"])
def test_the_refusal_names_the_host_of_an_agent_in_another_container(
    tmp_path: Path, lock_name: str
) -> None:
    """A second container (or pod) mounting the first's volume is refused with the first's
    pid, which is its pid in its own container (often 1): "another agent (pid 1) keeps its
    state in /var/lib/forewarn" named no process the operator could find. The lock records
    the host name too (a container's is its pod's), and the refusal names it when it is not
    this one's; an older agent's lock (the pid alone) is read as before."""
    import fcntl

    runtime, state = tmp_path / "run", tmp_path / "state"
    runtime.mkdir()
    state.mkdir()
    lock = (runtime if lock_name == "agent.lock" else state) / lock_name
    for written, shown in [
        ("1 trainer-pod-7f9c\n", "another agent (pid 1 on host trainer-pod-7f9c)"),
        ("4242\n", "another agent (pid 4242)"),
    ]:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o640)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, written.encode())
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with pytest.raises(ConfigError) as refused:
                AgentDirs(runtime, state).hold()
            assert shown in str(refused.value), refused.value
            assert str(lock.parent) in str(refused.value), refused.value
        finally:
            os.close(fd)
    # This agent's own lock names its pid and host: what a refused agent shows.
    dirs = AgentDirs(runtime, state).hold()
    try:
        import socket

        assert lock.read_text().split() == [str(os.getpid()), socket.gethostname()]
    finally:
        dirs.release()


def test_an_agent_on_this_host_is_named_by_its_pid_alone(tmp_path: Path) -> None:
    """The host is named only when it is another: two agents of one machine show the pid,
    as they always did."""
    first = AgentDirs(tmp_path / "a", tmp_path / "state").hold()
    try:
        with pytest.raises(ConfigError) as refused:
            AgentDirs(tmp_path / "b", tmp_path / "state").hold()
        assert f"another agent (pid {os.getpid()}) keeps" in str(refused.value), refused.value
    finally:
        first.release()


@pytest.fixture
def read_only_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs holding a directory `state`, mounted read-only (as `errors=remount-ro` leaves
    a root file system, or a container's read-only root)."""
    with tmpfs_disk(tmp_path, "64k") as mount:
        (mount / "state").mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        yield mount


@pytest.mark.parametrize("which", ["state", "runtime"])
def test_a_directory_on_a_read_only_file_system_is_refused_as_such(
    tmp_path: Path, read_only_disk: Path, which: str
) -> None:
    """A state directory on a file system mounted read-only was refused with "not writable by
    uid 0": root, told its own uid cannot write, looked for an owner or a mode to fix, and
    both were right. The refusal says the file system is read-only."""
    directory = read_only_disk / "state"
    own = tmp_path / "own"
    dirs = AgentDirs(own, directory) if which == "state" else AgentDirs(directory, own)
    with pytest.raises(ConfigError) as refused:
        dirs.hold()
    message = str(refused.value)
    assert f"{which} directory {directory}: on a read-only file system" in message, message
    assert "uid" not in message, message


@pytest.mark.parametrize("which", ["state", "runtime"])
def test_a_file_or_dangling_link_in_a_directory_s_place_is_named_as_such(
    tmp_path: Path, which: str
) -> None:
    """A file where the directory goes (a `--state-dir` naming the state file, a mount of
    one file) or a symbolic link to a directory that is gone (its disk not mounted) stopped
    the agent with "cannot create it (File exists)": the reader, told it exists, saw no
    reason to create it. The refusal says what is there."""
    own = tmp_path / "own"
    afile, dangling = tmp_path / "state.json", tmp_path / "moved"
    afile.write_text("{}")
    dangling.symlink_to(tmp_path / "unmounted" / "forewarn")
    for path, shown in [
        (afile, f"{which} directory {afile}: a file, not a directory"),
        (
            dangling,
            f"{which} directory {dangling}: a symbolic link to "
            f"{tmp_path / 'unmounted' / 'forewarn'}, which does not exist",
        ),
    ]:
        dirs = AgentDirs(own, path) if which == "state" else AgentDirs(path, own)
        with pytest.raises(ConfigError) as refused:
            dirs.hold()
        assert shown in str(refused.value), refused.value


def test_a_file_in_a_parent_s_place_is_named(tmp_path: Path) -> None:
    """Where a parent is what is in the way, that parent is named, not the directory."""
    dangling = tmp_path / "moved"
    dangling.symlink_to(tmp_path / "unmounted")
    with pytest.raises(ConfigError) as refused:
        AgentDirs(tmp_path / "own", dangling / "forewarn").hold()
    assert (
        f"state directory {dangling / 'forewarn'}: {dangling} is a symbolic link to "
        f"{tmp_path / 'unmounted'}, which does not exist"
    ) in str(refused.value), refused.value
    afile = tmp_path / "state.json"
    afile.write_text("{}")
    with pytest.raises(ConfigError) as refused:  # "cannot create it (Not a directory)"
        AgentDirs(tmp_path / "own", afile / "forewarn").hold()
    shown = f"state directory {afile / 'forewarn'}: {afile} is a file, not a directory"
    assert shown in str(refused.value), refused.value


def test_a_state_directory_whose_lock_another_user_s_agent_holds_is_refused(
    tmp_path: Path,
) -> None:
    """A state directory its group may write (/var/lib/forewarn made 0770 for a team): a
    member's agent, with a runtime directory of its own, could not open root's `state.lock`
    (0640, root's group) and took that for a lock that cannot be made (a full disk): it
    warned, ran on the system agent's state, published its manual notices (a `notify
    terminate` included) and saved over its file. A lock that is there but not this agent's
    to open says another user's agent keeps its state there: refused (exit 2), naming the
    lock, its owner and the option."""
    import shutil

    from other_user import call_as, other_user, shared_tmp

    uid, gid = other_user()
    base = shared_tmp(uid, gid)
    try:
        state = base / "state"
        state.mkdir()
        os.chown(state, 0, gid)
        state.chmod(0o770)
        system = AgentDirs(tmp_path / "run", state).hold()  # root's agent
        try:

            def start() -> str:
                try:
                    AgentDirs(base / "run", state).hold().release()
                except ConfigError as error:
                    return str(error)
                return "started"

            refused = call_as(uid, gid, start)
        finally:
            system.release()
        lock = state / "state.lock"
        assert f"cannot open the lock {lock}: owned by uid 0" in refused, refused
        assert f"another user's agent keeps its state in {state}" in refused, refused
        assert "--state-dir" in refused, refused
        # Root's agent gone, the lock is still root's: the member's agent is still refused.
        assert "another user's agent" in call_as(uid, gid, start)

        def own_lock_made_read_only() -> str:
            mine = base / "mine"
            AgentDirs(base / "run", mine).hold().release()
            (mine / "state.lock").chmod(0o400)
            dirs = AgentDirs(base / "run", mine).hold()  # a warning: no other agent is there
            dirs.release()
            return "started"

        assert call_as(uid, gid, own_lock_made_read_only) == "started"
    finally:
        shutil.rmtree(base)


def test_a_lock_made_on_a_full_disk_names_its_holder_all_the_same(tmp_path: Path) -> None:
    """The state directory's disk full when the first agent started (a checkpoint filled it):
    `state.lock` was made but its pid could not be written, and a second agent on the
    directory was refused with "another agent (pid ?) keeps its state in ...". The refusal
    names the pid the kernel lists as holding the lock."""
    with tmpfs_disk(tmp_path, "64k") as disk:
        state = disk / "state"
        state.mkdir()
        fill_disk(disk)
        first = AgentDirs(tmp_path / "a", state).hold()
        try:
            assert (state / "state.lock").stat().st_size == 0  # the disk had no room for it
            with pytest.raises(ConfigError) as refused:
                AgentDirs(tmp_path / "b", state).hold()
            message = str(refused.value)
            assert f"another agent (pid {os.getpid()}) keeps its state in {state}" in message
        finally:
            first.release()


@given(st.text(max_size=400), st.integers(0, 2**20), st.integers(0, 2**40))
def test_any_proc_locks_text_gives_a_pid_or_none(text: str, device: int, inode: int) -> None:
    found = flock_holder(text, device, inode)
    assert found is None or 0 < found < 2**31


@given(
    st.integers(1, 2**31 - 1),
    st.integers(0, 255),
    st.integers(0, 2**20 - 1),
    st.integers(0, 2**40),
    st.sampled_from(["", "-> "]),
)
def test_the_holder_of_a_flock_is_read_from_proc_locks(
    pid: int, major: int, minor: int, inode: int, waiting: str
) -> None:
    """The holder's line, among other locks' (a POSIX one on the same file, another file's
    FLOCK); a waiter's line names no holder."""
    device = os.makedev(major, minor)
    where = f"{major:02x}:{minor:02x}:{inode}"
    text = (
        f"1: POSIX  ADVISORY  WRITE 7 {where} 0 EOF\n"
        f"2: FLOCK  ADVISORY  WRITE 8 {major:02x}:{minor:02x}:{inode + 1} 0 EOF\n"
        f"3: {waiting}FLOCK  ADVISORY  WRITE {pid} {where} 0 EOF\n"
    )
    assert flock_holder(text, device, inode) == (None if waiting else pid)
    # A holder in a pid namespace this one does not see is listed as pid 0.
    assert flock_holder(text.replace(f" {pid} ", " 0 "), device, inode) is None


def test_a_lock_made_on_a_full_disk_names_its_pid_and_host_from_the_reserve(
    tmp_path: Path,
) -> None:
    """A state directory whose reserve an earlier agent left, its lock gone (removed by hand,
    a directory restored from a backup without it), on a disk a checkpoint filled: the lock
    was made empty, and another container's agent on the volume, whose kernel lists no pid
    for it, was refused with "pid ?". A block of the reserve makes room for the pid and the
    host."""
    import socket

    with tmpfs_disk(tmp_path, "1m") as disk:
        state = disk / "state"
        state.mkdir()
        reserve = SpaceReserve(state / RESERVE_FILE)
        assert reserve.take() is None
        fill_disk(disk)
        first = AgentDirs(tmp_path / "a", state).hold()
        try:
            written = (state / "state.lock").read_text().split()
            assert written == [str(os.getpid()), socket.gethostname()]
            assert 0 < reserve.allocated() < MIN_RESERVE_BYTES  # one block spared
        finally:
            first.release()


@given(written=st.binary(max_size=400))
def test_any_held_lock_file_names_its_holder_on_one_line(written: bytes) -> None:
    """`forewarn status` prints the holder of the agent lock (an agent starting or
    stopping): whatever the file holds (written by an agent of any version, cut short on a
    full disk, or by hand), the holder is one line naming a pid, never raised on."""
    import fcntl
    import tempfile

    from forewarn.agent.rundir import lock_holder

    # A directory per example, not one made at import: that one was made wherever the module
    # was collected, even with its tests deselected, and left behind in TMPDIR.
    with tempfile.TemporaryDirectory(prefix="forewarn-lock-holder-") as directory:
        path = Path(directory) / "agent.lock"
        path.write_bytes(written)
        fd = os.open(path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            holder = lock_holder(path)
        finally:
            os.close(fd)
        assert holder is not None and holder.startswith("pid "), holder
        assert holder.isprintable(), holder
        assert lock_holder(path) is None  # released: nobody holds it
