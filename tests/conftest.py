"""Shared fixtures: every test gets its own runtime and state directories."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import import_timeouts
import private_tmp
import pytest
from forewarn.agent.config import SYSTEM_STATE_DIR
from forewarn.protocol.wire import SYSTEM_RUNTIME_DIR
from forked_ranks import RankLauncher
from hypothesis import HealthCheck, settings
from scheduling import long_first
from support import AgentProcess, agent_env
from warm_caches import modules_to_rewrite, wants_warm_caches, warm_caches

# The suite starts hundreds of Python processes (agents, simulators, CLIs, trainers, the
# xdist workers), each importing forewarn from an editable checkout. Where the environment
# forbids bytecode caches (PYTHONDONTWRITEBYTECODE, as on the project's CI machines), every one
# of them compiled the same sources again, and every worker re-rewrote every test module: tens
# of CPU-seconds of a 2-core run. The suite writes the caches Python writes by default
# (`__pycache__/`, ignored by git). Not PYTHONPYCACHEPREFIX: with a prefix Python ignores the
# caches pip compiled into site-packages and compiles torch and the standard library again.
# This runs before xdist starts its workers, which inherit the environment.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    sys.dont_write_bytecode = False

# A suite started from a background job of a script (`nohup ... &`, some CI runners) has
# SIGINT ignored, which every process it starts inherits: Ctrl-C then reached no test's job,
# program or rank, and the tests of what Ctrl-C does failed (a run beside the helpers: three).
# The suite runs as from a terminal; the xdist workers and every subprocess inherit this.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# CPython 3.11 (before 3.11.9) keeps the AST constructor's recursion depth per interpreter,
# not per thread: two threads building ASTs at once (pytest reading a failed test's source
# while a test's thread prints a traceback, which 3.11 parses for its carets) end one of them
# in "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905). In a
# run under load that error came from pytest's report of a failed test, was an INTERNALERROR,
# and ended the whole run after 3,433 of 6,100 tests without naming any that failed.
# Every `ast.parse` in the test processes takes turns.
_ast_parse = ast.parse
_ast_turns = threading.RLock()


def _parse_in_turn(*args: Any, **kwargs: Any) -> Any:
    with _ast_turns:
        return _ast_parse(*args, **kwargs)


ast.parse = _parse_in_turn  # type: ignore[assignment]

# Eight workers share two cores with agents, simulators and torch jobs: how long one example
# takes to draw or to run measures that load, not the code. A clean-clone run failed
# test_event's property test on HealthCheck.too_slow (one draw took 3.25 s). The other health
# checks, which are about the strategies themselves, stay on.
# The same examples on every run, as Hypothesis's own "ci" profile draws them: a verdict on a
# commit is then the commit's. Drawn afresh each run, a stop's run failed on the first draw in
# about forty runs to reach a case the test read wrong ("midnight to1600Z"), on a commit
# whose earlier runs had passed. New examples are searched for on purpose, with
# `--hypothesis-profile=explore` (docs/contributing.md).
# A property test that names no count (Hypothesis's default, 100: 237 of them) draws 60 of
# its fixed draw here and all 100 under `thorough` and `explore` (the counts a test names go
# through `examples()`, tests/support.py): those 237 took 112 CPU-s at 100, 73 at 60 (-n 2).
DEFAULT_EXAMPLES = 100
DEFAULT_EXAMPLES_DRAWN = 60
settings.register_profile(
    "forewarn",
    max_examples=DEFAULT_EXAMPLES_DRAWN,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
    print_blob=True,
)
settings.register_profile(
    "explore", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
# The suite's draw with every example a test names (`examples()`, tests/support.py): nightly.
settings.register_profile(
    "thorough", settings.get_profile("forewarn"), max_examples=DEFAULT_EXAMPLES
)
settings.load_profile("forewarn")


# The run's own TMPDIR (tests/private_tmp.py): made by the process that runs the session,
# before xdist starts its workers, which inherit it, as does every process a test starts.
_run_tmp: list[Path] = []


def _use_private_tmp() -> None:
    machine = tempfile.gettempdir()
    run_tmp = private_tmp.make(machine)
    _run_tmp.append(run_tmp)
    # pytest's basetemp stays in the machine's TMPDIR: the same paths as before.
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", machine)
    os.environ["TMPDIR"] = str(run_tmp)
    tempfile.tempdir = None  # read TMPDIR again


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        _use_private_tmp()
    # A test's timeout never cuts an import short (tests/import_timeouts.py).
    config.pluginmanager.register(import_timeouts, "import_timeouts")
    config.addinivalue_line(
        "markers",
        "slow(seconds): the test takes about this much wall time on the 2-core machine; "
        "xdist workers start with the slow tests (tests/scheduling.py)",
    )
    # Before xdist starts its workers: each then reads the rewritten test modules from the
    # cache instead of rewriting all of them (tests/warm_caches.py).
    if wants_warm_caches(config):
        warm_caches(config, modules_to_rewrite(config))


# No test may write the machine's own directories (an agent running there would read what a
# test left: notices, job places, a lock). Each test has its own through `agent_env`; one that
# forgets it as root lands here. Checked once for the whole run, by the process that ran it
# (not each xdist worker): a path that appeared during the run fails the run, named.
MACHINE_DIRS = (SYSTEM_RUNTIME_DIR, SYSTEM_STATE_DIR)
_machine_paths_before: set[str] = set()


def _machine_paths() -> set[str]:
    paths: set[str] = set()
    for top in MACHINE_DIRS:
        for folder, _, files in os.walk(top):
            paths.add(folder)
            paths.update(os.path.join(folder, name) for name in files)
    return paths


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):
        _machine_paths_before.update(_machine_paths())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):
        return
    for run_tmp in _run_tmp:
        left = private_tmp.leftovers(run_tmp)
        private_tmp.remove(run_tmp)
        if left:
            shown = "\n  ".join(left[:20])
            sys.stderr.write(f"\nthe tests left these in TMPDIR ({run_tmp}):\n  {shown}\n")
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    written = sorted(_machine_paths() - _machine_paths_before)
    if written:
        shown = "\n  ".join(written[:20])
        sys.stderr.write(f"\nthe tests wrote the machine's own directories:\n  {shown}\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _slow_seconds(item: pytest.Item) -> float:
    mark = item.get_closest_marker("slow")
    return float(mark.args[0]) if mark is not None else 0.0


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected: slice what will run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Each worker collects the same tests and must order them the same way: the order
    # depends only on the items and the worker count.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    items[:] = long_first(items, workers, _slow_seconds)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return agent_env(tmp_path)


# What the rank scripts of the multi-rank torch tests import (dcp_worker.py, rank_worker.py,
# dist_train.py), and what their ranks would import lazily on a first DCP save or load, DTensor
# op or S3 request (~0.65 CPU-s a rank for torch._dynamo and its kin alone).
RANK_PRELOAD = (
    "torch",
    "torch.distributed",
    "torch.distributed.checkpoint",
    "torch.distributed.device_mesh",
    "torch.distributed.tensor",
    "torch._dynamo",
    "torch.onnx",
    "forewarn.clients",
    "forewarn.clients.checkpoint",
    "forewarn.clients.checkpoint.dcp",
    "forewarn.clients.checkpoint.local",
    "forewarn.clients.checkpoint.s3",
    "boto3",
    "botocore.client",
    "boto3.s3.transfer",
    "zmq",
)


@pytest.fixture(scope="session")
def _rank_launchers() -> Iterator[list[RankLauncher]]:
    launchers: list[RankLauncher] = []
    yield launchers
    for launcher in launchers:
        launcher.close()


@pytest.fixture
def rank_launcher(_rank_launchers: list[RankLauncher]) -> Iterator[RankLauncher]:
    """Forks the ranks of a multi-rank torch test (tests/forked_ranks.py): one launcher per
    pytest process imports torch once; the ranks a test started are gone when it ends. Also
    the single torch jobs of tests not about a fresh interpreter's start (the DataLoader
    jobs, the demo job, the guide's framework examples' pytest)."""
    if not _rank_launchers or not _rank_launchers[-1].alive():
        base = {
            key: value
            for key, value in os.environ.items()
            if key not in ("RANK", "WORLD_SIZE", "PYTHONWARNINGS", "PYTHONUNBUFFERED")
            and not key.startswith("FOREWARN_")
        }
        _rank_launchers.append(RankLauncher(preload=RANK_PRELOAD, env=base))
    launcher = _rank_launchers[-1]
    yield launcher
    launcher.cleanup()


# What `forewarn` loads before it refuses a bad input, for most commands: its parser, the
# configuration and the provider registry (~0.2 CPU-s of a fresh interpreter's 0.23). Not
# forewarn.agent.cli itself: `-m` runs it afresh, and runpy warns on stderr when it is loaded.
CLI_PRELOAD = (
    "forewarn.agent.config",
    "forewarn.agent.eventlines",
    "forewarn.agent.waitrule",
    "forewarn.providers.registry",
    "forewarn.providers.sim_cli",
)


# What `forewarn drill kubernetes` loads beyond that once it has a node and credentials: the
# Kubernetes client library (~0.35 CPU-s of a fresh drill's ~0.75).
KUBERNETES_DRILL_PRELOAD = (
    *CLI_PRELOAD,
    "forewarn.providers.kubernetes.drill",
    # What the drill loads as it runs (its module, only what its `--help` needs).
    "forewarn.providers.kubernetes.api",
    "forewarn.providers.kubernetes.config",
    "forewarn.providers.kubernetes.kubeconfig",
    "kubernetes.client",
    "kubernetes.client.exceptions",
    "urllib3.exceptions",
)

# What `forewarn drill digitalocean` loads beyond that once it reads its mailbox: the drill,
# the mail parser and its dated-time patterns (built at their first use, ~0.5 CPU-s), the
# IMAP session and httpx (~0.7 CPU-s of a fresh drill's ~1.0).
DIGITALOCEAN_DRILL_PRELOAD = (
    *CLI_PRELOAD,
    "httpx",
    "forewarn.providers.digitalocean.drill",
    "forewarn.providers.digitalocean.imap",
    "forewarn.providers.digitalocean.mail",
    "forewarn.providers.digitalocean.watch",
    str(Path(__file__).with_name("digitalocean_patterns_preload.py")),
)

# What `forewarn checkpoint` loads beyond that for a store on S3: its command, the store and
# boto3 with botocore's client (~0.3 CPU-s of a fresh S3 command's ~0.5).
CHECKPOINT_PRELOAD = (
    *CLI_PRELOAD,
    "forewarn.agent.checkpoint_cli",
    "forewarn.clients.checkpoint",
    "forewarn.clients.checkpoint.s3",
    "boto3",
    "botocore.client",
    "boto3.s3.transfer",
)

ForkedForewarn = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def _cli_launchers() -> Iterator[dict[tuple[str, ...], RankLauncher]]:
    """One launcher per preload per pytest process, started when a test first needs it."""
    launchers: dict[tuple[str, ...], RankLauncher] = {}
    yield launchers
    for launcher in launchers.values():
        launcher.close()


def _forked_forewarn(
    launchers: dict[tuple[str, ...], RankLauncher], preload: tuple[str, ...]
) -> tuple[ForkedForewarn, RankLauncher]:
    if preload not in launchers:
        base = {key: value for key, value in os.environ.items() if not key.startswith("FOREWARN_")}
        base.pop("PYTHONUNBUFFERED", None)
        launcher = RankLauncher(preload=preload, env=base)
        # A fork copies only the forking thread: a thread some preloaded module started
        # (a pool, a watcher) could hold a lock each forked command would then wait on.
        if launcher.threads != 1:
            launcher.close()
            raise RuntimeError(f"a CLI launcher has {launcher.threads} threads after {preload}")
        launchers[preload] = launcher
    launcher = launchers[preload]

    def run(
        *args: str, env: dict[str, str], timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        process = launcher.start("-m forewarn.agent.cli", list(args), env)
        out, err = process.communicate(timeout=timeout)
        return subprocess.CompletedProcess(["forewarn", *args], process.wait(), out, err)

    return run, launcher


@pytest.fixture
def run_forewarn_forked(
    _cli_launchers: dict[tuple[str, ...], RankLauncher],
) -> Iterator[ForkedForewarn]:
    """`run_forewarn` in a process forked from one that loaded forewarn's command line once
    (tests/forked_ranks.py): its own process, environment, exit code and stderr, as
    `python -m forewarn.agent.cli ARGS` has them, for ~0.02 CPU-s instead of ~0.23. For the
    many bad inputs of one command; a test of the installed command keeps `run_forewarn`.
    Where this process started the agents' launcher already (`forked_agents`), whose preload
    holds the command line's, that one serves: a second launcher would load it all again."""
    preload = AGENT_PRELOAD if AGENT_PRELOAD in _cli_launchers else CLI_PRELOAD
    run, launcher = _forked_forewarn(_cli_launchers, preload)
    yield run
    launcher.cleanup()


