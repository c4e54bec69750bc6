"""`Generation.get_dir(..., replace=True)` (`forewarn checkpoint get --replace`) swaps a
generation's files into a directory that holds another's: a copy killed in the middle of the
swap leaves what the next copy into that directory finishes, never a mix of the two or a part
of one. Real processes killed with SIGKILL at a chosen rename, on a local store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.checkpoint.destination import Destination
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FILES = {"model.bin": b"w", "opt/state.bin": b"o", "opt/extra/rng.bin": b"r", "cfg.json": b"c"}

# Kills itself just before the rename that would put its `kill_at`-th entry (0: the first)
# at the top of the destination, as a reclaim or the OOM killer would stop a restore.
_KILLED_MID_SWAP = """
import os, signal, sys
from pathlib import Path
from forewarn.clients.checkpoint import CheckpointStore

url, destination, step, kill_at = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
replace = sys.argv[5:] != ["empty"]
real_replace, real_rename, landed = os.replace, os.rename, []

def watched(real):
    def move(src, dst, *args, **kwargs):
        dst = Path(dst)
        if dst.parent == destination and not dst.name.startswith("."):
            if len(landed) == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            landed.append(dst.name)
        return real(src, dst, *args, **kwargs)
    return move

os.replace, os.rename = watched(real_replace), watched(real_rename)
CheckpointStore(url).get(step).get_dir("", destination, replace=replace)
"""


def fill(root: Path) -> CheckpointStore:
    store = CheckpointStore(root)
    for step in (10, 20, 30):
        store.flush(
            step,
            lambda gen, step=step: [
                gen.write_bytes(name, data * step) for name, data in FILES.items()
            ],
        )
    return store


def contents(directory: Path) -> dict[str, bytes]:
    return {
        path.relative_to(directory).as_posix(): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def generation_files(step: int) -> dict[str, bytes]:
    return {name: data * step for name, data in FILES.items()}


@pytest.mark.parametrize("kill_at", [0, 1, 2])
def test_a_replace_killed_mid_swap_is_finished_by_the_next_copy(
    tmp_path: Path, kill_at: int
) -> None:
    """`get --replace` removed the old files, then moved the new ones in: killed between (a
    reclaim during a restore) it left neither checkpoint whole, and the next `get` into the
    directory found it not empty, or copied beside a part. Now the old entries go aside and
    the new come in by renames after a marker; the next copy into the directory finishes a
    swap that passed its marker (the new generation, whole) and deletes what was set aside."""
    store = fill(tmp_path / "store")
    out = tmp_path / "restored model"
    store.get(10).get_dir("", out)
    (out / "stale.safetensors").write_bytes(b"another layout")
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            _KILLED_MID_SWAP,
            str(tmp_path / "store"),
            str(out),
            "20",
            str(kill_at),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert killed.returncode == -9, killed.stderr

    with Destination(out):  # what the next copy does first: it holds step 20, whole
        pass
    assert contents(out) == generation_files(20)
    assert not [p for p in out.rglob(".*")], "a killed copy's leftovers stayed"
    # Just that copy, recorded as it was finished: the next run's newer step replaces it.
    store.get(30).get_dir("", out)
    assert contents(out) == generation_files(30)
    store.close()


@pytest.mark.parametrize("how", ["empty", "replace"])
def test_the_same_copy_run_again_after_a_kill_mid_swap_succeeds(tmp_path: Path, how: str) -> None:
    """`forewarn checkpoint get URL DIR` killed while it moved the files in (a reclaim during
    a restore), run again as it was (a restarted init container, a retry loop): the second
    run finished the first one's swap, and then refused the directory as not empty (exit 2)
    although it held exactly the generation asked for, so the retry failed for ever. The
    swap it finished is recorded as that copy: a newer generation at the next start replaces
    it (unrecorded, it was refused as not empty, and the job never started again)."""
    store = fill(tmp_path / "store")
    out = tmp_path / "restored"
    out.mkdir()
    if how == "replace":
        (out / "stale.safetensors").write_bytes(b"another layout")
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_SWAP, str(tmp_path / "store"), str(out), "20", "1", how],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert killed.returncode == -9, killed.stderr
    assert set(os.listdir(out)) & set(FILES) != set(FILES), "killed before the swap ended"

    paths = store.get(20).get_dir("", out)
    assert sorted(paths) == sorted(out / name for name in FILES)
    assert contents(out) == generation_files(20)
    assert not [p for p in out.rglob(".*")], "a killed copy's leftovers stayed"
    store.get(30).get_dir("", out)
    assert contents(out) == generation_files(30)
    store.close()


def test_a_copy_that_cannot_record_what_it_is_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk refusing the record of what a copy is (written beside its stage) left the
    empty stage and a partial record in the directory, until the next copy."""
    store = fill(tmp_path / "store")
    out = tmp_path / "out"
    out.mkdir()
    real_write = Path.write_text

    def full(self: Path, *args: object, **kwargs: object) -> int:
        if self.name.startswith(".forewarn-what-"):
            raise OSError(28, "No space left on device", str(self))
        return real_write(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError, match="No space left"):
        store.get(20).get_dir("", out)
    assert os.listdir(out) == []
    store.close()


