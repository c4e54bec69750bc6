"""The guard's signal handling: SIGTERM, SIGINT and SIGHUP asking for a save and an exit.

`SignalHandling` installs the guard's handler (and tells the DataLoader workers forked from
then on to outlive a job-wide SIGTERM, see forewarn.clients.workers), says when another
handler replaced it, hands a signal on where the guard is not the one to act on it (a copy in
a forked child, a closed guard, a guard stacked over another), and puts back what it replaced.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import weakref
from types import FrameType
from typing import Any

from .guard_state import GuardState
from .guard_terminal import detach_hung_up_terminal, watch_terminal_output
from .workers import _unprotected_workers, guard_handles_sigterm
from .workers_guardbyte import guard_handles_sighup

log = logging.getLogger("forewarn.clients")


def _a_launchers_rank() -> bool:
    """Whether this process is a torchrun rank: torchrun starts each in a session of its own,
    which no terminal's Ctrl-C reaches, and forwards the signal it gets, which a control-group
    kill also sends the rank. A repeated SIGINT there is that copy, not a person insisting."""
    return "TORCHELASTIC_RUN_ID" in os.environ and os.getsid(0) == os.getpid()


class SignalHandling(GuardState):
    """The signal side of `CheckpointGuard`."""

    def _install_signals(self, handle_signals: bool) -> None:
        """Install the guard's SIGTERM and SIGINT handlers (on the main thread only; a
        WARNING elsewhere), keeping what they replace for close() and for handing on."""
        self._previous_handlers: dict[int, Any] = {}
        self._handlers_closed = False
        self._protecting_workers = False
        self._protecting_from_hangup = False
        self._forwarding: set[int] = set()  # signals a closed guard is handing on
        # The process that made the guard, and the child forked from it whose copy this is
        # once that child has been told (_forked_from_guarded_process): see _not_run_here.
        self._made_in = os.getpid()
        self._forked_into = 0
        # Signals whose handler should still be ours; the ticker says when one is not.
        self._watched: set[int] = set()
        if handle_signals and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                if signum == signal.SIGINT and signal.getsignal(signum) == signal.SIG_IGN:
                    # Ignored from the start, as a shell starts a script's background job
                    # (`python train.py &`, `nohup ... &`): the Ctrl-C meant for the script
                    # reaches its whole process group, and the job is not to stop for it.
                    # Python leaves it ignored too. The platform's SIGTERM is still handled.
                    continue
                if signum == signal.SIGHUP and not _hangup_is_ours(signal.getsignal(signum)):
                    # A terminal's hangup (its ssh session closed) ended the job at once, no
                    # save, every step since the last one lost: at its default it is handled
                    # as SIGTERM is. Ignored (`nohup`) it stays so, the job trains on; the
                    # job's own handler (SIGHUP is a reload in many programs) stays in place.
                    # An open guard's (an outer loop's) is stacked on, as for SIGTERM.
                    continue
                previous = signal.signal(signum, self._on_signal)
                self._watched.add(signum)
                if signum == signal.SIGTERM:
                    # DataLoader workers forked from now on outlive a job-wide SIGTERM, so the
                    # loop reaches this handler's save (forewarn.clients.workers).
                    guard_handles_sigterm(True)
                    self._protecting_workers = True
                    _warn_of_unprotected_workers()
                if signum == signal.SIGHUP:
                    # And a SIGHUP to the job's whole process group (bash's, as its terminal
                    # closes): the guard saves on it, its workers feed the loop until then.
                    guard_handles_sighup(True)
                    self._protecting_from_hangup = True
                    # A print to the terminal after it hung up, before that SIGHUP, raised
                    # EIO in the loop: such a write is dropped and saved on (guard_terminal).
                    watch_terminal_output()
                # None: a handler installed outside Python, which Python cannot put back;
                # handing None to signal.signal() raises, so the default stands in for it.
                self._previous_handlers[signum] = signal.SIG_DFL if previous is None else previous
                replaced = _jobs_own_handlers(previous)
                if replaced:
                    # A job's own handler (a flag its loop reads, a SLURM requeue) made before
                    # the guard, as the warning about one made after it advises, was replaced
                    # without a word and never ran on the platform's SIGTERM.
                    log.warning(
                        "forewarn: the guard's %s handler replaces %s, installed before it, "
                        "which is not called while the guard's is installed (close() puts it "
                        "back): act on the guard's exit in the loop instead (SaveResult.exit, "
                        "should_exit), or install it after the guard and have it call "
                        "guard.request('signal', exit=True)",
                        signal.Signals(signum).name,
                        ", ".join(replaced),
                    )
            if self._watched:
                _HANDLING_SIGNALS.add(self)
        elif handle_signals:
            # Only the main thread may install signal handlers: a guard made in a thread of its
            # own (a loop run in a thread, as Ray Train runs it) installed none and said
            # nothing, and a SIGTERM ended the job without a save.
            log.warning(
                "forewarn: the guard was made in thread %r, not the main thread: it installs no "
                "SIGTERM or SIGINT handler, and a SIGTERM ends the job without a save. Make "
                "the guard on the main thread, or have a handler there call "
                "guard.request('signal', exit=True) (handle_signals=False says this is meant)",
                threading.current_thread().name,
            )

    def _restore_signals(self) -> None:
        """close(): put back what the guard's handlers replaced, where they still stand."""
        self._watched.clear()
        for signum, handler in self._previous_handlers.items():
            # Only while the guard's own handler is installed: code that replaced it since has
            # put back what it wants. Lightning restores its pre-fit handlers before its
            # callbacks' teardown; putting back the handler it had then replaced (its own,
            # which ignores SIGTERM) left the process deaf to SIGTERM after fit().
            if signal.getsignal(signum) == self._on_signal:
                signal.signal(signum, handler)
        if self._protecting_workers:
            self._protecting_workers = False
            guard_handles_sigterm(False)
        if self._protecting_from_hangup:
            self._protecting_from_hangup = False
            guard_handles_sighup(False)
        _HANDLING_SIGNALS.discard(self)
        # Kept, not cleared: a guard made after this one and closed after it puts this one's
        # handler back, which then hands each signal on to what it found (see _on_signal).
        self._handlers_closed = True

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._not_run_here():
            self._hand_on_in_child(signum, frame)
            return
        if self._handlers_closed:
            # Guards closed out of order (made A, B; closed A, B): B's close put back A's
            # handler, and the process was deaf to SIGTERM and Ctrl-C from then on. Handed on
            # only when this handler is the process's own: one that another handler calls as
            # the one it found (Lightning's, composed over it) is that handler's to act on,
            # and handing on from there went round Lightning's handler and this one without
            # end (RecursionError out of the SIGTERM). Never twice in one delivery either.
            if signal.getsignal(signum) == self._on_signal and signum not in self._forwarding:
                self._forwarding.add(signum)
                try:
                    self._forward(signum, frame)
                finally:
                    self._forwarding.discard(signum)
            return
        name = signal.Signals(signum).name
        if signum == signal.SIGHUP:
            detach_hung_up_terminal()
        if self._exit and ("signal" in self._pending or self._exit_answered):
            if signum in (signal.SIGTERM, signal.SIGHUP) or _a_launchers_rank():
                # Platforms send SIGTERM more than once: systemd's KillMode=control-group hits
                # every process and torchrun forwards its own copy to each rank's group. A
                # repeat is not a person insisting; the platform's SIGKILL follows anyway.
                # So a torchrun rank's SIGINT (systemd's KillSignal=SIGINT, Slurm's).
                return
            # A second Ctrl-C while an exit is pending or answered: the user insists.
            self._watched.discard(signum)
            previous = self._previous_handlers.get(signum, signal.SIG_DFL)
            signal.signal(signum, previous)
            os.kill(os.getpid(), signum)
            return
        self._pending["signal"] = name
        self._exit_by.add("signal")
        self._exit = True
        self._wake = True
        below = self._open_guard_below(signum)
        if below is not None:
            # Two guards open (an outer loop's, an inner phase's): the one this handler
            # replaced heard nothing, and once the inner phase closed its guard the outer loop
            # trained on, unsaved, until the platform's SIGKILL.
            below._on_signal(signum, frame)

    def _not_run_here(self) -> bool:
        """Whether this is a copy in a forked child that has run no loop with it: no `due`
        since the fork, or the child not told of the fork yet (a signal that came first)."""
        here = os.getpid()
        return self._made_in != here and (self._forked_into != here or self._seen_step is None)

    def _hand_on_in_child(self, signum: int, frame: FrameType | None) -> None:
        """In a child forked from the guard's process (a Pool's worker, a helper process, one
        of multiprocessing's "fork" children) that has run no loop with the guard (no `due`
        since the fork): the signal goes to what the guard replaced, as without it. The
        handler the child inherited only asked the child's copy, which nothing reads, to save:
        `terminate()` and a job-wide SIGTERM left the child running, and multiprocessing's exit
        handler, which stops daemonic children with SIGTERM and waits for them, held the job's
        exit for ever. A forked rank that runs its loop with the guard is asked to save and
        exit, as its parent is."""
        if signum in self._forwarding:
            return
        previous = self._previous_handlers.get(signum, signal.SIG_DFL)
        below = getattr(previous, "__self__", None)
        while (
            isinstance(below, SignalHandling)
            and previous == below._on_signal
            and (below._handlers_closed or below._not_run_here())
        ):
            # Guards stacked (an outer loop's, an inner phase's): to what the lowest replaced.
            previous = below._previous_handlers.get(signum, signal.SIG_DFL)
            below = getattr(previous, "__self__", None)
        self._forwarding.add(signum)
        try:
            self._deliver(previous, signum, frame)
        finally:
            self._forwarding.discard(signum)

    def _open_guard_below(self, signum: int) -> SignalHandling | None:
        """The open guard whose handler this one replaced for `signum`, if one did."""
        previous = self._previous_handlers.get(signum)
        below = getattr(previous, "__self__", None)
        if (
            isinstance(below, SignalHandling)
            and previous == below._on_signal
            and not below._handlers_closed
            # Not the copy of a guard of the process this one was forked from (a forked
            # rank's own guard over its launcher's): that copy hands the signal on to what it
            # replaced, the process's own, and this guard took it for a second Ctrl-C.
            and not below._not_run_here()
        ):
            return below
        return None

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        self._deliver(self._previous_handlers.get(signum, signal.SIG_DFL), signum, frame)

    def _deliver(self, previous: Any, signum: int, frame: FrameType | None) -> None:
        """Hand `signum` to `previous`, a handler this guard replaced: called, or for the
        default action put back where this guard's handler stands and raised again (the
        process ends, or SIGINT's KeyboardInterrupt handler is not ours); ignored stays so."""
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            if signal.getsignal(signum) == self._on_signal:
                signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _check_handlers(self) -> None:
        # A library that installs its own SIGTERM handler after the guard (a trainer, a
        # launcher) silently took the platform's SIGTERM away from it: the rank trained on
        # until the SIGKILL, with no save. Only the main thread may put ours back, and the
        # other handler may be wanted, so it is said, once per signal.
        for signum in list(self._watched):
            current = signal.getsignal(signum)
            # Lightning's trainer wraps the handler it finds with its own and calls both.
            chained = getattr(current, "signal_handlers", ())
            if not isinstance(chained, (list, tuple)):
                chained = ()
            above = getattr(current, "__self__", None)
            if isinstance(above, SignalHandling) and above._open_guard_below(signum) is self:
                continue  # a guard made after this one, which hands it on (_on_signal)
            if current != self._on_signal and self._on_signal not in chained:
                if _calls_request(current):
                    # The job's own, installed after the guard as the README advises: it asks
                    # the guard for the save itself. Said as replaced, a job doing just that
                    # read that the guard no longer saw SIGTERM, and then saw it save on it.
                    continue
                self._watched.discard(signum)
                log.warning(
                    "forewarn: the %s handler was replaced after the guard installed its own "
                    "(now %s): the guard no longer sees %s. Create the guard after the code "
                    "that installs that handler, or call guard.request('signal', exit=True) "
                    "from it",
                    signal.Signals(signum).name,
                    getattr(current, "__qualname__", current),
                    signal.Signals(signum).name,
                )


