"""shared_build: xdist workers of one session build once, the others wait and reuse it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from session_build import shared_build
from support import eventually


class Worker:
    """The tmp_path_factory of one xdist worker: its base directory inside the session's."""

    def __init__(self, session: Path, name: str) -> None:
        self.base = session / f"popen-{name}"
        self.base.mkdir(parents=True, exist_ok=True)

    def getbasetemp(self) -> Path:
        return self.base


def blocked_on(lock: Path) -> bool:
    """Whether some open file description waits for a lock on `lock` (Linux: /proc/locks
    lists the waiters of a lock after `->`)."""
    inode = f":{lock.stat().st_ino} "
    return any(
        "->" in line and inode in line for line in Path("/proc/locks").read_text().splitlines()
    )


def test_the_second_worker_waits_for_the_first_build_and_reuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    builds: list[Path] = []
    building, finish = threading.Event(), threading.Event()

    def build(directory: Path) -> None:
        builds.append(directory)
        building.set()
        assert finish.wait(30)
        (directory / "wheel").write_text("built once")

    results: dict[str, Path] = {}
    first = threading.Thread(
        target=lambda: results.update(gw0=shared_build(Worker(tmp_path, "gw0"), "b", build))
    )
    first.start()
    assert building.wait(30)
    second = threading.Thread(
        target=lambda: results.update(gw1=shared_build(Worker(tmp_path, "gw1"), "b", build))
    )
    second.start()
    eventually(lambda: blocked_on(tmp_path / "b.lock"), what="the second worker waiting")
    assert "gw1" not in results  # it did not use a half-built directory
    finish.set()
    first.join(30)
    second.join(30)
    assert results["gw0"] == results["gw1"] == tmp_path / "b"
    assert builds == [tmp_path / "b"]
    assert (tmp_path / "b" / "wheel").read_text() == "built once"


def test_a_failed_build_is_not_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")

    def broken(directory: Path) -> None:
        (directory / "half").write_text("")
        raise RuntimeError("the build failed")

    with pytest.raises(RuntimeError):
        shared_build(Worker(tmp_path, "gw0"), "b", broken)
    seen: list[list[str]] = []
    built = shared_build(
        Worker(tmp_path, "gw1"), "b", lambda d: seen.append(sorted(p.name for p in d.iterdir()))
    )
    assert seen == [[]]  # built again, from an empty directory
    assert built == tmp_path / "b"


def test_without_xdist_the_build_lives_in_this_session_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    session = Worker(tmp_path, "main")
    assert shared_build(session, "b", lambda d: None) == session.base / "b"
