"""A drain (or any save request) answered at a step that is durable already wrote nothing, yet
the job's log said `saved at step 0 (drain)`: a job started on a node under a drain another
job had saved for, at its resume point, claimed a save it never made. The line now says the
step is durable already and nothing was written; a save that writes still says `saved`."""

from __future__ import annotations

import logging

import pytest
from forewarn.clients import CheckpointGuard


def _guard() -> CheckpointGuard:
    return CheckpointGuard(notices=False, handle_signals=False, flag_file=None, agree=False)


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "forewarn.clients"]


def test_a_request_at_the_resume_point_says_nothing_was_written(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "forewarn.clients")
    guard = _guard()
    written: list[int] = []
    try:
        guard.resumed(5)
        guard.request("drain")
        assert guard.due(5)
        assert not guard.save(5, written.append).exit
    finally:
        guard.close()
    assert written == []
    lines = _lines(caplog)
    assert not [line for line in lines if "saved at step" in line], lines
    (line,) = [line for line in lines if "durable already" in line]
    assert "step 5 (drain)" in line and "where this run resumed" in line, line


def test_a_request_right_after_a_save_says_nothing_was_written_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "forewarn.clients")
    guard = _guard()
    written: list[int] = []
    try:
        guard.resumed(0)
        guard.request("manual")
        assert guard.due(3)
        guard.save(3, written.append)
        guard.request("drain")
        assert guard.due(3)
        guard.save(3, written.append)
    finally:
        guard.close()
    assert written == [3]
    lines = _lines(caplog)
    assert [line for line in lines if "saved at step" in line] == [
        "forewarn: saved at step 3 (manual)"
    ], lines
    (line,) = [line for line in lines if "durable already" in line]
    assert "step 3 (drain)" in line and "resumed" not in line, line


def test_an_exit_at_the_resume_point_does_not_say_the_caller_saved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """found: the README's loop, started (torch, DataLoader workers) under a drain and a
    terminate, exited 143 at step 0 having written nothing, its log saying `exiting at step 0
    on drain ..., terminate ...; checkpoint saved by the caller`."""
    caplog.set_level(logging.INFO, "forewarn.clients")
    guard = _guard()
    written: list[int] = []
    try:
        guard.resumed(0)
        guard.request("manual", exit=True)
        assert guard.due(0)
        assert guard.save(0, written.append).exit
    finally:
        guard.close()
    assert written == []
    lines = _lines(caplog)
    assert not [line for line in lines if "saved by the caller" in line], lines
    (line,) = [line for line in lines if "exiting at step 0" in line]
    assert "checkpoint of step 0 durable already, where this run resumed" in line, line
    assert "nothing new written" in line, line
