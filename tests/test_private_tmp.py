"""The suite's own TMPDIR (tests/private_tmp.py): what a test leaves there fails the run."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import private_tmp


def test_the_suite_runs_with_a_tmpdir_of_its_own(tmp_path: Path) -> None:
    """Files a test or its processes make in TMPDIR land in the run's own directory, where
    the run's end finds what was left (the machine's /tmp is shared with other runs); pytest's
    `tmp_path` stays in the machine's TMPDIR, its paths as long as before."""
    ours = Path(tempfile.gettempdir())
    assert ours == Path(os.environ["TMPDIR"])
    assert ours.name.startswith("fw-")
    machine = Path(os.environ["PYTEST_DEBUG_TEMPROOT"])
    assert ours.parent == machine
    assert ours not in tmp_path.parents


def test_leftovers_name_what_a_test_left_but_not_the_libraries_own(tmp_path: Path) -> None:
    run_tmp = private_tmp.make(str(tmp_path))
    assert stat.S_IMODE(run_tmp.stat().st_mode) == 0o1777  # as /tmp: other uids' tests use it
    assert private_tmp.leftovers(run_tmp) == []
    (run_tmp / "forewarn-configdoc-abc").mkdir()
    (run_tmp / "tmpx1cacert").write_text("")
    for library in ("pymp-k2j3", "torchelastic_a1b2", "torchinductor_root"):
        (run_tmp / library).mkdir()
    (run_tmp / "tmpab12cacert.pem").write_text("")
    assert private_tmp.leftovers(run_tmp) == ["forewarn-configdoc-abc", "tmpx1cacert"]
    private_tmp.remove(run_tmp)
    assert not run_tmp.exists()