def test_a_killed_copys_stage_goes_whatever_process_now_has_its_pid(tmp_path: Path) -> None:
    """A killed copy's stage (a whole generation's bytes) was removed only once no process had
    the pid in its name: a `get` run as a container's pid 1 (or any pid reused since) left it
    for ever. A copy into the directory now knows a live copy by the lock it holds."""
    store = fill(tmp_path / "store")
    out = tmp_path / "out"
    out.mkdir()
    stage = out / f".forewarn-get-{os.getpid()}-0badc0de"  # this pid lives, copying nothing
    (stage / "opt").mkdir(parents=True)
    (stage / "opt" / "state.bin").write_bytes(b"half a copy")
    store.get(30).get_dir("", out)
    assert contents(out) == generation_files(30)
    assert not stage.exists()
    store.close()


def test_a_second_copy_into_a_directory_being_copied_into_is_refused(tmp_path: Path) -> None:
    """Two restores into one directory at once (two jobs given one path) each removed and
    moved in their own files, leaving a mix of two generations. The second is refused now,
    naming the directory, and touches nothing."""
    import fcntl

    store = fill(tmp_path / "store")
    out = tmp_path / "out"
    store.get(10).get_dir("", out)
    fd = os.open(out, os.O_RDONLY)  # as a copy under way holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(BlockingIOError, match=r"another copy into .*out is under way"):
            store.get(20).get_dir("", out, replace=True)
    finally:
        os.close(fd)
    assert contents(out) == generation_files(10)
    store.get(20).get_dir("", out, replace=True)
    assert contents(out) == generation_files(20)
    store.close()


def test_an_old_entry_that_cannot_be_moved_aside_leaves_the_old_contents_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry of the directory that cannot be moved (another user's directory, a mount
    point) failed the replace half way: with the old files partly set aside, the directory
    held part of the old checkpoint and none of the new. The old entries go back now, the
    copy is given up with the error, and nothing of it is left."""
    store = fill(tmp_path / "store")
    out = tmp_path / "out"
    store.get(10).get_dir("", out)
    real_rename = os.rename

    def refusing(src: object, dst: object) -> None:
        if Path(str(src)) == out / "opt":
            raise PermissionError(13, "Permission denied", str(src))
        real_rename(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "rename", refusing)
    with pytest.raises(PermissionError):
        store.get(20).get_dir("", out, replace=True)
    monkeypatch.setattr(os, "rename", real_rename)
    assert contents(out) == generation_files(10)
    assert not [p for p in out.rglob(".*")]
    store.get(20).get_dir("", out, replace=True)  # nothing left that the next copy trips on
    assert contents(out) == generation_files(20)
    store.close()


def test_a_copy_that_cannot_start_its_swap_leaves_no_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk refusing the directory's next entry, as the swap began, left the verified
    stage behind (a whole generation's bytes on a disk already full) until the next copy."""
    store = fill(tmp_path / "store")
    out = tmp_path / "out"
    store.get(10).get_dir("", out)
    real_mkdir = Path.mkdir

    def full(self: Path, *args: object, **kwargs: object) -> None:
        if self.name.startswith(".forewarn-old-"):
            raise OSError(28, "No space left on device", str(self))
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", full)
    with pytest.raises(OSError, match="No space left"):
        store.get(20).get_dir("", out, replace=True)
    assert contents(out) == generation_files(10)
    assert not [p for p in out.rglob(".*")]
    store.close()


