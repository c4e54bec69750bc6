"""The rank launcher of the multi-rank torch tests (tests/forked_ranks.py) keeps what a
subprocess per rank gave them: each rank its own process, argv, environment, pipes and exit
status; a rank killed by a signal says so; nothing outlives the launcher."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from forked_ranks import LauncherGone, RankLauncher

SCRIPT = Path(__file__).with_name("forked_rank_script.py")


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_each_rank_has_its_own_process_argv_environment_and_exit_status() -> None:
    env = dict(os.environ)
    with RankLauncher(env=env) as launcher:
        ranks = [
            launcher.start(SCRIPT, ["ok"], {**env, "TAG": "zero"}),
            launcher.start(SCRIPT, ["exit", "3"], {**env, "TAG": "one"}),
            launcher.start(SCRIPT, ["fail"], {**env, "TAG": "two"}),
            launcher.start(SCRIPT, ["noisy"], env),  # 300 kB on stderr: read while the rank runs
        ]
        outputs = [rank.communicate(timeout=60) for rank in ranks]
    said = [json.loads(out.splitlines()[0]) for out, _ in outputs]
    assert [line["argv"] for line in said] == [["ok"], ["exit", "3"], ["fail"], ["noisy"]]
    assert [line["tag"] for line in said] == ["zero", "one", "two", None]
    assert [line["pid"] for line in said] == [rank.pid for rank in ranks]
    assert len({os.getpid(), *(rank.pid for rank in ranks)}) == 5
    assert [rank.returncode for rank in ranks] == [0, 3, 1, 0]
    assert "RuntimeError: rank broke" in outputs[2][1]
    assert outputs[3][1] == "x" * 300_000


def test_a_rank_leaves_after_its_non_daemon_threads_as_an_interpreter_would() -> None:
    with RankLauncher(env=dict(os.environ)) as launcher:
        rank = launcher.start(SCRIPT, ["thread"], dict(os.environ))
        out, _ = rank.communicate(timeout=60)
    assert rank.returncode == 0
    assert out.splitlines()[-1] == "thread done"


def test_a_killed_rank_reports_the_signal_and_no_rank_outlives_the_launcher() -> None:
    launcher = RankLauncher(env=dict(os.environ))
    try:
        killed, left = (launcher.start(SCRIPT, ["hang"], dict(os.environ)) for _ in range(2))
        for rank in (killed, left):
            assert rank.stdout is not None
            assert json.loads(rank.stdout.readline())["pid"] == rank.pid
        os.kill(killed.pid, signal.SIGKILL)
        assert killed.wait(30) == -signal.SIGKILL
        assert left.poll() is None
    finally:
        launcher.close()
    assert gone(left.pid) and gone(killed.pid)


def test_a_rank_in_a_session_of_its_own_takes_a_signal_to_its_group_alone() -> None:
    """`session=True` is `start_new_session=True`: a test that signals the job's whole group
    (as systemd, Slurm and torchrun do) reaches the job, not the launcher or other ranks."""
    with RankLauncher(env=dict(os.environ)) as launcher:
        grouped = launcher.start(SCRIPT, ["hang"], dict(os.environ), session=True)
        other = launcher.start(SCRIPT, ["hang"], dict(os.environ))
        for rank in (grouped, other):
            assert rank.stdout is not None
            assert json.loads(rank.stdout.readline())["pid"] == rank.pid
        assert os.getsid(grouped.pid) == os.getpgid(grouped.pid) == grouped.pid
        assert os.getpgid(other.pid) != other.pid
        os.killpg(grouped.pid, signal.SIGTERM)
        with grouped:  # as `with subprocess.Popen(...)`: waits for the exit
            pass
        assert grouped.returncode == -signal.SIGTERM
        assert other.poll() is None and launcher.alive()


def test_a_preload_that_fails_fails_the_launcher_with_its_traceback(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_here\n")
    with pytest.raises(LauncherGone, match="no_such_module_here"):
        RankLauncher(preload=(str(broken),), env=dict(os.environ))


def test_ranks_of_several_scripts_and_tests_share_one_launcher(
    rank_launcher: RankLauncher, tmp_path: Path
) -> None:
    other = tmp_path / "other.py"
    other.write_text("import sys\nprint(sys.argv[1:], sys.path[0])\nsys.exit(5)\n")
    ours = rank_launcher.start(SCRIPT, ["ok"], dict(os.environ))
    theirs = rank_launcher.start(other, ["a", "b"], {**os.environ, "PYTHONUNBUFFERED": "1"})
    hanging = rank_launcher.start(SCRIPT, ["hang"], dict(os.environ))
    assert ours.communicate(timeout=60)[0].startswith("{") and ours.returncode == 0
    assert theirs.communicate(timeout=60)[0] == f"['a', 'b'] {tmp_path}\n"
    assert theirs.returncode == 5
    rank_launcher.cleanup()  # what the fixture does after each test
    assert hanging.returncode == -signal.SIGKILL and gone(hanging.pid)


@pytest.mark.parametrize("words", [["--version"], ["notif"], ["agent", "--exit-margin", "5x"]])
def test_a_module_runs_as_python_m_runs_it(words: list[str], tmp_path: Path) -> None:
    # `-m forewarn.agent.cli`, forked: what the fresh `python -m` prints and exits with,
    # and the working directory first on sys.path, as `-m` puts it (not the launcher's).
    env = {**dict(os.environ), "FOREWARN_RUNTIME_DIR": str(tmp_path)}
    fresh = subprocess.run(
        [sys.executable, "-m", "forewarn.agent.cli", *words],
        env=env,
        capture_output=True,
        text=True,
    )
    with RankLauncher(env=dict(os.environ), preload=("forewarn.agent.config",)) as launcher:
        forked = launcher.start("-m forewarn.agent.cli", words, env)
        said = forked.communicate(timeout=60)
        site = launcher.start("-m site", [], env)
        paths, _ = site.communicate(timeout=60)
    assert (forked.returncode, *said) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert site.returncode == 0
    assert paths.splitlines()[1].strip() == repr(os.getcwd()) + ","