@pytest.fixture
def run_kubernetes_drill_forked(
    _cli_launchers: dict[tuple[str, ...], RankLauncher],
) -> Iterator[ForkedForewarn]:
    """`run_forewarn_forked` from a launcher that also loaded the Kubernetes client library:
    for the cases of `forewarn drill kubernetes` past the first few, which run it fresh."""
    run, launcher = _forked_forewarn(_cli_launchers, KUBERNETES_DRILL_PRELOAD)
    yield run
    launcher.cleanup()


@pytest.fixture
def run_digitalocean_drill_forked(
    _cli_launchers: dict[tuple[str, ...], RankLauncher],
) -> Iterator[ForkedForewarn]:
    """`run_forewarn_forked` from a launcher that also loaded `forewarn drill digitalocean`'s
    mail parser and IMAP session: for the drills past the first few, which run it fresh."""
    run, launcher = _forked_forewarn(_cli_launchers, DIGITALOCEAN_DRILL_PRELOAD)
    yield run
    launcher.cleanup()


@pytest.fixture
def run_checkpoint_forked(
    _cli_launchers: dict[tuple[str, ...], RankLauncher],
) -> Iterator[ForkedForewarn]:
    """`run_forewarn_forked` from a launcher that also loaded `forewarn checkpoint`'s store
    and boto3: for the commands of a test about what `forewarn checkpoint` prints and does to
    a store, past those that run it fresh."""
    run, launcher = _forked_forewarn(_cli_launchers, CHECKPOINT_PRELOAD)
    yield run
    launcher.cleanup()