def test_a_killed_get_files_partial_bytes_are_removed_by_the_next_copy(tmp_path: Path) -> None:
    """`get_file` killed mid-download (a reclaim during a restore) left its hidden partial file
    beside the destination for ever: a whole file's bytes at every try, until the restore's
    disk was full. The next copy to that file removes what no live copy holds (whatever
    process now has the pid in the name), and leaves a live copy's alone."""
    import fcntl
    import signal

    store = fill(tmp_path / "store")
    out = tmp_path / "out"
    out.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    leftovers = [
        out / f".model.bin.part-{os.getpid()}-0badc0de",  # a pid in use again
        out / f".model.bin.part-{gone.pid}-deadbeef",  # an older copy's partial file
    ]
    leftovers[0].mkdir()
    (leftovers[0] / "data").write_bytes(b"half")
    (leftovers[0] / "data.1a2B3c4D").write_bytes(b"boto3's own temp")
    leftovers[1].write_bytes(b"half")
    live = out / f".model.bin.part-{os.getpid()}-1111aaaa"
    live.mkdir()
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        store.get(20).get_file("model.bin", out / "model.bin")
        assert live.exists(), "a live copy's work was removed"
    finally:
        os.close(fd)
    assert (out / "model.bin").read_bytes() == generation_files(20)["model.bin"]
    assert not [p for p in leftovers if os.path.lexists(p)]

    # A real copy killed mid-download: the next one clears what it left.
    killed = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, signal, sys\n"
            "from forewarn.clients.checkpoint import CheckpointStore\n"
            "gen = CheckpointStore(sys.argv[1]).get(30)\n"
            "def die(done, total): os.kill(os.getpid(), signal.SIGKILL)\n"
            "gen.get_file('model.bin', sys.argv[2], progress=die)\n",
            str(tmp_path / "store"),
            str(out / "model.bin"),
        ]
    )
    assert killed.wait(60) == -signal.SIGKILL
    assert [p for p in out.iterdir() if p.name.startswith(".model.bin.part-")]
    store.get(30).get_file("model.bin", out / "model.bin")
    assert sorted(p.name for p in out.iterdir()) == ["model.bin"]  # the live one let go too
    store.close()


