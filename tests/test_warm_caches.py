"""The xdist controller rewrites the test modules once, before its workers start
(tests/warm_caches.py): a worker then reads pytest's cache instead of rewriting every module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from warm_caches import modules_to_rewrite, wants_warm_caches, warm_caches

SAMPLE = """\
def test_sample():
    value = 1
    assert value == 2
"""


def _cached(folder: Path) -> list[Path]:
    return sorted((folder / "__pycache__").glob("*-pytest-*.pyc"))


def test_a_pytest_run_reads_the_rewritten_module_the_controller_wrote(
    pytestconfig: pytest.Config, tmp_path: Path
) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    sample = tmp_path / "test_sample.py"
    sample.write_text(SAMPLE)

    assert warm_caches(pytestconfig, [sample]) == 1
    [pyc] = _cached(tmp_path)
    written = pyc.stat()
    # Nothing more to write while the source is unchanged.
    assert warm_caches(pytestconfig, [sample]) == 0

    run = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"),
            *("-p", "no:xdist", "-p", "no:hypothesispytest", "--rootdir", str(tmp_path)),
            str(sample),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # The run used the cache as written (pytest replaces a cache it rewrites), and the asserts
    # in it were rewritten: the failure shows the compared values.
    assert run.returncode == 1, run.stdout + run.stderr
    assert "assert 1 == 2" in run.stdout, run.stdout
    assert _cached(tmp_path) == [pyc]
    now = pyc.stat()
    assert (now.st_ino, now.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)


def test_a_changed_module_is_rewritten_again(pytestconfig: pytest.Config, tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text(SAMPLE)
    assert warm_caches(pytestconfig, [sample]) == 1
    sample.write_text(SAMPLE.replace("2", "3"))
    assert warm_caches(pytestconfig, [sample]) == 1


def test_the_modules_are_the_test_files_and_conftests_outside_skipped_folders(
    pytestconfig: pytest.Config, tmp_path: Path
) -> None:
    for name in (
        "test_a.py",
        "conftest.py",
        "helper.py",
        "sub/b_test.py",
        "sub/notes.txt",
        ".hidden/test_c.py",
        "venv-like/test_d.py",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "venv-like" / "pyvenv.cfg").write_text("")
    config = SimpleNamespace(
        getini={"python_files": ["test_*.py", "*_test.py"], "norecursedirs": [".*"]}.__getitem__,
        invocation_params=SimpleNamespace(dir=tmp_path),
        args=[".", "test_a.py::test_x"],
    )
    found = sorted(path.relative_to(tmp_path) for path in modules_to_rewrite(config))  # type: ignore[arg-type]
    assert found == [Path("conftest.py"), Path("sub/b_test.py"), Path("test_a.py")]


@pytest.mark.parametrize(
    ("options", "worker", "wanted"),
    [
        ({"numprocesses": 8, "dist": "worksteal"}, False, True),
        ({"numprocesses": 8, "dist": "worksteal"}, True, False),
        ({"numprocesses": 0, "dist": "no"}, False, False),
        ({"numprocesses": None}, False, False),
        ({"numprocesses": 8, "dist": "no"}, False, False),
        ({"numprocesses": 8, "dist": "load", "assertmode": "plain"}, False, False),
        ({}, False, False),  # xdist not loaded
    ],
)
def test_only_a_controller_with_workers_rewrites_ahead(
    options: dict[str, object], worker: bool, wanted: bool
) -> None:
    config = SimpleNamespace(option=SimpleNamespace(**options))
    if worker:
        config.workerinput = {}  # type: ignore[attr-defined]
    assert wants_warm_caches(config) is wanted
