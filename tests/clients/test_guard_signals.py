"""CheckpointGuard's signal handlers, in-process: SIGTERM and Ctrl-C ask for a save and an
exit, a second Ctrl-C goes through, and close() puts back what was there before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients import CheckpointGuard

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@pytest.fixture
def handlers() -> Iterator[None]:
    """The test's handlers, whatever the test does to them, are put back afterwards."""
    before = {signum: signal.getsignal(signum) for signum in SIGNALS}
    # Each test starts from a terminal's SIGHUP: a suite run under nohup starts ignoring it.
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    yield
    for signum, handler in before.items():
        signal.signal(signum, handler)


def guard() -> CheckpointGuard:
    return CheckpointGuard(notices=False, flag_file=None)


def test_sigterm_asks_for_a_save_and_an_exit_and_close_restores_the_handler(
    handlers: None,
) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    g = guard()
    signal.raise_signal(signal.SIGTERM)
    assert g.due(1)
    assert g.saved(1).exit
    g.close()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)]
)
def test_an_exit_save_for_a_signal_gives_that_signals_exit_code(
    handlers: None, signum: int, code: int
) -> None:
    """After the save a signal asked for, `exit_code` is 128 + the signal, for
    `sys.exit(guard.exit_code)`: the loop's clean exit 0 marked a reclaimed Kubernetes Job
    complete and torchrun's run successful, so training never resumed."""
    # Python's own Ctrl-C handler: an ignored SIGINT is left ignored by the guard, and so is an
    # ignored SIGHUP (nohup).
    before = {signal.SIGINT: signal.default_int_handler, signal.SIGHUP: signal.SIG_DFL}
    signal.signal(signum, before.get(signum, signal.SIG_IGN))
    g = guard()
    signal.raise_signal(signum)
    assert g.due(1)
    assert g.exit_code == 0, "no exit taken before the save"
    assert g.saved(1).exit
    g.close()
    assert g.exit_code == code


def test_a_second_ctrl_c_while_the_first_is_pending_goes_through(handlers: None) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    g = guard()
    signal.raise_signal(signal.SIGINT)
    assert g.due(1), "the first Ctrl-C asks for a save"
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    g.close()


def test_close_leaves_a_handler_that_replaced_the_guards_alone(handlers: None) -> None:
    """A framework that installs its handler around the guard's lifetime and restores the one
    it found before the guard closes (Lightning restores its pre-fit handlers before its
    callbacks' teardown): close() must not put the framework's handler back over it."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def framework_handler(signum: int, frame: object) -> None:
        pass

    found = signal.signal(signal.SIGTERM, framework_handler)
    g = guard()
    signal.signal(signal.SIGTERM, found)  # the framework's teardown
    g.close()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_handler_python_did_not_install_is_put_back_as_the_default(
    handlers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`signal.signal` answers None for a handler installed outside Python (an embedding
    application, a C extension); handing None back to it raises TypeError."""
    real: Callable[..., Any] = signal.signal
    answered: set[int] = set()

    def installed_from_c(signum: int, handler: Any) -> Any:
        previous = real(signum, handler)
        if signum not in answered:
            answered.add(signum)
            return None
        return previous

    monkeypatch.setattr(signal, "signal", installed_from_c)
    g = guard()
    g.close()
    assert all(signal.getsignal(signum) is signal.SIG_DFL for signum in SIGNALS)


def test_a_handler_replaced_after_the_guard_is_reported(
    handlers: None, caplog: pytest.LogCaptureFixture
) -> None:
    """A library that installs its own SIGTERM handler after the guard takes the platform's
    SIGTERM away from it; the guard cannot put its own back from its thread, but says so
    rather than leave the rank to train on, silently, until the SIGKILL."""
    from support import eventually

    g = guard()

    def library_handler(signum: int, frame: object) -> None:
        pass

    try:
        with caplog.at_level("WARNING", logger="forewarn.clients"):
            signal.signal(signal.SIGTERM, library_handler)
            eventually(
                lambda: "SIGTERM handler was replaced" in caplog.text,
                timeout=10,
                what="the guard's warning",
            )
        assert "library_handler" in caplog.text
        assert "SIGINT" not in caplog.text, "only the replaced handler is reported"
    finally:
        g.close()