def test_a_fresh_volumes_lost_and_found_is_not_what_it_holds(tmp_path: Path) -> None:
    """A restore into a freshly formatted volume's mount point (`mkfs.ext4`, then `forewarn
    checkpoint get URL /mnt/restore`) was refused as not empty: it held `lost+found`, which
    fsck needs, and `--replace` deleted it. At a mount point's root it is passed over."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    store = fill(tmp_path / "store")
    mount = tmp_path / "volume"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)])
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs")
    try:
        (mount / "lost+found").mkdir(mode=0o700)
        store.get(10).get_dir("", mount)
        assert contents(mount) == generation_files(10)
        store.get(20).get_dir("", mount, replace=True)
        assert contents(mount) == generation_files(20)
        assert (mount / "lost+found").is_dir()
    finally:
        subprocess.run(["umount", str(mount)], check=True)
    # Elsewhere a directory of that name is the directory's own, as any other.
    out = tmp_path / "out"
    (out / "lost+found").mkdir(parents=True)
    with pytest.raises(FileExistsError):
        store.get(10).get_dir("", out)
    store.close()


def test_a_hidden_name_with_a_pid_no_process_can_have_is_a_leftover(tmp_path: Path) -> None:
    """A partial file or stage whose name holds a number past any pid (copied from another
    machine, made by hand) raised OverflowError from the liveness check, and every copy to
    that file failed."""
    store = fill(tmp_path / "store")
    out = tmp_path / "out"
    out.mkdir()
    (out / ".model.bin.part-99999999999999999999-ab").write_bytes(b"half")
    store.get(10).get_file("model.bin", out / "model.bin")
    assert sorted(p.name for p in out.iterdir()) == ["model.bin"]
    store.close()


@given(st.binary(max_size=200))
@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_copy_record_that_is_not_ours_is_no_earlier_copy(tmp_path: Path, raw: bytes) -> None:
    """The record a copy leaves on the directory (an extended attribute anyone who may write
    the directory may set): anything else there is no earlier copy, and never an error."""
    directory = tmp_path / "dest"
    directory.mkdir(exist_ok=True)
    try:
        os.setxattr(directory, "user.forewarn.got", raw)
    except OSError:
        pytest.skip("no user extended attributes here")
    found = Destination(directory).copied()
    assert found is None or found == json.loads(raw)["what"]


def test_a_copy_changed_since_it_was_made_is_no_earlier_copy(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path / "store"))
    with store.save(1) as gen:
        for name, data in FILES.items():
            gen.write_bytes(name, data)
    destination = tmp_path / "dest"
    for change in (
        lambda: (destination / "opt" / "extra" / "more.bin").write_bytes(b"m"),
        lambda: (destination / "opt" / "extra" / "rng.bin").unlink(),
        lambda: os.utime(destination / "cfg.json", ns=(0, 0)),
        lambda: (destination / "model.bin").write_bytes(b"W"),
    ):
        store.get(1).get_dir("", destination, replace=True)
        copy = Destination(destination)
        if copy.copied() is None:
            pytest.skip("no user extended attributes here")
        change()
        assert copy.copied() is None


def test_a_copy_record_nested_past_the_parsers_depth_is_no_earlier_copy(tmp_path: Path) -> None:
    directory = tmp_path / "dest"
    directory.mkdir()
    try:
        os.setxattr(directory, "user.forewarn.got", b"[" * 3000)
    except OSError:
        pytest.skip("no user extended attributes (of that size) here")
    assert Destination(directory).copied() is None


# Kills itself as it records the copy it just swapped in (the extended attribute): the files
# are all in place, and nothing says whose they are.
_KILLED_AT_RECORD = """
import os, signal, sys
from pathlib import Path
from forewarn.clients.checkpoint import CheckpointStore

def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

