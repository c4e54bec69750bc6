"""The reclaim drill is a child subreaper only while it runs. Made one for good when a
`Reclaim` was built, the pytest worker that ran the drill's restart test went on adopting the
orphans of every later test in it, left as zombies nobody reaped: a DataLoader worker of a
killed main process kept its /proc entry and three worker tests failed (check 51b)."""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Callable
from pathlib import Path

from forewarn.agent.drill_reclaim import Reclaim
from forewarn.agent.reclaim_procs import subreaper

PR_GET_CHILD_SUBREAPER = 37


def _is_subreaper() -> bool:
    flag = ctypes.c_int(0)
    assert ctypes.CDLL(None, use_errno=True).prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag)) == 0
    return bool(flag.value)


def _in_a_child(body: Callable[[], object]) -> object:
    """`body()`'s JSON answer, run in a forked child: the flag it sets stays there."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(write, json.dumps(body()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        text = answer.read()
    os.waitpid(pid, 0)
    return json.loads(text)


def test_building_a_reclaim_drill_leaves_the_process_as_it_was(tmp_path: Path) -> None:
    def build() -> object:
        Reclaim(tmp_path, {}, handler="guard", seed=1, say=lambda _: None)
        return _is_subreaper()

    assert _in_a_child(build) is False


def test_the_drill_is_a_subreaper_while_it_runs_and_as_it_was_after() -> None:
    def scoped() -> object:
        seen = [_is_subreaper()]
        with subreaper():
            seen.append(_is_subreaper())
        seen.append(_is_subreaper())
        return seen

    assert _in_a_child(scoped) == [False, True, False]
