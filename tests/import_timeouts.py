"""pytest-timeout's signal timer, except that it never fires inside an import.

A timeout is an exception raised wherever the test's main thread is. Raised inside an import,
it makes Python forget the module while what the module had registered outside itself stays:
torch's operators live in a C registry, so in a worker whose test timed out while importing
transformers every later transformers test failed with `RuntimeError: duplicate registrations
for aten.linspace.Tensor_Tensor`. Here the timer, when it fires inside an import, looks again
every few hundredths of a second and fails the test as soon as the import is done (or, if the
test ends first, its report): the test still fails for its timeout, and the module is whole for
the next one. An import that runs on
for as long again as the timeout (a hang, not a slow import) is cut then, as before.

Importing torch, transformers and lightning in every worker before its first test would do
it too, at 2.4, 6.9 and 7.5 CPU-s each per worker (measured at load 20), most of it in
workers that never import them: the suite's torch jobs run in other processes.
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType
from typing import Any

import pytest
from pytest_timeout import timeout_sigalrm

# Where CPython's import machinery runs: every frame of an import in progress has it.
IMPORT_FILES = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")
# How often a timer that fired inside an import looks again whether the import is done.
RECHECK = 0.05
# The timeout (seconds) of a test whose timer fired inside an import and has not failed it yet.
OVERDUE = pytest.StashKey[float]()


def importing(frame: FrameType | None) -> bool:
    """Whether `frame` or any frame that called it is CPython's import machinery."""
    while frame is not None:
        if frame.f_code.co_filename in IMPORT_FILES:
            return True
        frame = frame.f_back
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
        return None  # pytest-timeout's own timer: a thread timer ends the whole process
    cut_at = time.monotonic() + 2 * settings.timeout

    def handler(signum: int, frame: FrameType | None) -> None:
        __tracebackhide__ = True
        if importing(frame) and time.monotonic() < cut_at:
            item.stash[OVERDUE] = settings.timeout
            signal.setitimer(signal.ITIMER_REAL, RECHECK)
            return
        if OVERDUE in item.stash:  # failed here, as pytest-timeout fails it
            del item.stash[OVERDUE]
        timeout_sigalrm(item, settings)

    def cancel() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    item.cancel_timeout = cancel  # type: ignore[attr-defined]  # pytest-timeout's own slot
    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A test that ended between the import its timer fired in and the next look fails as the
    timer would have failed it."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    timeout = item.stash.get(OVERDUE, None)
    if timeout is not None and report.when in ("setup", "call"):
        del item.stash[OVERDUE]
        if report.passed:
            report.outcome = "failed"
            report.longrepr = (
                f"Failed: Timeout (>{timeout}s) from pytest-timeout, fired inside an import "
                "that was let finish (tests/import_timeouts.py)"
            )