def _hangup_is_ours(handler: object) -> bool:
    """Whether the guard handles SIGHUP over `handler`: the default, or a guard's own."""
    return handler == signal.SIG_DFL or isinstance(
        getattr(handler, "__self__", None), SignalHandling
    )


def _calls_request(handler: object) -> bool:
    """Whether `handler`'s own code calls a `request` (a job's handler that asks the guard,
    `guard.request('signal', exit=True)`): read from its code's names, through a bound method,
    a `functools.partial` or a callable object's `__call__`."""
    for _ in range(4):
        inner = getattr(handler, "func", None) or getattr(handler, "__func__", None)
        if inner is None and not hasattr(handler, "__code__"):
            # A callable object's method, its class's own or inherited.
            inner = next(
                (vars(k)["__call__"] for k in type(handler).__mro__ if "__call__" in vars(k)), None
            )
        if inner is None or inner is handler:
            break
        handler = inner
    code = getattr(handler, "__code__", None)
    return code is not None and "request" in getattr(code, "co_names", ())


# The guards whose signal handlers are installed in this process (made, not closed).
_HANDLING_SIGNALS: weakref.WeakSet[SignalHandling] = weakref.WeakSet()


def _forked_from_guarded_process() -> None:
    # The child runs no loop with these guards until it calls `due` (a forked rank may):
    # meanwhile their handlers hand signals on (_hand_on_in_child).
    child = os.getpid()
    for guard in list(_HANDLING_SIGNALS):
        guard._seen_step = None
        guard._forked_into = child


