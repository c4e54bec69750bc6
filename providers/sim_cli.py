"""Start-up shared by every `forewarn simulate <provider>`: the common flags (`--host`,
`--port`, `--ready-file`, `--fault`, and `--notice` where the simulator raises notices),
scripted notices (`--<name>-after S` is `--notice KIND,after=S`), readiness (the URL on
stdout once listening, and in the ready file) and a clean stop on SIGTERM, SIGINT or SIGHUP.

A provider's simulate module declares one `SimulatorCommand` and exports its
`add_arguments` and `run`. Every bad value exits 2 with one `forewarn:` line.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forewarn.protocol.errors import UsageError
from forewarn.protocol.timefmt import duration_arg, typed_duration
from forewarn.protocol.wholenumber import whole_number

from .sim_faults import FaultError, parse_fault_flag
from .simulator import CONTROL_PREFIX, SimError, SimServer, Simulator, check_after

log = logging.getLogger("forewarn.simulate")

LOOPBACK_NAMES = ("localhost",)


def _no_fields(args: argparse.Namespace) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Scripted:
    """A `--<flag>-after S` option: raise the notice `kind` S after start, with `fields`
    taken from the other options."""

    flag: str
    kind: str
    help: str
    fields: Callable[[argparse.Namespace], dict[str, Any]] = _no_fields
    # Notice fields copied from options (field -> option dest), left out when unset. Such
    # options default to None: one given without `--<flag>-after` is a usage error.
    options: Mapping[str, str] = field(default_factory=dict)

    def notice(self, args: argparse.Namespace) -> dict[str, Any]:
        copied = {key: getattr(args, dest) for key, dest in self.options.items()}
        return {**{k: v for k, v in copied.items() if v is not None}, **self.fields(args)}


@dataclass(frozen=True)
class SimulatorCommand:
    """One provider's `forewarn simulate` command."""

    name: str
    # The simulator's factory, called with the options named in `passes` as keywords.
    build: Callable[..., Simulator]
    passes: Sequence[str] = ()
    options: Callable[[argparse.ArgumentParser], None] = lambda parser: None
    scripted: Sequence[Scripted] = ()
    # Extra lines for people (stderr), e.g. how to point the agent at it.
    hints: Callable[[Simulator, str, argparse.Namespace], list[str]] = field(
        default=lambda sim, url, args: []
    )
    # False for a simulator with no notice kinds (DigitalOcean's droplet metadata): it is
    # offered no `--notice`, which its help listed and which could only exit 2.
    raises_notices: bool = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)"
        )
        parser.add_argument("--port", type=_port, default=0, help="port (default: a free one)")
        parser.add_argument(
            "--ready-file",
            type=_file_path,
            metavar="PATH",
            help="once listening, write the URL to PATH (removed again on exit)",
        )
        parser.add_argument(
            "--fault",
            action="append",
            default=[],
            type=_fault,
            metavar="KIND[,KEY=VALUE...]",
            help="a fault from start (repeatable), e.g. status,status=503,count=3 or "
            "hang,path=/x,seconds=30 or throttle,rate=5; after=S starts it S later "
            "(see the docs' fault table)",
        )
        parser.add_argument(
            "--date-ahead",
            type=date_ahead,
            default=0.0,
            metavar="S",
            help="send each answer's Date S ahead of this machine's clock (2h; behind: "
            "--date-ahead=-2h): this machine then stands for one whose clock is that far off "
            "the provider's",
        )
        if self.raises_notices:
            parser.add_argument(
                "--notice",
                action="append",
                default=[],
                type=_notice,
                metavar="KIND[,KEY=VALUE...]",
                help="raise a notice (repeatable), `after=S` to raise it S after start; "
                "KIND as in POST /_sim/notices",
            )
        self.options(parser)
        for script in self.scripted:
            parser.add_argument(
                f"--{script.flag}-after", type=duration_arg, metavar="S", help=script.help
            )

    def run(self, args: argparse.Namespace) -> int:
        # Before any thread starts (scripted notices start timers here): see
        # serve_until_signalled.
        with _stop_signals_blocked():
            try:
                _check_ready_file(args.ready_file)
                sim = self.start(args)
            except UsageError as error:
                print(f"forewarn: simulate {self.name}: {error}", file=sys.stderr, flush=True)
                return 2
            return serve_until_signalled(sim, args.host, args.port, args.ready_file, self, args)

    def start(self, args: argparse.Namespace) -> Simulator:
        """The simulator the options describe, its faults and scripted notices in place."""
        _check_host(args.host)
        try:
            sim = self.build(**{name: getattr(args, name) for name in self.passes})
        except (SimError, ValueError) as error:
            raise UsageError(str(error)) from None
        sim.date_ahead = args.date_ahead
        for fields in args.fault:
            try:
                sim.add_fault(**fields)
            except SimError as error:
                raise UsageError(f"--fault: {error}") from None
        notices = [dict(fields) for fields in getattr(args, "notice", [])]
        for script in self.scripted:
            after = getattr(args, f"{script.flag.replace('-', '_')}_after", None)
            given = [dest for dest in script.options.values() if getattr(args, dest) is not None]
            if after is None and given:
                # Options that shape a notice only --<flag>-after raises: without it they
                # would do nothing, silently.
                raise UsageError(
                    f"--{given[0].replace('_', '-')} shapes the notice of "
                    f"--{script.flag}-after S, which is not given"
                )
            if after is not None:
                try:
                    check_after(after)
                except SimError as error:
                    raise UsageError(f"--{script.flag}-after: {error}") from None
                try:
                    extra = script.notice(args)
                except (SimError, ValueError) as error:
                    raise UsageError(str(error)) from None
                notices.append({"kind": script.kind, **extra, "after": after})
        for fields in notices:
            kind = fields.pop("kind")
            after = fields.pop("after", None)
            if not sim.notice_kinds:
                raise UsageError(f"--notice {kind!r}: the {self.name} simulator raises no notices")
            try:
                kind = sim.notice_kind(kind)
            except SimError:
                raise UsageError(
                    f"--notice {kind!r}: the {self.name} simulator raises "
                    f"{', '.join(sim.notice_kinds)}"
                ) from None
            if after is None:
                try:
                    sim.raise_notice(kind, fields)
                except SimError as error:
                    raise UsageError(f"--notice {kind}: {error}") from None
            else:
                try:
                    sim.schedule(after, kind, fields)
                except SimError as error:
                    raise UsageError(f"--notice {kind}: {error}") from None
        return sim