os.setxattr = killed
CheckpointStore(sys.argv[1]).get(int(sys.argv[3])).get_dir("", Path(sys.argv[2]))
"""


def test_a_restart_scripts_next_get_replaces_a_copy_killed_before_its_record(
    tmp_path: Path,
) -> None:
    """A restart script's `forewarn checkpoint get URL DIR` killed once its files were in
    place but before it recorded them: the directory held just that copy, unrecorded, so
    every later `get` of a newer generation (the job's next start, after it saved again) was
    refused as not empty, and the job never started again. The record is now written before
    the copy's hidden entries go, and a copy killed before it is finished and recorded by the
    next one."""
    store = fill(tmp_path / "store")
    out = tmp_path / "restored"
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_AT_RECORD, str(tmp_path / "store"), str(out), "20"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert killed.returncode == -9, killed.stderr
    shown = {name: data for name, data in contents(out).items() if not name.startswith(".")}
    assert shown == generation_files(20)

    store.get(30).get_dir("", out)  # the next start, the job having saved step 30
    assert contents(out) == generation_files(30)
    assert not [p for p in out.rglob(".*")], "a copy's leftovers stayed"
    store.close()


def test_a_directory_without_user_attributes_knows_its_earlier_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DEST on a filesystem without user extended attributes (/dev/shm before Linux 6.6,
    NFS before 4.2): the restart script's second `get` into it was refused as not empty
    (exit 2, the job never started again), and the ranks of one node restoring together
    with `--replace` swapped the files under the rank loading them. The record is kept
    beside the directory there (`.NAME.forewarn-got` in its parent), nothing inside it."""
    import errno

    def unsupported(*args: object, **kwargs: object) -> object:
        raise OSError(errno.ENOTSUP, "Operation not supported")

    for name in ("getxattr", "setxattr", "removexattr"):
        monkeypatch.setattr(os, name, unsupported)
    store = fill(tmp_path / "store")
    out = tmp_path / "shm" / "ckpt"
    assert not store.get(10).get_dir("", out).in_place
    again = store.get(10).get_dir("", out)
    assert again.in_place and contents(out) == generation_files(10)
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
    newer = store.get(20).get_dir("", out)  # the next start, after the job saved again
    assert not newer.in_place and contents(out) == generation_files(20)
    (out / "model.bin").write_bytes(b"the job's own")
    with pytest.raises(FileExistsError):
        store.get(30).get_dir("", out)
    store.close()


@given(st.binary(max_size=200))
@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_record_beside_the_directory_that_is_not_ours_is_no_earlier_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw: bytes
) -> None:
    """The record file beside a directory on a filesystem without user attributes (anyone who
    may write the parent may write it): anything else there is no earlier copy, no error."""
    import errno

    def unsupported(*args: object, **kwargs: object) -> object:
        raise OSError(errno.ENOTSUP, "Operation not supported")

    monkeypatch.setattr(os, "getxattr", unsupported)
    directory = tmp_path / "dest"
    directory.mkdir(exist_ok=True)
    (tmp_path / ".dest.forewarn-got").write_bytes(raw)
    found = Destination(directory).copied()
    assert found is None or found == json.loads(raw)["what"]


@pytest.mark.parametrize("where", ["read-only parent", "mount point"])
def test_a_directory_without_user_attributes_whose_parent_cannot_keep_its_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A DEST without user extended attributes (/dev/shm before Linux 6.6, an emptyDir of
    medium Memory, NFS before 4.2) whose parent cannot keep the record beside it: a read-only
    root filesystem holding the mount point an init container made, or a mount point whose
    parent is another filesystem (the init container's own, gone at its next start while
    DEST stays). The record went nowhere, or somewhere it did not outlive DEST: the restart
    script's second `get` was refused as not empty (exit 2: the job never started again), and
    a second rank's `--replace` that had waited for the first copied again, swapping the
    files under the rank loading them. The record is kept inside DEST there, hidden."""
    import errno
    import io

    def loaded(directory: Path) -> dict[str, bytes]:  # what a loader reads: the record aside
        return {name: data for name, data in contents(directory).items() if name != ".forewarn-got"}

    def unsupported(*args: object, **kwargs: object) -> object:
        raise OSError(errno.ENOTSUP, "Operation not supported")

    for name in ("getxattr", "setxattr", "removexattr"):
        monkeypatch.setattr(os, name, unsupported)
    store = fill(tmp_path / "store")
    parent = tmp_path / "root"
    out = parent / "ckpt"
    out.mkdir(parents=True)  # made by the init container, or the mount itself
    if where == "read-only parent":
        real_open = io.open

        def read_only(file: object, *args: object, **kwargs: object) -> object:
            if isinstance(file, (str, os.PathLike)) and Path(file).parent == parent:
                raise OSError(errno.EROFS, "Read-only file system", str(file))
            return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

        monkeypatch.setattr(io, "open", read_only)
    else:
        real_ismount = os.path.ismount
        monkeypatch.setattr(
            os.path, "ismount", lambda path: Path(path) == out or real_ismount(path)
        )
    assert not store.get(10).get_dir("", out).in_place
    again = store.get(10).get_dir("", out)  # the restart script's next start
    assert again.in_place and loaded(out) == generation_files(10)
    waited = store.get(10).get_dir("", out, replace=True, waited=True)  # a second rank
    assert waited.in_place
    assert not list(parent.glob(".ckpt*")), "kept where it does not live as long as DEST"
    moved = parent / "ckpt-moved"
    out.rename(moved)  # moved after the get: the record goes with it
    assert store.get(10).get_dir("", moved).in_place
    newer = store.get(20).get_dir("", moved)  # the next start, after the job saved again
    assert not newer.in_place and loaded(moved) == generation_files(20)
    assert {p.name for p in moved.iterdir() if p.name.startswith(".")} <= {".forewarn-got"}
    (moved / "model.bin").write_bytes(b"the job's own")
    with pytest.raises(FileExistsError):
        store.get(30).get_dir("", moved)
    store.close()


@given(st.binary(max_size=200))
@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_record_inside_the_directory_that_is_not_ours_is_no_earlier_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw: bytes
) -> None:
    """The record kept inside a directory without user attributes (`.forewarn-got`: a job or
    a person may write one there): anything else there is no earlier copy, no error; it and
    a killed record's temp file are no files the directory holds."""
    import errno

    def unsupported(*args: object, **kwargs: object) -> object:
        raise OSError(errno.ENOTSUP, "Operation not supported")

    monkeypatch.setattr(os, "getxattr", unsupported)
    directory = tmp_path / "dest"
    directory.mkdir(exist_ok=True)
    (directory / ".forewarn-got").write_bytes(raw)
    (directory / ".forewarn-got.999999999-0badf00d").write_bytes(raw)  # killed mid-write
    found = Destination(directory).copied()
    assert found is None or found == json.loads(raw)["what"]
    with Destination(directory) as into:
        assert into.held() == []
    assert [p.name for p in directory.iterdir()] == [".forewarn-got"]