# What `forewarn agent` loads before it serves, for the providers and notifiers of the tests
# that fork their agents (local, aws, kubernetes; the webhook, Kubernetes Events): its
# configuration, runner, event loop, sockets and HTTP client. Not forewarn.agent.cli itself
# (`-m` runs it afresh, and runpy warns on stderr when it is loaded).
AGENT_PRELOAD = (
    *CLI_PRELOAD,
    "asyncio",
    "email.policy",
    "zmq.asyncio",
    "httpx",
    "forewarn.agent.runner",
    "forewarn.agent.sdnotify",
    "forewarn.agent.telemetry",
    "forewarn.agent.logsetup",
    "forewarn.agent.notifications.webhook",
    "forewarn.providers.local.watch",
    "forewarn.providers.aws.watch",
    "forewarn.providers.kubernetes.watch",
    "forewarn.agent.notifications.kubernetes",
)


@pytest.fixture
def forked_agents(
    _cli_launchers: dict[tuple[str, ...], RankLauncher],
) -> Iterator[RankLauncher]:
    """Each `AgentProcess` the test starts is forked from one launcher per pytest process
    that loaded the agent's modules once (`AgentProcess`, tests/support.py): its own
    process, pid, environment, sockets, signals and exit code, without the ~0.2 CPU-s of a
    fresh interpreter's imports. For files that start many agents to check what the agent
    does; what its start as a fresh `forewarn agent` does is checked where no test forks."""
    _, launcher = _forked_forewarn(_cli_launchers, AGENT_PRELOAD)
    AgentProcess.launcher = launcher
    try:
        yield launcher
    finally:
        AgentProcess.launcher = None
        launcher.cleanup()