# The farthest `--date-ahead` goes: a `Date` past year 9999 cannot be written.
MOST_DATE_AHEAD = 3650 * 86400.0


def date_ahead(text: str) -> float:
    """An argparse `type=` for `--date-ahead`: a duration (`7200`, `2h`), `-` before it for
    behind, within MOST_DATE_AHEAD either way."""
    behind = text.strip().startswith("-")
    magnitude = text.strip()[1:] if behind else text
    try:
        seconds = typed_duration(magnitude)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{error}; `-` before it for behind") from None
    if seconds > MOST_DATE_AHEAD:
        raise argparse.ArgumentTypeError(
            f"at most {MOST_DATE_AHEAD / 86400:.0f} days either way, got {text!r}"
        )
    return -seconds if behind else seconds


_PORT_RANGE = "a port is 0-65535 (0: a free one), got {value}"
_port = whole_number(
    minimum=0,
    maximum=65535,
    not_whole="not a port number: {text!r}",
    below=_PORT_RANGE,
    above=_PORT_RANGE,
)


def _file_path(text: str) -> Path:
    # `--ready-file=~/sim.url` reaches us unexpanded: the URL went to ./~/sim.url while the
    # script waited for ~/sim.url. `~` is the home directory, as in every path of forewarn.
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path")
    return Path(text).expanduser()


def _fault(text: str) -> dict[str, Any]:
    try:
        return parse_fault_flag(text)
    except FaultError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None


def _notice(text: str) -> dict[str, Any]:
    try:
        fields = parse_fault_flag(text)
    except FaultError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None
    if "after" in fields:
        # Checked on the text as written: the seconds parsed from it made `after=31d`
        # "got 2678400.0".
        written = [
            pair.partition("=")[2].strip()
            for pair in text.split(",")[1:]
            if pair.partition("=")[0].strip() == "after"
        ][-1]
        try:
            check_after(written)
        except SimError as error:
            raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None
    # `drift=false` is a false, not the text "false" (which any check takes for true).
    yes_no = {"true": True, "false": False}
    return {
        key: yes_no.get(value.lower(), value) if isinstance(value, str) and key != "kind" else value
        for key, value in fields.items()
    }