def test_without_locks_a_dead_copys_entries_under_a_reused_pid_are_a_leftover(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DEST on NFS without working locks: a copy under way is known by the pid its entries
    carry. A killed copy's entries whose pid a later process has (a container's restarted
    get, or the shell that runs it, under the pids the first start had) were taken for a
    copy under way: kept for ever, and a get that waits for such a copy waited out its
    bound and failed. The entries carry their process's start time, which tells."""
    import errno
    import fcntl

    def no_locks(*args: object) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    out = tmp_path / "out"
    out.mkdir()
    other = os.getppid()  # alive, and not this process
    with open(f"/proc/{other}/stat", "rb") as stat_file:  # its start: the 22nd field
        started = int(stat_file.read().rsplit(b")", 1)[1].split()[19])
    dead = f"{other}-{started + 1:x}0badf00d"  # made by an earlier process with that pid
    (out / f".forewarn-get-{dead}").mkdir()
    (out / f".forewarn-what-{dead}").write_text("{}")
    live = f"{other}-{started:x}0badf00d"
    with Destination(out, wait=0) as into:  # not waited for: no copy under way
        assert into.held() == []
    assert sorted(p.name for p in out.iterdir()) == []
    (out / f".forewarn-get-{live}").mkdir()  # the live process's own: a copy under way
    with pytest.raises(BlockingIOError, match="under way"):
        Destination(out, wait=0).__enter__()
    assert (out / f".forewarn-get-{live}").is_dir()


