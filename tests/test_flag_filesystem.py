"""Which filesystem a flag file is on (`protocol.flagfile.filesystem_type`, read from
/proc/self/mountinfo): a tmpfs's files are this boot's, another's may be an earlier one's."""

from __future__ import annotations

from pathlib import Path

import pytest
from forewarn.protocol.flagfile import filesystem_type, outlives_boot
from hypothesis import given
from hypothesis import strategies as st

_NAME = st.text(st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=8)
_POINTS = st.lists(_NAME, max_size=3).map(lambda names: "/" + "/".join(names))
_TYPES = st.sampled_from(["tmpfs", "ext4", "overlay", "ramfs", "xfs"])


def _escaped(point: str) -> str:
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in point)


def _line(index: int, point: str, kind: str) -> str:
    return f"{index} 1 0:{index} / {_escaped(point)} rw,relatime shared:{index} - {kind} src rw"


@given(st.lists(st.tuples(_POINTS, _TYPES), min_size=1, max_size=6), _POINTS, st.text())
def test_the_longest_mount_point_over_a_path_names_its_type(
    mounts: list[tuple[str, str]], path: str, noise: str
) -> None:
    """The last mount whose point is the path or a folder above it, the longest such, wins;
    a line that is not mountinfo's (`noise`) is skipped, not an error."""
    text = "\n".join([_line(i, p, k) for i, (p, k) in enumerate(mounts)] + [noise.strip()])
    over = [
        (len(p), i, k)
        for i, (p, k) in enumerate(mounts)
        if path == p or path.startswith(p.rstrip("/") + "/")
    ]
    found = filesystem_type(path, text)
    if " - " in noise:
        return  # noise may itself read as a mount line
    assert found == (max(over)[2] if over else None)


def test_a_mountinfo_line_names_its_type() -> None:
    text = (
        "22 1 8:1 / / rw - ext4 /dev/vda rw\n"
        "25 22 0:22 / /run rw,nosuid - tmpfs tmpfs rw,mode=755\n"
        "26 22 0:23 / /var/lib/my\\040dir rw - xfs /dev/vdb rw\n"
    )
    assert filesystem_type("/run/forewarn", text) == "tmpfs"
    assert filesystem_type("/running", text) == "ext4"
    assert filesystem_type("/var/lib/my dir/x", text) == "xfs"
    assert filesystem_type("/", "not mountinfo") is None


def test_outlives_boot_on_this_machine(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not Path("/proc/self/mountinfo").exists():
        pytest.skip("no /proc/self/mountinfo")
    kind = filesystem_type(str(tmp_path.resolve()), Path("/proc/self/mountinfo").read_text())
    assert outlives_boot(tmp_path / "checkpoint-now") == (kind not in ("tmpfs", "ramfs"))
    if shm.is_dir() and filesystem_type(str(shm), Path("/proc/self/mountinfo").read_text()):
        kind = filesystem_type(str(shm), Path("/proc/self/mountinfo").read_text())
        assert outlives_boot(shm / "checkpoint-now") == (kind not in ("tmpfs", "ramfs"))
