"""The publisher's sockets on their own, in this process."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from forewarn.agent import publisher
from forewarn.agent.publisher import Publisher


def test_a_socket_file_is_never_open_to_others_even_before_its_chmod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under umask 0 the file used to be 0777 from bind to chmod: another uid that connected
    in between kept its connection (to control, with no token on a socket file)."""
    modes: dict[str, int] = {}
    chmod = os.chmod

    def record(path: str | Path, mode: int) -> None:
        modes[Path(path).name] = stat.S_IMODE(os.stat(path).st_mode)
        chmod(path, mode)

    monkeypatch.setattr(publisher.os, "chmod", record)
    previous = os.umask(0)
    try:
        sockets = Publisher(f"ipc://{tmp_path}/events", f"ipc://{tmp_path}/control")
        try:
            sockets.bind()
        finally:
            sockets.close()
        assert os.umask(0) == 0  # the process umask is back
    finally:
        os.umask(previous)
    assert modes == {"events": 0o770, "control": 0o770}