def test_without_locks_a_killed_get_files_partial_under_a_reused_pid_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`get_file` onto NFS without working locks: a copy killed mid-download left its
    partial file's directory, and the next copy kept it whenever a live process had the pid
    in its name (a container's copy run as its entrypoint has the same pid at each start):
    a whole file's bytes at every try. The name carries its process's start time, which
    tells a later process given the pid from the copy that made it."""
    import errno
    import fcntl

    def no_locks(*args: object) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    store = fill(tmp_path / "store")
    out = tmp_path / "out"
    out.mkdir()
    with open(f"/proc/{os.getpid()}/stat", "rb") as stat_file:  # its start: the 22nd field
        started = int(stat_file.read().rsplit(b")", 1)[1].split()[19])
    dead = out / f".model.bin.part-{os.getpid()}-{started + 1:x}0badc0de"
    dead.mkdir()
    (dead / "data").write_bytes(b"half")
    live = out / f".model.bin.part-{os.getpid()}-{started:x}1111aaaa"  # another thread's
    live.mkdir()
    store.get(20).get_file("model.bin", out / "model.bin")
    assert not dead.exists(), "a dead copy's partial file stayed"
    assert live.exists(), "a live copy's work was removed"
    store.close()


def test_a_sticky_directory_another_user_made_knows_its_earlier_copy(tmp_path: Path) -> None:
    """DEST made world-writable and sticky (`mkdir -m 1777`) by a root init container, the
    job running as another user: Linux refuses that user the directory's user attributes
    (EPERM: only the owner may set them on a sticky directory), so the copy record was
    written nowhere and the restart script's second `get` into it was refused as not empty
    (exit 2) at every start. The record goes where a filesystem without attributes keeps it."""
    import shutil
    import tempfile

    from other_user import call_as, other_user

    uid, gid = other_user()
    store = fill(tmp_path / "store")
    store.close()
    shared = Path(tempfile.mkdtemp(prefix="forewarn-sticky-", dir="/tmp"))
    try:
        os.chmod(shared, 0o755)
        (shared / "store").mkdir()
        for path in (tmp_path / "store").rglob("*"):
            target = shared / "store" / path.relative_to(tmp_path / "store")
            if path.is_dir():
                target.mkdir()
            else:
                shutil.copy2(path, target)
        out = shared / "ckpt"
        out.mkdir()
        os.chmod(out, 0o1777)  # root's, as the init container made it
        url = str(shared / "store")

        def restarts() -> list[object]:
            found = []
            for step in (10, 10, 20, 20):
                with CheckpointStore(url) as mine:
                    try:
                        found.append(mine.get(step).get_dir("", out).in_place)
                    except OSError as error:
                        found.append(f"{type(error).__name__}: {error}")
            return found

        assert call_as(uid, gid, restarts) == [False, True, False, True]
        assert contents(out).get("model.bin") == generation_files(20)["model.bin"]
    finally:
        shutil.rmtree(shared)


def test_without_locks_an_earlier_releases_leftover_under_a_live_pid_is_no_copy_under_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DEST on NFS without working locks, after an upgrade: the release before named a
    copy's entries `<pid>-<hex>`, without its process's start time. One killed under a pid a
    live process has now (a container's pid 1, the shell that runs the restart script, at
    every start) was taken for a copy under way: each `get` waited its bound out and was
    refused (the job never started again), where the release before copied. An entry last
    changed before the process now holding its pid started is that process's no more."""
    import errno
    import fcntl

    def no_locks(*args: object) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    out = tmp_path / "out"
    out.mkdir()
    other = os.getppid()  # alive, not this process, and started before the entries
    old = f"{other}-0badf00d"
    (out / f".forewarn-get-{old}").mkdir()
    (out / f".forewarn-what-{old}").write_text("{}")
    made = os.stat(out / f".forewarn-get-{old}").st_mtime - 3600  # an hour before it started
    for name in (f".forewarn-get-{old}", f".forewarn-what-{old}"):
        os.utime(out / name, (made, made))
    with Destination(out, wait=0) as into:  # not waited for: no copy under way
        assert into.held() == []
    assert sorted(p.name for p in out.iterdir()) == []
    (out / f".forewarn-get-{old}").mkdir()  # made now by a copy of the release before
    with pytest.raises(BlockingIOError, match="under way"):
        Destination(out, wait=0).__enter__()


def test_a_directory_a_get_recorded_itself_in_saves_back_without_its_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mount point without user attributes keeps its copy's record inside it
    (`.forewarn-got`). A job that restored there, trained, wrote its model back into the
    same directory (`save_pretrained(DEST)`) and saved it with `put_dir(DEST)` put the
    record into the new generation as one of its files: the next restore of that generation
    brought a record of another copy along. It is the directory's, not a file it holds."""
    import errno

    def unsupported(*args: object, **kwargs: object) -> object:
        raise OSError(errno.ENOTSUP, "Operation not supported")

    for name in ("getxattr", "setxattr", "removexattr"):
        monkeypatch.setattr(os, name, unsupported)
    store = fill(tmp_path / "store")
    out = tmp_path / "mnt"
    out.mkdir()
    real_ismount = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda path: Path(path) == out or real_ismount(path))
    store.get(30).get_dir("", out)
    assert (out / ".forewarn-got").is_file()
    (out / "model.bin").write_bytes(b"trained")
    store.flush(40, lambda gen: gen.put_dir("", out))
    assert sorted(store.get(40).files) == sorted(FILES)
    store.close()