def test_a_handler_that_calls_the_guards_is_not_reported(
    handlers: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Lightning's trainer installs one handler that calls each it found, the guard's
    among them: the guard still sees SIGTERM, nothing to say."""
    g = guard()

    class Composed:
        def __init__(self, handlers: list[Any]) -> None:
            self.signal_handlers = handlers

        def __call__(self, signum: int, frame: object) -> None:
            for handler in self.signal_handlers:
                handler(signum, frame)

    try:
        signal.signal(signal.SIGTERM, Composed([signal.getsignal(signal.SIGTERM)]))
        with caplog.at_level("WARNING", logger="forewarn.clients"):
            g._check_handlers()
        assert "replaced" not in caplog.text
        signal.raise_signal(signal.SIGTERM)
        assert g.should_exit
    finally:
        g.close()


def test_a_handler_installed_after_the_guard_that_calls_its_request_is_not_reported(
    handlers: None, caplog: pytest.LogCaptureFixture
) -> None:
    """The README's advice for a job's own handler: install it after the guard and have it
    call `guard.request('signal', exit=True)`. Found: a torch job doing just that logged
    `the SIGTERM handler was replaced ...: the guard no longer sees SIGTERM`, then saved and
    exited 143 on the SIGTERM, as the guard did see it."""
    g = guard()
    seen: list[int] = []

    def jobs_own(signum: int, frame: object) -> None:
        seen.append(signum)
        g.request("signal", exit=True)

    try:
        signal.signal(signal.SIGTERM, jobs_own)
        with caplog.at_level("WARNING", logger="forewarn.clients"):
            g._check_handlers()
        assert "replaced" not in caplog.text
        signal.raise_signal(signal.SIGTERM)
        assert seen == [signal.SIGTERM] and g.should_exit
    finally:
        g.close()


def test_a_replaced_handler_is_reported_with_what_would_let_the_guard_see_the_signal(
    handlers: None, caplog: pytest.LogCaptureFixture
) -> None:
    """One that does not call the guard's request is still reported, with the way out."""
    g = guard()
    try:
        signal.signal(signal.SIGINT, lambda signum, frame: None)
        with caplog.at_level("WARNING", logger="forewarn.clients"):
            g._check_handlers()
        assert "the guard no longer sees SIGINT" in caplog.text
        assert "guard.request('signal', exit=True)" in caplog.text
    finally:
        g.close()


def test_a_guard_made_off_the_main_thread_says_it_does_not_see_signals(
    handlers: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Only the main thread may install signal handlers: a guard made in a thread of its own (a
    training loop run in a thread, as Ray Train runs it) installed none and said nothing, and a
    SIGTERM ended the job without a save, while the README promises save and exit."""
    import threading

    made: list[CheckpointGuard] = []
    with caplog.at_level("WARNING", logger="forewarn.clients"):
        thread = threading.Thread(target=lambda: made.append(guard()))
        thread.start()
        thread.join()
        made[0].close()
        quiet = threading.Thread(
            target=lambda: CheckpointGuard(
                notices=False, flag_file=None, handle_signals=False
            ).close()
        )
        quiet.start()
        quiet.join()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert "not the main thread" in warnings[0]
    assert "SIGTERM" in warnings[0]
    assert "request('signal', exit=True)" in warnings[0]


def test_guards_closed_out_of_order_leave_the_handler_that_was_there_first(
    handlers: None,
) -> None:
    """Two guards (an outer loop's and an inner phase's) closed first-made first: the second's
    close put back the first's handler, though the first was closed, and the process stayed
    deaf to SIGTERM and Ctrl-C for the rest of its life (the closed guard took them and
    nobody read it). A closed guard's handler now hands the signal on to what it found."""
    seen: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: seen.append(signum))
    first = guard()
    second = guard()
    first.close()
    second.close()
    signal.raise_signal(signal.SIGINT)
    assert seen == [signal.SIGINT]
    assert not first.should_exit and not second.should_exit


def test_a_closed_guard_called_by_a_handler_composed_over_it_hands_nothing_back(
    handlers: None,
) -> None:
    """Lightning composes its SIGTERM handler over the one it finds and calls it; a guard made
    under that handler found it, so a closed guard handing the signal on called Lightning's,
    which called the guard's again: RecursionError out of every SIGTERM outside `fit()`. A
    closed guard hands on only when its handler is the process's own."""
    calls: list[str] = []

    def composed(signum: int, frame: Any) -> None:
        calls.append("composed")
        if callable(inner):
            inner(signum, frame)

    inner: Any = None
    signal.signal(signal.SIGINT, composed)
    made = guard()  # finds `composed`
    inner = signal.getsignal(signal.SIGINT)  # the guard's own
    signal.signal(signal.SIGINT, composed)  # composed over the guard's, as Lightning does
    made.close()
    signal.raise_signal(signal.SIGINT)
    assert calls == ["composed"]
    assert not made.should_exit


def test_a_handler_of_the_jobs_own_that_the_guard_replaces_is_reported(
    handlers: None, caplog: pytest.LogCaptureFixture
) -> None:
    """A job with its own SIGTERM handler (a flag its loop reads, a requeue) made the guard
    after it, as the guard's own warning about a handler installed later advises: the guard's
    replaced it without a word, and the job's handler never ran on the platform's SIGTERM.
    Python's own Ctrl-C handler, the default and an ignored signal are nothing to say."""
    ran: list[int] = []

    def requeue_on_sigterm(signum: int, frame: object) -> None:
        ran.append(signum)

    signal.signal(signal.SIGTERM, requeue_on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with caplog.at_level("WARNING", logger="forewarn.clients"):
        g = guard()
        signal.raise_signal(signal.SIGTERM)
        g.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert "requeue_on_sigterm" in warnings[0] and "SIGTERM" in warnings[0]
    assert "not called" in warnings[0]
    assert ran == [], "the job's handler is replaced, as the warning says"

    caplog.clear()
    for quiet in (signal.SIG_DFL, signal.SIG_IGN):
        signal.signal(signal.SIGTERM, quiet)
        with caplog.at_level("WARNING", logger="forewarn.clients"):
            first = guard()
            second = guard()  # the first guard's handler: nothing of the job's is lost
            second.close()
            first.close()
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_lightnings_own_handler_replaced_by_the_guard_is_not_reported(
    handlers: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Lightning installs one handler composing its own with those it found; the guard made in
    `fit()` replaces it on purpose. Only a handler of the job's own inside it is worth a word."""

    def lightning_sigterm(signum: int, frame: object) -> None:
        pass

    lightning_sigterm.__module__ = "lightning.pytorch.trainer.connectors.signal_connector"

    def jobs_own(signum: int, frame: object) -> None:
        pass

    class Composed:
        __module__ = "lightning.pytorch.trainer.connectors.signal_connector"

        def __init__(self, handlers: list[Any]) -> None:
            self.signal_handlers = handlers

        def __call__(self, signum: int, frame: object) -> None:
            for handler in self.signal_handlers:
                handler(signum, frame)

    signal.signal(signal.SIGTERM, Composed([lightning_sigterm, signal.SIG_DFL]))
    with caplog.at_level("WARNING", logger="forewarn.clients"):
        guard().close()
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    signal.signal(signal.SIGTERM, Composed([lightning_sigterm, jobs_own]))
    with caplog.at_level("WARNING", logger="forewarn.clients"):
        guard().close()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "jobs_own" in warnings[0], warnings


def test_an_ignored_sigint_is_left_ignored(handlers: None) -> None:
    """As Python leaves a SIGINT ignored at its start (a script's background job) ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    g = guard()
    try:
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        signal.raise_signal(signal.SIGINT)
        assert not g.due(1) and not g.should_exit
        signal.raise_signal(signal.SIGTERM)  # the platform's: handled all the same
        assert g.due(1) and g.saved(1).exit
    finally:
        g.close()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN


@pytest.mark.parametrize("signum", SIGNALS)
def test_a_signal_while_two_guards_are_open_asks_both_for_a_save_and_an_exit(
    handlers: None, signum: int
) -> None:
    """An outer loop's guard and an inner phase's, both open: the second's handler took the
    signal and the first never heard of it. Once the inner phase closed its guard, the outer
    loop trained on with no save and no exit until the platform's SIGKILL. The open guard's
    handler now hands the signal to the open guard's whose handler it replaced."""
    before = {signal.SIGINT: signal.default_int_handler, signal.SIGHUP: signal.SIG_DFL}
    signal.signal(signum, before.get(signum, signal.SIG_IGN))
    outer = guard()
    inner = guard()
    outer._check_handlers()  # its ticker's check: the inner guard's hands the signal on
    assert signum in outer._watched, "no warning that the outer guard no longer sees it"
    signal.raise_signal(signum)
    assert inner.should_exit
    inner.close()
    assert outer.should_exit, "the outer loop's guard heard the signal too"
    assert outer.due(1) and outer.saved(1).exit
    outer.close()
    assert outer.exit_code == 128 + signum


def test_a_second_ctrl_c_while_two_guards_are_open_goes_through(handlers: None) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    outer = guard()
    inner = guard()
    signal.raise_signal(signal.SIGINT)
    assert inner.should_exit and outer.should_exit
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    inner.close()
    outer.close()


RANK_SAVES_THROUGH_A_REPEATED_CTRL_C = """
import signal, sys
from pathlib import Path
from forewarn.clients import CheckpointGuard

signal.signal(signal.SIGINT, signal.default_int_handler)
guard = CheckpointGuard(notices=False, flag_file=None)
signal.raise_signal(signal.SIGINT)  # the platform's (systemd's KillSignal=SIGINT)


def save(step):
    signal.raise_signal(signal.SIGINT)  # torchrun's copy, come during the flush
    Path(sys.argv[1]).write_text(str(step))


if guard.due(7):
    guard.save(7, save)
guard.close()
sys.exit(guard.exit_code)
"""


def test_a_torchrun_rank_saves_through_a_repeated_sigint(tmp_path: Path) -> None:
    """systemd's control-group kill with `KillSignal=SIGINT` (or Slurm's `scancel
    --signal=INT`) sends SIGINT to every process of the job, and torchrun forwards the one it
    gets to each rank: a rank had two, took the second for a person's insisting Ctrl-C and
    raised KeyboardInterrupt in the exit's save (measured: 1 of 3 such torchrun jobs saved
    nothing). A rank runs in a session of its own, which no terminal's Ctrl-C reaches."""
    checkpoint = tmp_path / "checkpoint"
    done = subprocess.run(
        [sys.executable, "-c", RANK_SAVES_THROUGH_A_REPEATED_CTRL_C, str(checkpoint)],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, TORCHELASTIC_RUN_ID="h73", FOREWARN_RUNTIME_DIR=str(tmp_path)),
        start_new_session=True,  # as torchrun starts its ranks
    )
    assert done.returncode == 130, done.stderr
    assert checkpoint.read_text() == "7"


def test_a_second_ctrl_c_after_the_exit_save_goes_through(handlers: None) -> None:
    """The first Ctrl-C was saved for and the loop left; the job then waits on its way out
    (close() for a background save on a slow mount, or for the acks to a restarting agent).
    The save had cleared what was pending, so a second Ctrl-C counted as a first: it asked for
    a save no loop would make, and the user could not stop the job."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    g = guard()
    signal.raise_signal(signal.SIGINT)
    assert g.due(1) and g.saved(1).exit
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    g.close()
    assert g.exit_code == 130


def test_a_repeated_sigterm_after_the_exit_save_asks_for_no_second_save(handlers: None) -> None:
    """systemd's control-group kill and torchrun's forwarded copy: one SIGTERM each. The second,
    come after the exit's save, asked for the same save again, and a loop that went on after
    the exit's save (one more due() on its way out) saved twice inside the grace."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    g = guard()
    signal.raise_signal(signal.SIGTERM)
    assert g.due(1) and g.saved(1).exit
    signal.raise_signal(signal.SIGTERM)
    assert not g.due(2)
    g.close()
    assert g.exit_code == 143
