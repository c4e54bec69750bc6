"""CheckpointGuard's signal handlers, in-process: SIGTERM and Ctrl-C ask for a save and an
exit, a second Ctrl-C goes through, and close() puts back what was there before."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from forewarn.clients import CheckpointGuard

SIGNALS = (signal.SIGTERM, signal.SIGINT)


@pytest.fixture
def handlers() -> Iterator[None]:
    """The test's handlers, whatever the test does to them, are put back afterwards."""
    before = {signum: signal.getsignal(signum) for signum in SIGNALS}
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


def test_a_second_ctrl_c_while_the_first_is_pending_goes_through(handlers: None) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    g = guard()
    signal.raise_signal(signal.SIGINT)
    assert g.due(1), "the first Ctrl-C asks for a save"
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    g.close()


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