def _check_host(host: str) -> None:
    # In any case, as every host name is read: `--host LOCALHOST` was "not an IP address".
    if host.lower() in LOOPBACK_NAMES:
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        raise UsageError(f"--host: not an IP address: {host!r}") from None
    if not loopback:
        # The simulators stand in for link-local metadata services; never serve them wider.
        raise UsageError(f"--host: {host} is not a loopback address (use 127.0.0.1 or ::1)")


def _check_ready_file(path: Path | None) -> None:
    """Refuse an unwritable --ready-file before listening: a script waiting for the file
    would otherwise wait forever, and the user would see a traceback."""
    if path is None:
        return
    if path.parent.exists() and not path.parent.is_dir():
        raise UsageError(f"--ready-file: cannot write {path}: {path.parent} is not a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        fd, probe = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise UsageError(f"--ready-file: cannot write {path}: {error.strerror}") from None


def _write_ready(path: Path, url: str) -> None:
    """Write atomically: a script that sees the file sees the whole URL."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(url + "\n")
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


# SIGHUP too (a closed terminal): at its default it killed the simulator where it stood, and
# its --ready-file went on naming a URL nobody served. Only where it is at its default when the
# simulator starts: under `nohup` it stays ignored, as asked (a blocked signal is queued even
# when ignored, so sigwait would have taken it).
STOP_SIGNALS = frozenset(
    {signal.SIGINT, signal.SIGTERM}
    | ({signal.SIGHUP} if signal.getsignal(signal.SIGHUP) is signal.SIG_DFL else set())
)


@contextlib.contextmanager
def _stop_signals_blocked() -> Iterator[None]:
    """The stop signals blocked in this thread and in every thread it starts meanwhile."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def serve_until_signalled(
    sim: Simulator,
    host: str = "127.0.0.1",
    port: int = 0,
    ready_file: Path | None = None,
    command: SimulatorCommand | None = None,
    args: argparse.Namespace | None = None,
) -> int:
    """Serve until SIGTERM, SIGINT or SIGHUP (`STOP_SIGNALS`). Once listening: the URL alone
    on stdout's first line, hints on stderr, and the URL in `ready_file`; once stopped, a last
    line on stderr naming the signal.

    The main thread takes the stop signal with `sigwait`, and every thread of the server is
    started with the stop signals blocked: a signal handler runs only when the main thread
    wakes, and a SIGTERM the kernel handed to a server or timer thread left the main thread
    asleep in its wait for good (3 stops in 120 under load never ended). Threads the caller
    started before this call should block them too (`SimulatorCommand.run` does)."""
    if ready_file is not None:
        ready_file.unlink(missing_ok=True)  # never let a stale file say "ready"
    with _stop_signals_blocked():
        try:
            server = SimServer(sim, host, port).start()
        except OSError as error:
            print(
                f"forewarn: simulate {sim.name}: cannot listen on {host}:{port}: {error.strerror}",
                file=sys.stderr,
            )
            return 2
        return _serve(server, sim, ready_file, command, args)


def _serve(
    server: SimServer,
    sim: Simulator,
    ready_file: Path | None,
    command: SimulatorCommand | None,
    args: argparse.Namespace | None,
) -> int:
    try:
        print(server.url, flush=True)
        hints = [
            f"forewarn simulate {sim.name}: listening on {server.url}",
            f"control API: GET {CONTROL_PREFIX}/state, POST {CONTROL_PREFIX}/notices, "
            f"POST {CONTROL_PREFIX}/faults",
        ]
        if command is not None and args is not None:
            hints += command.hints(sim, server.url, args)
        print("\n".join(hints), file=sys.stderr, flush=True)
        if ready_file is not None:
            _write_ready(ready_file, server.url)
        signum = signal.sigwait(STOP_SIGNALS)
    finally:
        server.stop()
        if ready_file is not None:
            ready_file.unlink(missing_ok=True)
    # The last line says the stop was heard and the simulator cleaned up after itself; the
    # exit stays 0, a simulator's normal end (`kill $SIM_PID` in the README's script).
    print(
        f"forewarn simulate {sim.name}: stopped by {signal.Signals(signum).name}",
        file=sys.stderr,
        flush=True,
    )
    return 0


__all__ = ["Scripted", "SimulatorCommand", "date_ahead", "serve_until_signalled"]
