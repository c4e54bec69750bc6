"""Each cloud watcher's progress bound (`ProgressBounded`), past which the agent takes it
for hung: long enough for its longest quiet time that is no fault (a long-poll, a watch, an
IDLE), and derived from its settings, so that raising them raises it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from forewarn.providers import REGISTRY, PollHealth, ProgressBounded, WatcherContext
from forewarn.providers.base import stall_bound

URL = "http://127.0.0.1:9"
MAILBOX = {"imap_host": "127.0.0.1", "credentials_file": "/nonexistent/imap.env"}
# The longest a working watcher, with its defaults, may go without an answer or an error.
QUIET = {
    "aws": 5.0 + 2.0,  # the slowest path's interval, then its request
    "gcp": 15 + 5.0,  # a long-poll of timeout_sec, read within its margin
    "azure": 130.0,  # the first request may take that long
    "kubernetes": 300 + 30.0,  # a watch of watch_timeout, within its read margin
    "digitalocean": 1500.0 + 30.0,  # an IDLE until idle_renew, then its answer
}


async def _bound(name: str, tmp_path: Path, **values: Any) -> float | None:
    spec = REGISTRY[name]
    settings = spec.settings.model_validate({"url": URL, **values})
    watcher = spec.watcher(settings, WatcherContext(tmp_path, tmp_path, PollHealth(name)))
    try:
        assert isinstance(watcher, ProgressBounded)
        return watcher.progress_bound()
    finally:
        closer = getattr(watcher, "aclose", None)
        if closer is not None:
            await closer()


@pytest.mark.parametrize("name", sorted(QUIET))
async def test_the_bound_outlasts_the_longest_quiet_time_of_a_working_watcher(
    name: str, tmp_path: Path
) -> None:
    values = MAILBOX if name == "digitalocean" else {}
    bound = await _bound(name, tmp_path, **values)
    assert bound is not None and bound >= 2 * QUIET[name], bound


@pytest.mark.parametrize(
    ("name", "key", "value"),
    [
        ("aws", "timeout", 30.0),
        ("gcp", "timeout_sec", 600),
        ("azure", "first_call_timeout", 600.0),
        ("kubernetes", "watch_timeout", 3600),
        ("digitalocean", "idle_renew", 7200.0),
    ],
)
async def test_the_bound_follows_the_settings(
    name: str, key: str, value: float, tmp_path: Path
) -> None:
    values = MAILBOX if name == "digitalocean" else {}
    before = await _bound(name, tmp_path, **values)
    after = await _bound(name, tmp_path, **values, **{key: value})
    assert before is not None and after is not None and after > before + value


async def test_a_digitalocean_watcher_without_a_mailbox_has_no_bound(tmp_path: Path) -> None:
    # It says once that nothing is configured and then waits for good: no hang.
    assert await _bound("digitalocean", tmp_path) is None


def test_the_bound_has_a_floor() -> None:
    assert stall_bound(0.0, 0.1) == 2.0
    assert stall_bound(10.0, 5.0) == 30.0