def test_without_locks_a_process_says_once_per_directory_that_it_has_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A job restoring from one store into one DEST on NFS without a lock manager, in several
    copies (`get_dir("model", DEST)`, then its optimizer's; the CLI's `get` trying the next
    generation after one was removed meanwhile): the warning that DEST has no working locks
    came at each copy, as though each were news. Said once per directory and process."""
    import errno
    import fcntl

    def no_locks(*args: object) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    store = fill(tmp_path / "store")
    out = tmp_path / "out"
    with caplog.at_level("WARNING", logger="forewarn.checkpoint"):
        store.get(10).get_dir("", out)
        store.get(20).get_dir("", out, replace=True)
        store.get(30).get_dir("", tmp_path / "other")
    said = [r.getMessage() for r in caplog.records if "no working locks" in r.getMessage()]
    assert len(said) == 2, said
    assert str(out) in said[0] and str(tmp_path / "other") in said[1]
    store.close()


def test_a_failed_copy_into_a_directory_that_was_not_there_leaves_none(tmp_path: Path) -> None:
    """`forewarn checkpoint get URL DEST --step N` of a generation whose bytes do not match
    its checksums exited 1 ("nothing was copied") but left DEST made, and empty, with the
    parents it made: docs/checkpoint.md says a failed copy leaves DEST as it was, and a
    restart script or loader that resumes when the directory exists then loaded nothing."""
    store = fill(tmp_path / "store")
    model = tmp_path / "store" / "step-000000000020" / "model.bin"
    model.write_bytes(b"x" * model.stat().st_size)  # sizes right, checksum wrong
    out = tmp_path / "restore" / "run-7"
    with pytest.raises(Exception, match="checksum"):
        store.get(20).get_dir("", out)
    assert not (tmp_path / "restore").exists()
    # A directory that was there stays, empty as it was.
    out.mkdir(parents=True)
    with pytest.raises(Exception, match="checksum"):
        store.get(20).get_dir("", out)
    assert os.listdir(out) == []
    store.close()


def test_a_copy_that_waited_for_one_that_removed_the_directory_copies_into_a_new_one(
    tmp_path: Path,
) -> None:
    """A failed copy removes the destination it made (above), while it holds the lock. A
    copy into the same directory that waited for that lock (another rank's `get --wait`)
    had opened the removed directory: its stage would be made in it, and fail. It makes the
    directory anew and copies there."""
    import threading

    out = tmp_path / "out"
    out.mkdir()
    asked = threading.Event()
    got: list[Path] = []

    def second() -> None:
        with Destination(out, wait=30, waiting=lambda _said: asked.set()) as into:
            got.append(into.stage("second")[1])

    with Destination(out):
        waiter = threading.Thread(target=second)
        waiter.start()
        assert asked.wait(10)
        out.rmdir()  # as the failed copy that made it does, the lock held
    waiter.join(10)
    assert not waiter.is_alive()
    (stage,) = got
    assert stage.parent == out and stage.is_dir()