os.register_at_fork(after_in_child=_forked_from_guarded_process)


# Handlers that are a framework's own, replaced on purpose: Lightning's (composed with those
# it found; the Lightning callback's guard replaces it in fit()).
_FRAMEWORK_MODULES = ("lightning.", "pytorch_lightning.", "lightning_fabric.")


def _jobs_own_handlers(handler: object) -> list[str]:
    """The names of the job's own Python signal handlers in `handler`: not the default, an
    ignored signal, Python's Ctrl-C handler, a guard's, or Lightning's (whose composed handler
    is looked inside)."""
    if handler is None or not callable(handler) or handler is signal.default_int_handler:
        return []
    if isinstance(getattr(handler, "__self__", None), SignalHandling):
        return []
    inner = getattr(handler, "signal_handlers", None)
    if isinstance(inner, (list, tuple)):
        return [name for each in inner for name in _jobs_own_handlers(each)]
    module = getattr(handler, "__module__", None) or ""
    if module.startswith(_FRAMEWORK_MODULES):
        return []
    return [str(getattr(handler, "__qualname__", None) or handler)]


__all__ = ["SignalHandling"]


def _warn_of_unprotected_workers() -> None:
    """Says once per guard which worker processes a job-wide SIGTERM still ends: those started
    before forewarn.clients was imported (its hooks protect a worker as it starts)."""
    pids = _unprotected_workers()
    if pids:
        log.warning(
            "forewarn: %d worker process(es) (pid %s; DataLoader or pool workers) started "
            "before forewarn.clients was imported end on a SIGTERM to the whole job "
            "(systemd's control-group kill, torchrun's, kill -TERM -<pgid>), and torch then "
            "raises `DataLoader worker ... is killed by signal` in the loop, before its save, "
            "or as the job exits: import forewarn.clients before the DataLoader starts its "
            "workers (at the top of the script)",
            len(pids),
            ", ".join(map(str, pids)),
        )
