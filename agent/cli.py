"""The `forewarn` command line. Bad input exits 2 with a message naming the flag or key."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import importlib
import json
import math
import os
import re
import string
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from forewarn.protocol.ages import status_ages
from forewarn.protocol.errors import ForewarnError, UsageError
from forewarn.protocol.fields import TAKES_ACK_ACTION
from forewarn.protocol.notifydeadline import for_an_older_agent, is_duration
from forewarn.protocol.oneline import one_line
from forewarn.protocol.seqgap import SeqGaps
from forewarn.protocol.timefmt import (
    format_time,
    parse_deadline,
    parse_duration,
    parse_time,
    typed_duration,
    utcnow,
)
from forewarn.protocol.wholenumber import whole_number
from forewarn.protocol.wire import (
    AGENT_LOCK,
    DEFAULT_CONFIG_FILE,
    DENIED,
    ENV_CONFIG,
    ENV_CONTROL,
    ENV_EVENTS,
    IPC_PATH_MAX,
    TOPIC_HEARTBEAT,
    TOPIC_NOTICE,
    TOPIC_REPLAY_PREFIX,
    ClientConfig,
    ConfigFileError,
    EndpointError,
    ReplyError,
    allow_ipv6,
    client_id_problem,
    environment,
    ipc_path,
    load_client_config,
    new_replay_token,
    request,
    resolve_endpoints,
    runtime_dir,
    unquoted,
    unreachable,
)

from .argtypes import choice_as_written, path_arg, word_as_written
from .drill_limits import (
    MAX_DEADLINE,
    MAX_STEP_TIME,
    MAX_STEPS,
    MAX_UPLOAD_DELAY,
    count_within,
    seconds_within,
    written_bound,
)
from .eventlines import ReplayTracker, describe
from .holders import ancestors, pid_namespace, process_exists, process_group, process_start
from .limits import (
    MAX_ACK_NOTE_LENGTH,
    MAX_FLUSH_SECONDS,
    MAX_ID_LENGTH,
    MAX_NOTE_LENGTH,
    NO_ACTIVE_MANUAL,
    deadline_problem,
)
from .throttle import WarningThrottle
from .waitrule import WAIT_EXIT_MARGIN, WaitRule

if TYPE_CHECKING:
    from forewarn.providers.registry import Registry

# httpx's `__init__` imports its own command line (`httpx._main`: click, rich and pygments)
# whenever those are installed, as they are beside most training stacks: about 60 ms of CPU,
# a third of the start of an agent whose provider speaks HTTP, for an `httpx` command this
# process never runs. Marked absent before anything imports httpx, its `__init__` falls back
# to its own stub `main` (which says to install httpx[cli]); the rest of httpx is unchanged.
# Only here, in the `forewarn` command's process: the client library leaves a user's
# process alone.
if "httpx" not in sys.modules:
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


# Exit codes (documented in the README): 0 done, 1 failed (a drill, a timeout, no agent
# answers notify or status), 2 bad input (a flag, a config key, the agent refused), 3 no agent
# heard by wait or watch, 130 interrupted.
EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130

# Flags whose value may start with "-" (`--deadline -5m`): argparse would take it for a flag.
_VALUE_FLAGS = (
    "--deadline",
    "--count",
    "--timeout",
    "--agent-timeout",
    "--exit-margin",
    "--flush-seconds",
    "--date-ahead",  # `simulate`: behind the machine's clock is a negative duration
)


class Parser(argparse.ArgumentParser):
    """argparse with forewarn's error style: one line naming the flag, then a pointer to
    `--help`, instead of the usage block; raised, so `main` prints it like every error."""

    def error(self, message: str) -> NoReturn:
        message = re.sub(r"^argument ([^:]+): ", r"\1: ", message)
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            options = re.findall(r"'?([\w.-]+)'?", choice.group(2))
            # In lower case, as the choices are read: `DRAINN` is one letter from `drain`.
            near = difflib.get_close_matches(choice.group(1).lower(), options, n=1)
            # Without a near one, the choices themselves: "invalid choice 'amazon'" alone
            # left the user to find them in --help.
            listed = f" (choose from {', '.join(options)})"
            hint = f" (did you mean {near[0]!r}?)" if near else listed
            message = message.replace(choice.group(0), f"invalid choice {choice.group(1)!r}{hint}")
        where = self.prog.removeprefix("forewarn").strip()
        raise UsageError(f"{where + ': ' if where else ''}{message}; see '{self.prog} --help'")


def _duration(
    flag: str, *, positive: bool = False, default: float | None = None
) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            seconds = typed_duration(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        if positive and seconds <= 0:
            # A flag with a default has a limit without it too: `status --timeout 0` was
            # told to leave it out "for no limit", which waits 30 s.
            instead = "no limit" if default is None else f"the default {default:g}s"
            raise argparse.ArgumentTypeError(
                f"must be more than 0, got {text!r} (leave {flag} out for {instead})"
            )
        return seconds

    return parse


_path = path_arg


def _config_number(text: str) -> str:
    """An agent flag that sets a numeric key (`--exit-margin`): its text as written, for the
    configuration to read as that key's from every source; blank refused, as every flag but
    the text ones refuses it (read as text, `--exit-margin " "` set nothing at all)."""
    if not text.strip(string.whitespace):
        raise argparse.ArgumentTypeError("blank; give a duration such as 30s (or leave it out)")
    return text


def _provider_name(text: str) -> str:
    # Provider names are taken in any case (`AWS`, `GCP`), as everywhere else they are read
    # (the config file, FOREWARN_PROVIDERS, `simulate` and `drill`).
    return text.strip().lower()


def _provider_names(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """`--provider`'s value: one name, or several separated by commas or space (`local aws`,
    `local,aws`), each in any case. `--provider "local aws"` (an `ExecStart=` line, a variable
    quoted once) and `--provider local,aws`, as FOREWARN_PROVIDERS writes the list, were
    'invalid choice'."""

    def parse(text: str) -> list[str]:
        written = [name for name in re.split(r"[,\s]+", text) if name]
        names = [_provider_name(name) for name in written]
        if not names:
            raise argparse.ArgumentTypeError(
                f"{text!r} names no provider (leave --provider out for auto)"
            )
        for name, as_written in zip(names, written, strict=True):
            if name not in choices:
                from forewarn.providers.registry import nearest_provider

                near = nearest_provider(name, choices)
                hint = f"did you mean {near!r}?" if near else f"choose from {', '.join(choices)}"
                # Named as typed: `--provider AMAZON` was refused as 'amazon'.
                raise argparse.ArgumentTypeError(f"invalid choice {as_written!r} ({hint})")
        return names

    return parse


_positive_int = whole_number(minimum=1)
_pid = whole_number(minimum=1, maximum=2**31 - 1, above="not a process id: {value}")
_STEP_RANGE = "must be 0 or more (at most 2**63-1), got {value}"
_step = whole_number(minimum=0, maximum=2**63 - 1, below=_STEP_RANGE, above=_STEP_RANGE)


class _Blank:
    """A blank value (`--step "$STEP"` with STEP unset) of an `ack` figure: the ack goes out
    without it, and says so (see `_blank_is_left_out`)."""


BLANK = _Blank()


def _ack_figure(read: Callable[[str], T]) -> Callable[[str], T | _Blank]:
    """`read`, except that a blank value is BLANK. A figure is no reason to send no ack: the
    README's loop acks with `--step "$STEP"`, and in a job that sets no STEP each ack was
    refused, exit 2, sending nothing: under `set -e` the loop ended at its first ack (the
    terminate after it never saved for), else the notice stayed held and its next `wait`
    returned the same drain, the job saving over and over."""

    def figure(text: str) -> T | _Blank:
        return BLANK if not text.strip(string.whitespace) else read(text)

    return figure


class _Negative(float):
    """A negative `ack --flush-seconds`: the save's time, taken as two readings of the wall
    clock (`$(( $(date +%s) - started ))s`), spans a step of that clock back (NTP correcting
    one that ran ahead). How long the save took is not known: the ack goes without it."""


def _flush_time(text: str) -> float:
    """`--flush-seconds`: a duration, or one with a minus (`_Negative`), no error: refused,
    the ack of a save timed across a clock stepped back was not sent (the hold stayed, and
    the loop under `set -e` ended there)."""
    read = _duration("--flush-seconds")
    written = text.strip(string.whitespace)
    if written.startswith("-") and written[1:2].isdigit():
        with contextlib.suppress(argparse.ArgumentTypeError):
            seconds = read(written[1:])
            return _Negative(-seconds) if seconds > 0 else 0.0  # `-0s` is no step
    return read(text)


def _blank_is_left_out(args: argparse.Namespace, *flags: str) -> list[str]:
    """The `flags` given blank, each now left out (None): to say so once the ack is sent."""
    blank = []
    for flag in flags:
        key = flag.lstrip("-").replace("-", "_")
        if getattr(args, key) is BLANK:
            setattr(args, key, None)
            blank.append(flag)
    return blank


def _unset_if_blank(text: str) -> str | None:
    # The agent's rule for its text flags, on the clients' too: a blank value sets nothing.
    # `--note "$NOTE"` with NOTE unset sent no note, but one of spaces went out as the note.
    return text if text.strip(string.whitespace) else None


def _endpoint(text: str) -> str | None:
    # Read as the agent reads its own --events and --control: without the space around
    # them, and blank is unset. `--events "$EP"` with EP unset fell back to the default, but
    # one of spaces (or a YAML block's newline) was refused as an endpoint.
    return text.strip(string.whitespace) or None


def _notice_id(text: str) -> str:
    if not text.strip(string.whitespace):
        # `--id "$ID"` with ID unset: a drain went out under a new id, silently.
        raise argparse.ArgumentTypeError(
            "empty; leave --id out for a new id (for clear: to clear all)"
        )
    # No id has space in it: `--id "$ID "` was refused by the agent (notify) or named no
    # active notice (clear), where every other word of the command is read without it.
    return text.strip(string.whitespace)


def _acked_notice_id(text: str) -> str:
    if not text.strip(string.whitespace):
        # `forewarn ack "$ID"` with ID unset: an ack of no notice would go out, releasing
        # nothing, while the script meant to release one.
        raise argparse.ArgumentTypeError("empty; leave NOTICE_ID out for an ack of no notice")
    return text.strip(string.whitespace)  # no id has space in it (see _notice_id)


def _client_id(text: str) -> str:
    """An acking client's id as an ack carries it (`wait --client`, `ack --client`): the
    agent names it in `acked_by` only so. Without the space around it: `ack --client
    " loop "` acked as another client than the `wait --client loop` it meant to release,
    which still held the notice ("acked by  loop " in `status`)."""
    text = text.strip(string.whitespace)
    if not text:
        # `--client "$ID"` with ID unset: the loop's acks would name nobody.
        raise argparse.ArgumentTypeError("empty")
    if len(text) > MAX_ID_LENGTH:
        raise argparse.ArgumentTypeError(f"longer than {MAX_ID_LENGTH} characters")
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in text):
        raise argparse.ArgumentTypeError("must be one line of text, without control characters")
    # The agent's rule (every heartbeat names the client): at most 200 bytes in UTF-8.
    problem = client_id_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _add_client_flag(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument("--client", type=_client_id, metavar="ID", help=text)


# Endpoints for the commands that talk to a running agent.


def _add_endpoint_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--events",
        type=_endpoint,
        help="events endpoint (default: ipc://<runtime>/events)",
    )
    parser.add_argument(
        "--control",
        type=_endpoint,
        help="control endpoint (default: ipc://<runtime>/control)",
    )
    parser.add_argument("--runtime-dir", type=_path, help="runtime directory of the agent")
    parser.add_argument(
        "--config",
        type=_path,
        help="the agent's TOML file, for its runtime_dir, events and control (default: "
        "$FOREWARN_CONFIG, else /etc/forewarn/forewarn.toml when it exists)",
    )
    parser.add_argument(
        "--allow-remote", action="store_true", help="accept endpoints that are not loopback"
    )


# The longest heartbeat interval an agent takes (its `heartbeat_interval` is at most 1.5 s).
_LONGEST_HEARTBEAT = 1.5


def _agent_timeout(text: str) -> float:
    seconds = _duration("--agent-timeout")(text)
    if 0 < seconds <= _LONGEST_HEARTBEAT:
        # `--agent-timeout 1s` beside an agent beating every second: each late beat was "no
        # heartbeat within 1s" and exit 3, from a `wait` a script took for a dead agent.
        raise argparse.ArgumentTypeError(
            f"{text!r} is within the agent's heartbeat interval (1s by default, at most "
            f"{_LONGEST_HEARTBEAT:g}s), so a live agent would count as gone: give more than "
            f"{_LONGEST_HEARTBEAT:g}s (3s or more leaves room for a late beat; 0 waits forever)"
        )
    return seconds


def _add_agent_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agent-timeout",
        type=_agent_timeout,
        default=AGENT_TIMEOUT,
        help=f"exit {NO_AGENT_EXIT} when no heartbeat arrives for this long "
        f"(default {AGENT_TIMEOUT:g}s; 0 waits forever)",
    )


def _add_control_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=_duration("--timeout", positive=True, default=CONTROL_TIMEOUT),
        default=CONTROL_TIMEOUT,
        help=f"wait this long for the agent's answer (default {CONTROL_TIMEOUT:g}s)",
    )


def _client_config(given: Path | None) -> ClientConfig:
    """runtime_dir, events and control of the agent's config file, which the agent reads too:
    set there alone, they sent every command to the default place, where no agent ran. The
    system file this user may not read (it may hold secrets) is a warning, not an error."""
    try:
        return load_client_config(given, strict=True)
    except ConfigFileError as error:
        by_default = given is None and not environment(ENV_CONFIG)
        if by_default and not os.access(DEFAULT_CONFIG_FILE, os.R_OK):
            print(f"forewarn: warning: {error}; using the defaults", file=sys.stderr)
            return ClientConfig(path=DEFAULT_CONFIG_FILE)
        raise


def _endpoints(args: argparse.Namespace) -> tuple[str, str]:
    """(events, control): flags, then FOREWARN_* variables, then the agent's config file,
    then the defaults, as the agent chooses them. Sets `args.runtime_dir` (the control token
    is read there)."""
    # The command first, as in its other errors: `forewarn: --events 'xyz': ...` did not say
    # which of a script's commands it was.
    command = f"{args.command}: " if getattr(args, "command", None) else ""
    try:
        config = _client_config(args.config)
    except ConfigFileError as error:
        raise ConfigFileError(f"{command}{error}") from None
    args.runtime_dir = args.runtime_dir or runtime_dir(config=config)
    try:
        return resolve_endpoints(
            args.runtime_dir,
            args.events,
            args.control,
            allow_remote=args.allow_remote,
            names=(
                _endpoint_source("events", args.events, ENV_EVENTS, config),
                _endpoint_source("control", args.control, ENV_CONTROL, config),
            ),
            config=config,
        )
    except EndpointError as error:
        raise UsageError(f"{command}{error}") from None


def _endpoint_source(key: str, flag: str | None, variable: str, config: ClientConfig) -> str:
    """The endpoint `key` named by where it came from, as `resolve_endpoints` picks it: its
    flag, else the variable, else the config file's key (else the default, by its key). A
    refusal of one from the file had named the flag, which nobody gave."""
    if flag:
        return f"--{key}"
    if (environment(variable) or "").strip():
        return f"environment {variable}: {key}"
    if getattr(config, key) and config.path is not None:
        return f"config file {config.path}: {key}"
    return key


# How long `notify` and `status` wait for the agent's answer. It answers a notify once its
# state is on disk (fsync), and on a busy disk that took longer than the 3 s this once was:
# the notice was out while the command said no agent answers, and a retry raised a second.
CONTROL_TIMEOUT = 30.0
# How long `wait --client` waits for the agent to hold the notice before handing it to its
# job: the job's save is not to wait on a busy agent for long.
HOLD_TIMEOUT = 5.0
# How long `wait` waits for the agent's status to tell a notice raised after it began from one
# in force before (`waitrule`): without it, the notice's `noticed_at` decides.
AGES_TIMEOUT = 2.0


def _ask(
    control: str,
    payload: dict[str, Any],
    runtime: Path | None,
    timeout: float = CONTROL_TIMEOUT,
    *,
    unanswered: str = "",
    refusals: bool = False,
    command: str = "",
    as_json: bool = False,
    indent: int | None = 2,
) -> dict[str, Any]:
    """The agent's reply; exit 1 with one line when nothing listens on `control` (at once),
    when the agent there is stopped (within STOPPED_CONFIRM_SECONDS) or when it does not
    answer within `timeout` (then `unanswered` is added). With `as_json` that exit also
    prints a JSON object on stdout saying why (`_no_reply`; `indent` as json.dumps: None
    for the one line of `notify` and `ack`), and a refusal the agent's reply. A refusal is
    a UsageError (its text after `command: ` when given), or with `refusals` the reply
    itself, for the caller to read."""
    why = unreachable(control)
    if why is not None:
        holder = None if why.startswith(DENIED) else _lock_holder(control)
        if why.startswith(DENIED):
            line = f"cannot reach the agent on {control} ({why}; run as its user or group)"
            _no_reply(control, "denied", line, as_json, indent)
        if holder is not None:
            line = (
                f"the agent on {control} is starting or stopping: {holder}, and no socket is "
                f"there to answer ({why}); try again in a moment (if it stays so, the agent "
                "serves another --control)"
            )
            _no_reply(control, "starting-or-stopping", line, as_json, indent, holder=holder)
        line = f"no agent runs on {control} ({why}; is `forewarn agent` running?)"
        _no_reply(control, "not-running", line, as_json, indent)
    stopped = _Stopped(control)
    try:
        reply = request(control, payload, timeout, runtime=runtime, give_up=stopped)
    except ReplyError as error:
        if not as_json:
            raise
        _no_reply(control, "unreadable-reply", str(error), as_json, indent)
    except TimeoutError:
        # Given up as stopped, or stopped at the end of a --timeout shorter than the look.
        pid = stopped.confirmed or _stopped_holder(control)
        if pid is not None:
            line = (
                f"the agent on {control} has not answered: its pid {pid} is stopped, by "
                "SIGSTOP, Ctrl-Z or a debugger, and answers nothing until resumed: "
                f"`kill -CONT {pid}` resumes it{unanswered}"
            )
            _no_reply(control, "stopped", line, as_json, indent, pid=pid)
        line = (
            f"the agent on {control} has not answered within {timeout:g}s "
            f"(busy, or a slow disk; --timeout waits longer){unanswered}"
        )
        _no_reply(control, "timed-out", line, as_json, indent, timeout_seconds=timeout)
    if not isinstance(reply.get("ok"), bool):
        # The agent's every reply says `ok`: `{}` was read as a refusal ("the agent refused:
        # None", exit 2), and `status --json` printed it as if the agent had sent it.
        unread = f"the agent on {control} sent a reply without `ok`: {json.dumps(reply)[:60]}"
        if not as_json:
            raise ReplyError(unread)
        _no_reply(control, "unreadable-reply", unread, as_json, indent)
    if reply.get("ok") is not True and not refusals:
        # A refusal (no control token, a request out of bounds) is for the caller to fix, for
        # `status` as for `notify`: `status` read the missing fields of the refusal as a crash.
        said = f"the agent refused: {reply.get('error')}"
        if as_json:  # the agent's own words, for the script reading stdout
            print(json.dumps(reply, indent=indent), flush=True)
        raise UsageError(f"{command}: {said}" if command else said)
    return reply


def _no_reply(
    control: str, reason: str, line: str, as_json: bool, indent: int | None = 2, **more: object
) -> NoReturn:
    """Exit 1 with `line` on stderr; with `as_json` a JSON object on stdout as well, so that
    `forewarn status --json | jq` reads a document saying there is no reply, and why:
    `{"ok": false, "answered": false, "reason": ..., "control": ..., "error": line, ...}`.
    `reason`: not-running, denied, starting-or-stopping (with `holder`), stopped (with
    `pid`), timed-out (with `timeout_seconds`), unreadable-reply (something answered that
    is not an agent speaking protocol v1)."""
    if as_json:
        said = {"ok": False, "answered": False, "reason": reason, "control": control}
        print(json.dumps({**said, "error": line, **more}, indent=indent), flush=True)
    raise NoReply(line)


class NoReply(ForewarnError):
    """No reply of the agent's to read (none there, stopped, not in time, not its reply):
    `main` prints it as its one `forewarn: ...` line, exit 1."""


# How long the agent must be seen stopped, at every look, before a request to it is given up:
# a process a tracer (strace) stops at each system call is stopped for moments at a time and
# still answers, while one under SIGSTOP or at a debugger's breakpoint stays so.
STOPPED_CONFIRM_SECONDS = 1.0


class _Stopped:
    """Asked while a request waits: whether the agent holding the lock beside `control` has
    been stopped at every look for STOPPED_CONFIRM_SECONDS (its pid then in `confirmed`). Found
    walking `status` as an operator: a stopped agent cost the whole --timeout (30 s by
    default) before the line naming it, though /proc/PID/stat said `T` from the start."""

    def __init__(self, control: str) -> None:
        self.control = control
        self.pid: int | None = None
        self.confirmed: int | None = None
        self._since = 0.0

    def __call__(self) -> bool:
        pid = _stopped_holder(self.control)
        if pid is None or pid != self.pid:
            self.pid, self._since = pid, time.monotonic()
            return False
        if time.monotonic() - self._since < STOPPED_CONFIRM_SECONDS:
            return False
        self.confirmed = pid
        return True


def _lock_holder(control: str) -> str | None:
    """Who holds the agent lock beside the socket file of `control` ("pid N holds PATH"), or
    None when nobody does. An agent holds it from before it binds its sockets (its state
    loaded, its space reserved: seconds on a slow disk) until after it has closed them and
    saved its state: "no agent runs" was said of an agent starting or stopping."""
    path = ipc_path(control)
    if path is None:
        return None
    from .rundir import lock_holder  # the failure path only: not on every command's start

    lock = path.parent / AGENT_LOCK
    holder = lock_holder(lock)
    return None if holder is None else f"{holder} holds {lock}"


def _stopped_holder(control: str) -> int | None:
    """The pid of the agent holding the lock beside the socket file of `control` when it is
    stopped: found walking a reclaim as on-call, `status` said "busy, or a slow disk; --timeout
    waits longer" of an agent under SIGSTOP, which no wait answers."""
    path = ipc_path(control)
    if path is None:
        return None
    from .rundir import stopped_holder  # the failure path only: not on every command's start

    return stopped_holder(path.parent / AGENT_LOCK)


T = TypeVar("T")


def _readable(control: str, read: Callable[[], T]) -> T:
    """`read()` of a reply; a reply without what it needs (another program on the endpoint,
    or an agent of another version) is a ReplyError naming the endpoint, not a crash."""
    try:
        return read()
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as error:
        raise ReplyError(
            f"the agent on {control} sent a reply forewarn cannot read "
            f"({type(error).__name__}: {error})"
        ) from None


# Commands.


def cmd_agent(args: argparse.Namespace) -> int:
    import logging

    from .config import ConfigError, load_settings
    from .logsetup import setup_logging
    from .runner import run_agent

    overrides: dict[str, Any] = {
        "providers": args.provider,
        "runtime_dir": args.runtime_dir,
        "state_dir": args.state_dir,
        "events": args.events,
        "control": args.control,
        "allow_remote": True if args.allow_remote else None,
        "exit_margin": args.exit_margin,
        "heartbeat_interval": args.heartbeat_interval,
        "metrics_address": args.metrics_address,
        "log_level": args.log_level,
        "log_format": args.log_format,
    }
    flags = {key: value for key, value in overrides.items() if value is not None}
    apply_sets(overrides, args.set or [])
    try:
        settings = load_settings(args.config, registry=args.registry, **overrides)
        settings.bind_endpoints()
    except ConfigError as error:
        raise UsageError(_name_flags(str(error), flags, overrides, args.set or [])) from None
    setup_logging(settings.log_level, settings.log_format)
    for note in [*settings.overridden, *settings.unused_sections]:
        logging.getLogger("forewarn.agent").warning("%s", note)
    try:
        return run_agent(settings, exit_process=True)
    except ConfigError as error:
        raise UsageError(str(error)) from None


def _name_flags(
    message: str, flags: dict[str, Any], overrides: dict[str, Any], sets: Sequence[str]
) -> str:
    """Name the flag or `--set` a bad value came from: `--heartbeat-interval 8s` was refused
    as "config key heartbeat_interval: ...", a key the user never typed, and so was
    `--set heartbeat_interval=8x`, as if a file or a variable had said it."""
    for key, value in flags.items():
        if overrides.get(key) is value:  # not replaced by a --set of the same key
            flag = "--provider" if key == "providers" else "--" + key.replace("_", "-")
            message = message.replace(f"config key {key}:", f"{flag}: config key {key}:")
    for item in sets:
        # As `apply_sets` read it (it refused any other shape before this).
        key = ".".join(part.strip(string.whitespace) for part in item.partition("=")[0].split("."))
        message = message.replace(f"config key {key}:", f"--set {key}: config key {key}:")
    return message


def apply_sets(overrides: dict[str, Any], items: Sequence[str]) -> None:
    """Put each `--set KEY=VALUE` into `overrides` (a dotted KEY into its section's dict);
    a KEY that uses a value as a section, or a section as a value, is a UsageError, and so
    is a KEY a flag or an earlier `--set` gives already: one of the two was dropped in
    silence (`--provider local --set providers=aws` watched AWS alone), while the same pair
    written in another case was refused (`load_settings`)."""
    flags = {key for key, value in overrides.items() if value is not None}
    for item in items:
        key, sep, value = item.partition("=")
        # Without the space around each part, as TOML writes a key (`exit_margin = 30`): the
        # key `exit_margin ` was "unknown key (did you mean exit_margin?)".
        parts = [part.strip(string.whitespace) for part in key.split(".")]
        key = ".".join(parts)
        if not sep or not all(parts):
            raise UsageError(
                f"--set {item!r}: expected KEY=VALUE, e.g. aws.url=http://127.0.0.1:1338"
            )
        *sections, leaf = parts
        target = overrides
        for depth, section in enumerate(sections, 1):
            inner = target.get(section)
            # A flag's key is present even when the flag was not given (None): a value.
            if inner is None and section not in target:
                inner = target[section] = {}
            elif not isinstance(inner, dict):
                # `exit_margin.x=3` went on to index a float (or None) and crashed.
                name = ".".join(parts[:depth])
                raise UsageError(f"--set {item!r}: {name} is a key, not a section")
            target = inner
        if isinstance(target.get(leaf), dict):
            raise UsageError(f"--set {item!r}: {key} is a section; set {key}.KEY=VALUE")
        given = target.get(leaf)
        # `--set key="value"` where no shell removed the quotes (an ExecStart= line, a
        # quoted whole): TOML's string, as in the file.
        value = unquoted(value)
        if not value.strip(string.whitespace):
            # Blank sets nothing (README), here as in `load_settings`: not a second value.
            target.setdefault(leaf, value)
            continue
        if given is not None and not (
            isinstance(given, str) and not given.strip(string.whitespace)
        ):
            by = ""
            if not sections and leaf in flags:
                by = (
                    " (by --provider too)"
                    if leaf == "providers"
                    else f" (by --{leaf.replace('_', '-')} too)"
                )
            raise UsageError(f"--set {item!r}: {key} is given twice on the command line{by}")
        target[leaf] = value


def cmd_notify(args: argparse.Namespace) -> int:
    _, control = _endpoints(args)
    if args.action == "clear":
        if args.deadline is not None:
            raise UsageError("notify: --deadline: a clear has no deadline")
        # A clear carries only ids: `clear --note "false alarm"` dropped the note silently.
        if args.reason is not None:
            raise UsageError("notify: --reason: a clear has no reason (it withdraws the notice)")
        if args.note is not None:
            raise UsageError("notify: --note: a clear carries no note (it withdraws the notice)")
        payload: dict[str, Any] = {"op": "clear", "id": args.id}
    else:
        payload = {"op": "notify", "action": args.action, "reason": args.reason or "manual"}
        if args.deadline is not None:
            if args.deadline.startswith("-"):
                raise UsageError(
                    f"notify: --deadline: {args.deadline!r} is in the past; give a time ahead, "
                    "as a duration such as 5m or an RFC 3339 time"
                )
            try:
                deadline = parse_deadline(args.deadline)
            except (ValueError, OverflowError) as error:
                raise UsageError(f"notify: --deadline: {error}") from None
            if deadline <= utcnow():
                raise UsageError(f"notify: --deadline: {args.deadline!r} is in the past")
            # Was the agent's "the agent refused: deadline: ... more than 366 days ahead".
            problem = deadline_problem(deadline, utcnow())
            if problem is not None:
                raise UsageError(f"notify: --deadline: {args.deadline!r}: {problem}")
            payload["deadline"] = format_time(deadline)
            if is_duration(args.deadline):
                # 15 minutes from now however the wall clock is stepped meanwhile: the agent
                # keeps it on the boot clock. `deadline` beside it is for older agents.
                payload["deadline_in"] = parse_duration(args.deadline)
        if args.note:
            payload["note"] = args.note
        # The id is chosen here, not by the agent, so that a notify whose answer did not come
        # can be retried with it: the same id changes that notice instead of raising another.
        payload["id"] = args.id or f"local/manual/{uuid.uuid4().hex[:8]}"
    # The agent's own bounds, checked here: a request past its 64 KiB limit was dropped
    # unanswered, which read as 'no agent answers' (exit 1); the flag is the better name.
    if args.note is not None and len(args.note) > MAX_NOTE_LENGTH:
        raise UsageError(
            f"notify: --note: at most {MAX_NOTE_LENGTH} characters, got {len(args.note)}"
        )
    if args.id is not None and len(args.id) > MAX_ID_LENGTH:
        raise UsageError(f"notify: --id: at most {MAX_ID_LENGTH} characters, got {len(args.id)}")
    if args.action == "clear":
        unanswered = "; the clear may be done: see `forewarn status`"
    else:
        unanswered = (
            f"; the notice {payload['id']} may have been raised: see `forewarn status`, and "
            f"retry with --id {payload['id']} so that a retry does not raise a second one"
        )
    clear_one = args.action == "clear" and args.id is not None
    ask = functools.partial(
        _ask,
        control,
        runtime=args.runtime_dir,
        timeout=args.timeout,
        unanswered=unanswered,
        command="notify",
        as_json=args.json,
        indent=None,
    )
    reply = ask(payload, refusals=clear_one or "deadline_in" in payload)
    older = for_an_older_agent(payload, reply)
    if older is not None:
        # An agent older than the field (the package upgraded, the agent not restarted yet):
        # the deadline as a time, as it was always sent. The same id: no second notice.
        payload = older
        reply = ask(payload)
    if reply.get("ok") is not True:
        refused = str(reply.get("error"))
        if not refused.startswith(NO_ACTIVE_MANUAL):
            if args.json:  # the agent's own words, for the script reading stdout
                print(json.dumps(reply))
            raise UsageError(f"notify: the agent refused: {refused}")
        if args.json:
            print(json.dumps(reply))
        return _nothing_cleared(control, args)
    if args.json:
        print(json.dumps(reply))
    elif args.action == "clear":
        print("cleared: " + _readable(control, lambda: ", ".join(reply["cleared"]) or "nothing"))
    else:
        print(_readable(control, lambda: describe(reply["notice"])))
    unsaved = reply.get("unsaved")
    if isinstance(unsaved, str):
        why = "".join(char if char.isprintable() else "?" for char in unsaved[:500])
        if args.action == "clear":
            said = f"the clear is sent but not saved: {why}; " + _after_a_restart(reply)
        else:
            said = (
                f"the notice is active but not saved: {why}; an agent restart before its "
                "state can be written forgets it"
            )
        print(f"forewarn: warning: {said}", file=sys.stderr)
    return 0


def _after_a_restart(reply: dict[str, Any]) -> str:
    """What an agent restarted before its state can be written does with the notices a clear
    that could not be saved withdrew: it sends again those its last saved state holds. "Sends
    the notice again" was said of notices never saved either, which a restart leaves gone."""
    cleared = [str(notice_id) for notice_id in reply.get("cleared") or []]
    saved_before = reply.get("saved_before")
    if not isinstance(saved_before, list):
        # An older agent, or a state file it could not read: which ones, it cannot say.
        return (
            "an agent restart before its state can be written sends again any of these the "
            "state last saved held"
        )
    again = [notice_id for notice_id in cleared if notice_id in saved_before]
    gone = [notice_id for notice_id in cleared if notice_id not in saved_before]
    said = []
    if again:
        said.append(
            f"an agent restart before its state can be written sends {', '.join(again)} again"
        )
    if gone:
        they = "it was" if len(gone) == 1 else "they were"
        said.append(
            f"{', '.join(gone)}: {they} never saved either, so a restart does not bring "
            f"{'it' if len(gone) == 1 else 'them'} back"
        )
    return "; ".join(said)


def _nothing_cleared(control: str, args: argparse.Namespace) -> int:
    """`notify clear --id ID` of an id that is not an active manual notice: nothing was
    cleared (exit 1), which is no bad input. It was exit 2, 'the agent refused', for a
    script's cleanup of a notice that had expired, and named nothing for a mistyped id."""
    status = _ask(control, {"op": "status"}, args.runtime_dir, args.timeout, command="notify")
    active = _readable(control, lambda: [str(notice["id"]) for notice in status["active"]])
    if args.id in active:
        line = (
            f"{args.id!r} is not a manual notice: its provider withdraws it (a flag file's "
            "drain: remove the flag file, or ack it with `forewarn ack`); nothing cleared"
        )
    else:
        # Which of the active ones are manual, the status does not say; a flag file's and a
        # provider's have ids of their own shape.
        manual = [
            notice_id
            for notice_id in active
            if notice_id.startswith("local/") and not notice_id.startswith("local/flag/")
        ]
        line = (
            f"no active manual notice {args.id!r} (active manual: {', '.join(manual) or 'none'}"
            "); nothing cleared"
        )
    print(f"forewarn: {line}", file=sys.stderr)
    return EXIT_FAILED


# What an ack's `note` may not hold (the agent's one-line fields: no character below U+0020,
# nor U+007F), a run of it at a time.
_CONTROL_RUN = re.compile(r"[\x00-\x1f\x7f]+")


def one_line_note(note: str) -> str | None:
    """`note` with each run of control characters (line breaks, tabs, escapes) a space, and
    without the space around it; None when nothing is left."""
    return _CONTROL_RUN.sub(" ", note).strip(string.whitespace) or None


def cmd_ack(args: argparse.Namespace) -> int:
    """Tell the agent a checkpoint was saved: what a client library sends after its flush, for
    a job that is no such client (a shell script that `forewarn wait`ed, then saved)."""
    blank = _blank_is_left_out(args, "--step", "--flush-seconds")
    _, control = _endpoints(args)
    # `ack:` first, as in every other error of the command: `forewarn: --note: at most 500
    # characters` did not say which of a script's commands it was.
    if args.notice_id is not None and len(args.notice_id) > MAX_ID_LENGTH:
        raise UsageError(
            f"ack: NOTICE_ID: at most {MAX_ID_LENGTH} characters, got {len(args.notice_id)}"
        )
    if args.note is not None and _CONTROL_RUN.search(args.note):
        # `--note "$(tail -n 2 save.log)"`: the agent refused the whole ack for a line
        # break, nothing was sent, and the save's flush was lost (a loop under `set -e` ended
        # there). Made one line, as a blank --step is left out: said, and the ack goes.
        args.note = one_line_note(args.note)
        print(
            "forewarn: ack: --note: made one line (its line breaks and other control "
            "characters are sent as spaces)",
            file=sys.stderr,
        )
    if args.note is not None and len(args.note) > MAX_ACK_NOTE_LENGTH:
        raise UsageError(
            f"ack: --note: at most {MAX_ACK_NOTE_LENGTH} characters, got {len(args.note)}"
        )
    for flag in blank:
        print(f"forewarn: ack: {flag}: empty; the ack is sent without it", file=sys.stderr)
    if isinstance(args.flush_seconds, _Negative):
        print(
            f"forewarn: ack: --flush-seconds: {float(args.flush_seconds):g}s is negative, "
            "so not how long the save took (a save timed by two readings of the wall clock, "
            "`date +%s`, gives one when that clock is stepped back meanwhile); the ack is "
            "sent without it",
            file=sys.stderr,
        )
        args.flush_seconds = None
    flush_seconds = args.flush_seconds  # as given: when the save began, for the held ones
    if args.flush_seconds is not None and args.flush_seconds > MAX_FLUSH_SECONDS:
        # A save of more than an hour (`$(( $(date +%s) - started ))s`, terabytes on a slow
        # link): refused, the ack was not sent and its notice stayed held (a loop under
        # `set -e` ended there). The agent takes no more than an hour (past any notice's
        # lead already); left out, the exit margin never learnt the job's saves are slow and
        # escalated its next drain far too late for them. Sent as that hour, as the client
        # library sends it: the widest margin.
        print(
            f"forewarn: ack: --flush-seconds: {args.flush_seconds:g}s is more than "
            f"{MAX_FLUSH_SECONDS:g}s, which the agent takes; sent as {MAX_FLUSH_SECONDS:g}s",
            file=sys.stderr,
        )
        args.flush_seconds = MAX_FLUSH_SECONDS
    # What is active and held for whom: an ack names a notice that is, and its client.
    status = _ask(
        control,
        {"op": "status"},
        args.runtime_dir,
        args.timeout,
        command="ack",
        as_json=args.json,
        indent=None,
    )
    if args.notice_id is not None:
        # An id no notice has (mistyped, or cleared since the job read it) would be taken and
        # change nothing: the script that meant to release the notice is told instead.
        active = _readable(control, lambda: [str(notice["id"]) for notice in status["active"]])
        ended = status.get("ended") or []  # none from an agent older than `ended`
        if args.notice_id not in active and isinstance(ended, list) and args.notice_id in ended:
            # Withdrawn while the job saved (the flag file removed by hand, a maintenance
            # cancelled): exit 1, as for a typo, ended a loop under `set -e`. The ack goes: its
            # flush counts, and a provider's notice raised again counts it as saved for.
            print(
                f"forewarn: ack: {args.notice_id} ended while the job saved; the ack counts "
                "its flush",
                file=sys.stderr,
            )
        elif args.notice_id not in active:
            listed = ", ".join(active) or "none"
            print(
                f"forewarn: ack: no active notice {args.notice_id!r} (active: {listed}); "
                "nothing acked",
                file=sys.stderr,
            )
            return 1
    info = status.get("agent") if isinstance(status, dict) else None
    takes = info.get("takes") if isinstance(info, dict) else None  # none from an older agent
    action = args.action
    if action is not None and not (isinstance(takes, list) and TAKES_ACK_ACTION in takes):
        print(
            "forewarn: ack: --action: the agent is older than it; the ack counts for the "
            "notice's action when it arrives (a drain's save for a terminate it became)",
            file=sys.stderr,
        )
        action = None
    client = args.client
    if client is None and args.notice_id is not None:
        # `forewarn ack "$id"` without the `--client` its loop's `forewarn wait --client ME
        # --pid $$` gave: the anonymous ack kept ME's hold, and the loop's next `wait`
        # returned the same drain at once, the job saving over and over. The hold names the
        # loop's shell: an ack of that notice run under that shell is ME's. (Not an ack of no
        # notice: a periodic save's flush time, reported by the same script while its
        # backgrounded loop still saves for the notice, released that loop's hold.)
        notice_id = args.notice_id
        found = _readable(control, lambda: _holder_above(status, notice_id, os.getpid()))
        if found is not None:
            client, holder = found
            print(
                f"forewarn: ack: as client {client}, whose `forewarn wait` in this shell "
                f"(pid {holder}) holds the notice",
                file=sys.stderr,
            )
    notice_ids: list[str | None] = [args.notice_id]
    if args.notice_id is None and client is not None:
        # `forewarn ack --client ME` after `forewarn wait --client ME` returned a notice, its
        # id left out: an ack of no notice kept the hold, and the loop's next `wait` returned
        # the same drain at once, the job saving over and over. The notices held for ME were
        # handed to its `wait` before this save: they are what it saved for.
        held = _readable(control, lambda: _held_for_client(status, client))
        if flush_seconds is not None:
            # A periodic save's flush time, reported by the script whose backgrounded loop
            # (the same --client) still saves for the notice: taken for that loop's, it
            # released the hold mid-save (the flag file removed, its drain cleared, Azure's
            # after-ack approving a terminate). A save begun before the notice is not for it.
            saved_for = flush_seconds  # a name mypy keeps narrowed in the lambda
            now = time.time()
            early = _readable(control, lambda: _noticed_after(status, held, now, saved_for))
            for notice_id, lead in early.items():
                print(
                    f"forewarn: ack: not for {notice_id}, held for client {client}: this save "
                    f"began {lead:.0f}s before the agent noticed it (--flush-seconds); give "
                    "its id to ack it",
                    file=sys.stderr,
                )
            held = [notice_id for notice_id in held if notice_id not in early]
        notice_ids = [*held] or [None]
    figures = [
        f"step {args.step}" if args.step is not None else "",
        f"flush {args.flush_seconds:g}s" if args.flush_seconds is not None else "",
    ]
    said = ", ".join(figure for figure in figures if figure)
    for notice_id in notice_ids:
        payload: dict[str, Any] = {"op": "ack", "outcome": args.outcome}
        for key, value in (
            ("notice_id", notice_id),
            ("step", args.step),
            ("flush_seconds", args.flush_seconds),
            ("note", args.note),
            ("client", client),
            ("action", action if notice_id is not None else None),
        ):
            if value is not None:
                payload[key] = value
        reply = _ask(
            control,
            payload,
            args.runtime_dir,
            args.timeout,
            command="ack",
            as_json=args.json,
            indent=None,
        )
        if args.json:
            print(json.dumps(reply))
            continue
        print(
            f"acked {notice_id or '(no notice)'}: {args.outcome}" + (f" ({said})" if said else "")
        )
    return 0


def _holder_above(status: dict[str, Any], notice_id: str, pid: int) -> tuple[str, int] | None:
    """The client holding `notice_id` whose watched process
    (`wait --pid`) is the nearest ancestor of process `pid` that watches any, with that
    process. None when none is, or when that process watches holds of several clients:
    loops run in the background of one script share its `$$`, and the ack of one is not the
    other's, whose hold keeps the notice while it still saves."""
    held_for = status.get("held_for") or {}
    by_pid: dict[int, set[str]] = {}
    for notice in status["active"]:
        if notice["id"] != notice_id:
            continue
        for client, holder in (held_for.get(notice["id"]) or {}).items():
            if isinstance(holder, int) and not isinstance(holder, bool):
                by_pid.setdefault(holder, set()).add(str(client))
    for above in ancestors(pid):
        clients = by_pid.get(above)
        if clients:
            return (next(iter(clients)), above) if len(clients) == 1 else None
    return None


# A save's start is `ack time - --flush-seconds`, and scripts count whole seconds of `date +%s`
# (`$(( $(date +%s) - started ))s`): a loop's save begun just after its `wait` returned reads
# as begun up to a second or so early, before the notice.
SAVE_START_SLACK = 2.0


def _noticed_after(
    status: dict[str, Any], held: list[str], now: float, flush_seconds: float
) -> dict[str, float]:
    """Of the `held` notices, those the agent noticed more than SAVE_START_SLACK seconds after
    the save acked began (`flush_seconds` before `now`, epoch seconds), with how long after: no
    save for them. A notice whose `noticed_at` is missing, or unreadable where no age is
    given, is not among them.

    Where the status gives how long ago the agent raised a notice (`ages`, by a clock the wall
    clock's steps do not move), that and the flush time tell: by `noticed_at`, a clock
    stepped since the notice (NTP correcting one that ran ahead) read the loop's save for it
    as begun before it, and kept its hold at every ack until the clock caught up; stepped
    forward, a periodic save begun before it as begun after it, and released a hold mid-save.

    A notice changed or escalated since it was raised (a deadline moved, a second `notify` of
    its id) carries that report's time as `noticed_at`, and the loop that saved for it since
    its `wait` kept its hold and was handed it again: the time it was raised (`raised`, from
    an agent that lists it) counts when earlier."""
    started = now - flush_seconds
    raised = status.get("raised")
    raised = raised if isinstance(raised, dict) else {}  # none from an agent older than it
    ages = status.get("ages")
    ages = ages if isinstance(ages, dict) else {}  # none from an agent older than it
    found: dict[str, float] = {}
    for notice in status["active"]:
        notice_id = str(notice["id"])
        noticed = notice.get("noticed_at")
        if notice_id not in held or not isinstance(noticed, str):
            continue
        age = _age(ages.get(notice_id))
        if age is not None:
            lead = flush_seconds - age
        else:
            try:
                lead = parse_time(noticed).timestamp() - started
            except ValueError:
                continue
            first = raised.get(notice_id)
            if isinstance(first, str):
                with contextlib.suppress(ValueError):
                    lead = min(lead, parse_time(first).timestamp() - started)
        if lead > SAVE_START_SLACK:
            found[notice_id] = lead
    return found


def _age(value: object) -> float | None:
    """A status reply's age of a notice, in seconds, or None when it is none."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except OverflowError:  # an int past any float
        return None
    return seconds if 0 <= seconds < math.inf else None


def _held_for_client(status: dict[str, Any], client: str) -> list[str]:
    """The active notices a `status` reply lists as held for `client`, not acked by it yet
    (`held_for`; none from an agent older than holds in status)."""
    held_for = status.get("held_for") or {}
    return [
        str(notice["id"])
        for notice in status["active"]
        if client in (held_for.get(notice["id"]) or {})
    ]


# `wait` and `watch` exit with this code when no agent is heard (no heartbeat or notice within
# --agent-timeout): a script or unit that waits on a dead socket fails instead of hanging.
NO_AGENT_EXIT = 3
AGENT_TIMEOUT = 5.0


def _subscribe(events: str, token: str) -> Any:
    """A SUB on notices and heartbeats: the heartbeats tell a quiet agent from no agent; and
    on `replay/<token>`, last, so that the heartbeat of its join replay names `token`."""
    import zmq

    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SUBSCRIBE, TOPIC_HEARTBEAT.encode())
    sock.setsockopt(zmq.SUBSCRIBE, TOPIC_NOTICE.encode())
    sock.setsockopt(zmq.SUBSCRIBE, f"{TOPIC_REPLAY_PREFIX}{token}".encode())
    allow_ipv6(sock, events)
    sock.connect(events)
    return sock


class _AgentSilence:
    """Tracks the last sign of life; `gone()` once --agent-timeout passes without one."""

    def __init__(self, command: str, events: str, timeout: float) -> None:
        self.command = command
        self.events = events
        self.timeout = timeout
        self.last = time.monotonic()
        self.heard = False
        self.agent: str | None = None

    def alive(self, agent: str | None = None) -> None:
        """A sign of life; a heartbeat's `agent` that differs from the last one's is a restart,
        which the events socket's reconnect otherwise hid: one line says so."""
        self.last = time.monotonic()
        self.heard = True
        if agent is None:
            return
        if self.agent is not None and agent != self.agent:
            print(
                f"forewarn: {self.command}: the agent on {self.events} restarted "
                f"(was {self.agent}, now {agent})",
                file=sys.stderr,
                flush=True,
            )
        self.agent = agent

    def left(self) -> float:
        return self.last + self.timeout - time.monotonic() if self.timeout else 1.0

    def gone(self) -> bool:
        if not self.timeout or self.left() > 0:
            return False
        self._say("lost the agent" if self.heard else "no agent", self.timeout)
        return True

    def unheard_by(self, timeout: float) -> bool:
        """At a `--timeout` shorter than `--agent-timeout`: no agent was heard at all. Exit
        1 ("no terminate within 3s") read as a quiet agent, and a script could not tell it
        from a dead one; a heartbeat comes every 1.5 s at most, so a live one was heard."""
        if not self.timeout or self.heard:
            return False
        self._say("no agent", timeout)
        return True

    def _say(self, what: str, within: float) -> None:
        # A stopped agent runs: "is `forewarn agent` running?" sent the operator to `ps`,
        # where it was, when what it needs is a `kill -CONT` (as `status` says).
        stopped = _stopped_holder(self.events)
        why = (
            "is `forewarn agent` running?"
            if stopped is None
            else f"its pid {stopped} is stopped, by SIGSTOP, Ctrl-Z or a debugger: "
            f"`kill -CONT {stopped}` resumes it"
        )
        if stopped is not None:
            what = "the agent is stopped"
        print(
            f"forewarn: {self.command}: {what} on {self.events}: no heartbeat within "
            f"{within:g}s ({why})",
            file=sys.stderr,
            flush=True,
        )


# A malformed message is dropped, as the client library drops it; one line says so at most
# this often, so a broken publisher cannot flood the terminal.
MALFORMED_WARN_SECONDS = 60.0


class _Messages:
    """Reads (topic, message) from the events socket, checked as the client library checks
    them: a message of the wrong shape was a crash ('unexpected KeyError') of watch and wait."""

    def __init__(self, command: str, events: str) -> None:
        self.command = command
        self.events = events
        self.throttle = WarningThrottle(MALFORMED_WARN_SECONDS)

    def read(self, sock: Any) -> tuple[str, dict[str, Any]] | None:
        from forewarn.clients.event import Event, load_json
        from forewarn.clients.notices import parse_heartbeat

        frames = sock.recv_multipart()
        topic = frames[0].decode("utf-8", "replace")
        try:
            if len(frames) != 2:
                raise ValueError(f"{len(frames)} frames, not 2 (topic, JSON)")
            if topic == TOPIC_HEARTBEAT:
                beat = parse_heartbeat(frames[1])
                for name in ("sent_at", "agent"):
                    if not isinstance(beat.get(name), str):
                        raise ValueError(f"heartbeat field {name!r} is not a string")
                return topic, beat
            if topic != TOPIC_NOTICE:
                raise ValueError(f"unknown topic {topic[:40]!r}")
            Event.from_json(frames[1])
            notice: dict[str, Any] = load_json(frames[1], "notice")
            return topic, notice
        except ValueError as error:
            self._say(topic, error)
            return None

    def _say(self, topic: str, error: ValueError) -> None:
        held = self.throttle.due()
        if held is None:
            return
        since = f" ({held - 1} more since the last)" if held > 1 else ""
        print(
            f"forewarn: {self.command}: dropped a malformed {topic[:40]!r} message on "
            f"{self.events}: {str(error)[:200]}{since}",
            file=sys.stderr,
            flush=True,
        )


# How long heartbeats list a notice that has not arrived before it counts as dropped: more
# than the replay that follows a new subscription takes, less than the agent's 1 s beat.
MISSED_AFTER = 0.5


class _Unreceived:
    """Notices the heartbeats list that never arrived here, asked for again as the client
    library and the C subscriber ask: a script stopped for hours (SIGSTOP, a scheduler's
    suspend) fills the high-water marks with heartbeats, and a notice sent then is dropped.
    `forewarn wait --for terminate && kill "$JOB"`, resumed, read heartbeats listing the
    terminate and waited on. Listed by heartbeats for MISSED_AFTER without arriving, a
    second subscription to `notice` makes the agent replay. Not by two heartbeats alone: a
    regular one can come just before a new subscriber's replay, and the replay's own then
    listed the notice twice before it came (`watch --count 2` counted the extra replay).
    Nor before the agent has answered this subscription (a heartbeat naming `token` in its
    `replay_for`), where its heartbeats say it will (an older agent's have no `replay_for`):
    an agent slow to read subscriptions listed a notice in force for seconds before its
    replay, and `watch` said on stderr that it was "never received here". After a restart,
    the same: the socket subscribes again, and the restarted agent's replay is checked at the
    heartbeat after the one naming the token, not at its second heartbeat, which such an
    agent sent before its replay ("whose replay never arrived here")."""

    def __init__(self, command: str, events: str, token: str) -> None:
        self.command = command
        self.events = events
        self.token = token
        # The `agent` of the last heartbeat naming the token: that agent has answered this
        # socket's subscription. And the agent heard last, with when its first heartbeat was
        # read here.
        self._answered_by: object = None
        self._heard: tuple[object, float] | None = None
        self.received: set[str] = set()
        self._unreceived: dict[str, float] = {}  # listed, not received: since when
        self._asked = -math.inf
        self._said: set[str] = set()
        self._agent: object = None  # the last heartbeat's `agent`
        # The numbers the agent's messages skipped: the client library's rule and code.
        self._seqs = SeqGaps()
        # As the client library keeps them (see Notices._heartbeat): the ids received since
        # the last jump, and after a restart the ids its replay brought until its second
        # heartbeat, and those it lists that it did not.
        self._since_jump: set[str] = set()
        self._restart_ids: set[str] | None = None
        self._unreplayed: set[str] = set()

    def notice(self, notice: dict[str, Any]) -> None:
        if notice["action"] == "clear":
            self.received.discard(notice["id"])
        else:
            self.received.add(notice["id"])
        if self._seqs.note(notice.get("seq")):
            self._since_jump = set()
        self._since_jump.add(notice["id"])
        if self._restart_ids is not None:
            self._restart_ids.add(notice["id"])

    def heartbeat(self, beat: dict[str, Any], sock: Any) -> set[str]:
        """Asks for a replay when due; returns the ids asked for (empty when none)."""
        import zmq
        from forewarn.clients.notices import REPLAY_ASK_EVERY

        active = set(beat["active"])
        self.received &= active  # gone: one raised again under its id is new again
        now = time.monotonic()
        agent = beat.get("agent")
        if self._heard is None or self._heard[0] != agent:
            self._heard = (agent, now)
        replay_for = beat.get("replay_for")
        speaks = isinstance(replay_for, list)
        # Its replay came between an earlier heartbeat naming the token and this one.
        replayed = not speaks or self._answered_by == agent
        if isinstance(replay_for, list) and self.token in replay_for:
            self._answered_by = agent
        # What the heartbeats list before this agent's replay to us is what that replay
        # brings, and so is what the heartbeat naming the token lists (its replay follows
        # it): taken for missed there, a drain listed for a second before it was "never
        # received here". One not come within REPLAY_ASK_EVERY (that heartbeat lost) is
        # asked for.
        waited = now - self._heard[1] >= REPLAY_ASK_EVERY
        joining = not replayed and not waited
        if self._agent is None:
            # The first heartbeat read: the messages before it (a join replay) are most likely
            # this agent's, and one lost just before it left no gap anywhere else.
            self._agent = beat.get("agent")
            self._seqs.note(beat.get("seq"))
        elif beat.get("agent") != self._agent:
            # A restarted agent numbers on from its reserved mark: that jump is no gap, but a
            # second one before this heartbeat is; and it replays every notice it lists to a
            # client that reconnects, so one its next heartbeat lists that did not come since
            # the jump was dropped. Wiping it all, a lost escalation whose replay was lost too
            # left `wait --for terminate` waiting under a terminate.
            self._agent = beat.get("agent")
            if self._seqs.note(beat.get("seq")):
                self._since_jump = set()
            self._seqs.restarted()
            self._restart_ids = set(self._since_jump)
        else:
            self._seqs.note(beat.get("seq"))
            if self._restart_ids is not None and (replayed or waited):
                self._unreplayed = active - self._restart_ids
                self._restart_ids = None
        self._seqs.heartbeat_read()
        self._since_jump = set()
        self._unreceived = {
            notice_id: now if joining else self._unreceived.get(notice_id, now)
            for notice_id in active - self.received
        }
        missed = {i for i, since in self._unreceived.items() if now - since >= MISSED_AFTER}
        gap_open = self._seqs.gap is not None
        if not (missed or gap_open or self._unreplayed) or now - self._asked < REPLAY_ASK_EVERY:
            return set()
        self._asked = time.monotonic()
        sock.setsockopt(zmq.SUBSCRIBE, TOPIC_NOTICE.encode())
        gap = self._seqs.take()
        if gap is not None:
            first, last = gap
            print(
                f"forewarn: {self.command}: {last - first + 1} message(s) from the agent on "
                f"{self.events} never arrived here (seq {first} to {last}); asking it to send "
                "the active notices again",
                file=sys.stderr,
                flush=True,
            )
        elif self._unreplayed:
            print(
                f"forewarn: {self.command}: the restarted agent on {self.events} lists "
                f"{', '.join(sorted(self._unreplayed)[:5])}, whose replay never arrived here; "
                "asking it to send the active notices again",
                file=sys.stderr,
                flush=True,
            )
        self._unreplayed = set()
        if missed - self._said:
            print(
                f"forewarn: {self.command}: the agent on {self.events} lists "
                f"{', '.join(sorted(missed)[:5])}, never received here; asking it to send the "
                "active notices again",
                file=sys.stderr,
                flush=True,
            )
        self._said = missed
        return missed


def _poll_ms(deadline: float | None, silence: _AgentSilence, due: float | None = None) -> int:
    left = min(1.0, max(0.0, silence.left()))
    if due is not None:
        left = min(left, due)
    if deadline is not None:
        left = min(left, max(0.0, deadline - time.monotonic()))
    return max(1, int(left * 1000))


def _print_notice(args: argparse.Namespace, notice: dict[str, Any], *, replay: bool) -> None:
    if args.json:
        print(json.dumps({"topic": TOPIC_NOTICE, "replay": replay, **notice}), flush=True)
    else:
        print(describe(notice, replay=replay), flush=True)


def cmd_watch(args: argparse.Namespace) -> int:
    events, _ = _endpoints(args)
    token = new_replay_token()
    sock = _subscribe(events, token)
    silence = _AgentSilence("watch", events, args.agent_timeout)
    deadline = time.monotonic() + args.timeout if args.timeout else None
    replays = ReplayTracker()
    messages = _Messages("watch", events)
    unreceived = _Unreceived("watch", events, token)
    seen = 0
    try:
        while args.count is None or seen < args.count:
            if deadline is not None and time.monotonic() >= deadline:
                if silence.unheard_by(args.timeout):
                    return NO_AGENT_EXIT
                # Exit 1 alone read as a failure nobody named: a script's log showed nothing.
                shown = f"{seen} notice(s)" + (f" of --count {args.count}" if args.count else "")
                print(
                    f"forewarn: watch: --timeout {args.timeout:g}s reached; {shown} printed",
                    file=sys.stderr,
                    flush=True,
                )
                return 1
            if silence.gone():
                return NO_AGENT_EXIT
            if not sock.poll(_poll_ms(deadline, silence)):
                continue
            read = messages.read(sock)
            if read is None:
                continue
            topic, message = read
            silence.alive(message["agent"] if topic == TOPIC_HEARTBEAT else None)
            if topic == TOPIC_HEARTBEAT:
                for clear in replays.heartbeat(message):
                    _print_notice(args, clear, replay=False)
                    seen += 1
                    if args.count is not None and seen >= args.count:
                        return 0
                replays.missed(unreceived.heartbeat(message, sock))
                if not args.heartbeats:
                    continue
                if args.json:
                    print(json.dumps({"topic": TOPIC_HEARTBEAT, **message}), flush=True)
                else:
                    print(
                        f"{message['sent_at']}  heartbeat  agent {message['agent']} "
                        f"active {len(message['active'])}",
                        flush=True,
                    )
                continue
            unreceived.notice(message)
            _print_notice(args, message, replay=replays.is_replay(message))
            seen += 1
    finally:
        sock.close()  # a Ctrl-C goes on to main, which ends by it (`_end_by_sigint`)
    return 0


def cmd_wait(args: argparse.Namespace) -> int:
    """Block until a notice asks for `--for`; a terminate also satisfies a wait for drain.
    Notices in force before it began are decided as the client library decides them
    (`waitrule`)."""
    if args.pid is not None and args.client is None:
        raise UsageError("wait: --pid: names the process that acks as --client ID; give --client")
    if args.pid is not None and not process_exists(args.pid):
        # Held for it, the hold went at the agent's next look: released while the loop saved.
        raise UsageError(f"wait: --pid: no process {args.pid} (give the loop's shell: $$)")
    events, control = _endpoints(args)
    accepted = {"drain": ("drain", "terminate"), "terminate": ("terminate",)}[args.wait_for]
    rule = WaitRule(
        accepted,
        started=utcnow(),
        exit_margin=args.exit_margin,
        say=lambda line: print(f"forewarn: wait: {line}", file=sys.stderr, flush=True),
        client=args.client,
        ages=lambda: _status_ages(control, args.runtime_dir),
    )
    token = new_replay_token()
    sock = _subscribe(events, token)
    silence = _AgentSilence("wait", events, args.agent_timeout)
    messages = _Messages("wait", events)
    unreceived = _Unreceived("wait", events, token)
    deadline = time.monotonic() + args.timeout if args.timeout else None

    def found(notice: dict[str, Any]) -> int:
        if args.client is not None:
            _hold(control, args.runtime_dir, notice["id"], args.client, args.pid)
        print(json.dumps(notice) if args.json else describe(notice), flush=True)
        return 0

    try:
        while True:
            ready = rule.due()
            if ready is not None:
                return found(ready)
            if deadline is not None and time.monotonic() >= deadline:
                if silence.unheard_by(args.timeout):
                    return NO_AGENT_EXIT
                print(
                    f"forewarn: wait: no {args.wait_for} within {args.timeout:g}s",
                    file=sys.stderr,
                )
                return 1
            if silence.gone():
                return NO_AGENT_EXIT
            if not sock.poll(_poll_ms(deadline, silence, rule.next_due())):
                continue
            read = messages.read(sock)
            if read is None:
                continue
            topic, notice = read
            silence.alive(notice["agent"] if topic == TOPIC_HEARTBEAT else None)
            if topic != TOPIC_NOTICE:
                unreceived.heartbeat(notice, sock)
                ready = rule.heartbeat(notice)
            else:
                unreceived.notice(notice)
                ready = rule.notice(notice)
            if ready is not None:
                return found(ready)
    finally:
        sock.close()  # a Ctrl-C goes on to main, which ends by it (`_end_by_sigint`)


def _status_ages(control: str, runtime: Path | None) -> dict[str, float] | None:
    """The agent's `ages` of its notices (`waitrule`: raised after the wait began?), counted
    from their `noticed_at` (`status_ages`), or None when it gives none (older) or does not
    answer within AGES_TIMEOUT."""
    try:
        reply = request(control, {"op": "status"}, AGES_TIMEOUT, runtime=runtime)
    except (TimeoutError, OSError, ReplyError):
        return None
    return status_ages(reply)


def _hold(control: str, runtime: Path | None, notice_id: str, client: str, pid: int | None) -> None:
    """Before `wait --client ID` hands the notice to its job: have the agent count ID among
    the clients that must ack it, as a subscriber that received it is counted. `wait` ends as
    it returns the notice, so the agent does not see the job saving: the first shell job's ack
    released the notice (the flag file removed, Azure approving early) while a second one
    was still saving. With `--pid`, the hold names the process that acks, so that the agent
    lets go of it once that is gone (`holders`). Never fails the wait: the notice is the
    job's either way."""
    payload: dict[str, Any] = {"op": "hold", "notice_id": notice_id, "client": client}
    if pid is not None:
        # Read here, in the loop's pid namespace: the agent may see other pids.
        payload |= {
            "pid": pid,
            "pid_start": process_start(pid),
            "pid_namespace": pid_namespace(),
            "pgid": process_group(pid),
        }
        payload = {key: value for key, value in payload.items() if value is not None}
    reply = _hold_request(control, payload, runtime)
    if reply.get("ok") is not True and pid is not None and "unanswered" not in reply:
        # An agent older than `--pid` refuses its fields: held without them, as before.
        plain = {"op": "hold", "notice_id": notice_id, "client": client}
        if _hold_request(control, plain, runtime).get("ok") is True:
            reply = {"ok": True, "held": True, "watched": False}
    if reply.get("ok") is not True:
        # An agent older than this command refuses the request (`op`: no such operation).
        print(
            f"forewarn: wait: the agent did not hold {notice_id} for client {client} "
            f"({reply.get('error')}): another job's ack may release it before this job acks",
            file=sys.stderr,
            flush=True,
        )
    elif pid is not None and reply.get("held") is True and reply.get("watched") is not True:
        print(
            f"forewarn: wait: the agent cannot watch process {pid} (another pid namespace, or "
            f"an agent older than --pid): {notice_id} stays held for client {client} until it "
            "acks or the notice ends, even if that process is killed first",
            file=sys.stderr,
            flush=True,
        )


def _hold_request(control: str, payload: dict[str, Any], runtime: Path | None) -> dict[str, Any]:
    try:
        return request(control, payload, HOLD_TIMEOUT, runtime=runtime)
    except (TimeoutError, OSError, ReplyError) as error:
        return {"ok": False, "error": str(error), "unanswered": True}


def cmd_status(args: argparse.Namespace) -> int:
    _, control = _endpoints(args)
    reply = _ask(
        control,
        {"op": "status"},
        args.runtime_dir,
        args.timeout,
        command="status",
        as_json=args.json,
    )
    # A part that is dead (the events socket file removed, a notifier's task ended) is what
    # /healthz answers 503 for: exit 1 as well, since status is the liveness probe of the
    # Kubernetes overlays and the Docker image, where nothing else restarts the agent.
    try:
        dead = _readable(control, lambda: dead_parts(reply))
        # Not ready (a provider with no successful poll yet: /readyz answers 503) is exit 4
        # with --ready only: the plain status is the startup and liveness probe, and
        # restarting an agent whose provider endpoint does not answer yet reaches it no sooner.
        waiting = _readable(control, lambda: never_polled(reply)) if args.ready else []
    except ReplyError as error:
        # `"parts": null` was an unexpected AttributeError, and `--json` printed nothing.
        _no_reply(control, "unreadable-reply", str(error), args.json)
    code = 1 if dead else 4 if waiting else 0
    if args.json:
        print(json.dumps(reply, indent=2))
    else:
        print("\n".join(_readable(control, lambda: _status_lines(reply))))
    if code == 4:
        print(
            f"forewarn: not ready: {', '.join(waiting)} has not polled successfully yet "
            "(/readyz answers 503)",
            file=sys.stderr,
            flush=True,
        )
    return code


def never_polled(reply: dict[str, Any]) -> list[str]:
    """The providers a status reply shows with no successful poll yet (as /readyz counts)."""
    return [
        str(health["name"])
        for health in reply.get("health", [])
        if isinstance(health, dict) and not health.get("last_success")
    ]


def dead_parts(reply: dict[str, Any]) -> list[str]:
    """The parts of the agent a status reply shows dead (an older agent shows none)."""
    parts = reply.get("parts", {})
    return sorted(name for name, running in parts.items() if not running)


def _status_lines(reply: dict[str, Any]) -> list[str]:
    agent = reply["agent"]
    lines = [
        f"agent      {agent['agent']} (forewarn {agent['version']}, pid {agent['pid']})",
        f"providers  {', '.join(agent['providers'])}",
        f"events     {agent['events']}",
        f"control    {agent['control']}",
        f"since      {agent['started_at']}; seq {agent['seq']}; "
        f"{agent['subscribers']} acking client(s)",
    ]
    for health in reply.get("health", []):
        line = f"provider   {health['name']:<13} {health['state']}"
        if health["state"] == "degraded":
            said = health.get("last_error_message")  # none from an older agent
            why = f"{health['last_error']}: {said}" if said else health["last_error"]
            line += f" (last error: {why})"
        if health.get("last_success"):
            line += f"; last successful poll {health['last_success']}"
        elif health["state"] != "healthy":
            line += "; no successful poll yet"
        lines.append(line)
        for kind, why in sorted(health.get("conditions", {}).items()):
            lines.append(f"condition  {health['name']}: {kind}: {why}")
    for kind, why in sorted(agent.get("conditions", {}).items()):
        lines.append(f"condition  agent: {kind}: {why}")
    for name, counts in sorted(reply.get("notifiers", {}).items()):
        lines.append(
            f"notifier   {name:<13} delivered {counts['delivered']}, failed {counts['failed']}, "
            f"dropped {counts['dropped']}, pending {counts['pending']}"
        )
    for name in dead_parts(reply):
        why = (
            "its socket file is gone or replaced: no new client can subscribe; restart the agent"
            if name == "events"
            else "not running or not answering"
        )
        lines.append(f"dead       {name}: {why} (/healthz answers 503)")
    if not reply["active"]:
        lines.append("active     none")
    acked_by = reply.get("acked_by") or {}
    held_for = reply.get("held_for") or {}  # none from an agent older than holds in status
    unacked = reply.get("unacked_past_deadline") or {}  # none from an older agent
    unknown = reply.get("past_deadline_receivers_unknown") or []  # none from an older agent
    gone_before_ack = reply.get("gone_before_ack") or {}  # none from an older agent
    save_failed = reply.get("save_failed") or {}  # none from an older agent
    overdue = reply.get("overdue") or {}  # none from an older agent
    for notice in reply["active"]:
        line = "active     " + describe(notice, noticed=True)
        clients = acked_by.get(notice["id"]) if isinstance(acked_by, dict) else None
        if isinstance(clients, list) and clients:
            line += "  acked by " + ", ".join(str(client) for client in clients)
        held = held_for.get(notice["id"]) if isinstance(held_for, dict) else None
        late = unacked.get(notice["id"]) if isinstance(unacked, dict) else None
        gone = gone_before_ack.get(notice["id"]) if isinstance(gone_before_ack, dict) else None
        failed = save_failed.get(notice["id"]) if isinstance(save_failed, dict) else None
        line += _waited_for(held, late, gone, failed)
        if isinstance(unknown, list) and notice["id"] in unknown:
            line += (
                "  its deadline passed; the clients that received it before the agent "
                "restarted are not known (its state file was an older agent's)"
            )
        since = overdue.get(notice["id"]) if isinstance(overdue, dict) else None
        if isinstance(since, str):
            line += (
                f"  overdue since {one_line(since)}: past its deadline plus the grace and "
                f"{one_line(str(notice['provider']))} still shows it (the machine was not taken "
                "yet)"
            )
        lines.append(line)
    return lines


def _waited_for(held: object, late: object, gone: object = None, failed: object = None) -> str:
    """The clients a notice still waits for, each named once: a held client past the deadline
    is in both `held_for` and `unacked_past_deadline`, and the line named it twice ("waiting for
    loop (pid 7)  not acked by loop (its deadline passed)"), as if two jobs were late. One
    that left before its ack is said so, as the agent's warning says it, and one whose save
    failed says so and why (it tried)."""
    pids = {str(c): pid for c, pid in held.items()} if isinstance(held, dict) else {}
    notes = {str(c): str(n) for c, n in failed.items()} if isinstance(failed, dict) else {}
    overdue = [str(client) for client in late] if isinstance(late, list) else []
    left = {str(client) for client in gone} if isinstance(gone, list) else set()

    def failure(client: str) -> str:
        why = notes[client]
        return f"its save failed: {why}" if why else "its save failed"

    def named(client: str) -> str:
        pid = pids.get(client)
        said = [] if pid is None else [f"pid {pid}"]
        if client in notes:
            said.append(failure(client))  # held still, its save failed: it may try again
        return f"{client} ({', '.join(said)})" if said else client

    def named_late(client: str) -> str:
        if client in notes:
            return f"{client} ({failure(client)})"
        if client not in pids:
            return f"{client} (gone before its ack)" if client in left else client
        pid = pids[client]
        return f"{client} (still held)" if pid is None else f"{client} (still held, pid {pid})"

    said = ""
    waiting = [client for client in pids if client not in overdue]
    if waiting:
        said += "  waiting for " + ", ".join(named(client) for client in waiting)
    if overdue:
        # The deadline first: after it a client's own note, "(gone before its ack) (its
        # deadline passed)", read as two notes about that client.
        said += "  past its deadline, not acked by "
        said += ", ".join(named_late(client) for client in overdue)
    # Before its deadline, or with none (a drain): a job gone without its save for it (one
    # still held is waited for: named there, once).
    early = sorted(client for client in left if client not in overdue and client not in pids)
    early = [client for client in early if client not in notes]
    if early:
        said += "  gone before its ack: " + ", ".join(early)
    # Before its deadline, or with none (a drain): a job whose save for it failed, with why
    # (only in the agent's log before, the drain shown as if the job had saved for it).
    unsaved = sorted(client for client in notes if client not in overdue and client not in pids)
    if unsaved:
        said += "  not saved by " + ", ".join(f"{c} ({failure(c)})" for c in unsaved)
    return said


def cmd_schema(args: argparse.Namespace) -> int:
    from .protocol import schema_text

    sys.stdout.write(schema_text())
    return 0


# `drill local`'s options by the drill that uses them, with their defaults (the parser's are
# None, so that an option given to a drill that does not use it can be refused).
_QUICK_OPTIONS: dict[str, tuple[str, object]] = {
    "--provider": ("source", "local"),
    "--steps": ("steps", 400),
    "--step-time": ("step_time", 0.02),
}
_BACKGROUND_OPTIONS: dict[str, tuple[str, object]] = {
    "--upload-delay": ("upload_delay", 1.5),
    "--deadline": ("deadline", 20.0),
}
_SCENARIO_OPTIONS: dict[str, tuple[str, object]] = {
    "--lead": ("lead", 8.0),
    "--seed": ("seed", None),
    "--handler": ("handler", "guard"),
}


def _drill_local_options(args: argparse.Namespace) -> None:
    """Refuse an option the chosen drill does not use, then fill in the defaults. Each was
    ignored in silence: `forewarn drill local --handler plain` ran the guard's quick drill
    and printed "steps lost: 0", `--upload-delay 3` without --background a plain drill."""

    def given(options: dict[str, tuple[str, object]]) -> list[str]:
        return [
            flag
            for flag, (dest, _default) in options.items()
            if getattr(args, dest, None) is not None
        ]

    scenario = getattr(args, "scenario", "quick")
    if scenario != "quick":
        unused = given(_QUICK_OPTIONS) + given(_BACKGROUND_OPTIONS)
        if unused:
            raise UsageError(
                f"drill local: {', '.join(unused)}: not used by --scenario {scenario} "
                "(only by the quick drill)"
            )
    else:
        unused = given(_SCENARIO_OPTIONS)
        if unused:
            raise UsageError(
                f"drill local: {', '.join(unused)}: only used with --scenario systemd, "
                "kubernetes, cloud, torchrun, matrix or ci"
            )
        unused = [] if args.background else given(_BACKGROUND_OPTIONS)
        if unused:
            raise UsageError(f"drill local: {', '.join(unused)}: only used with --background")
    for dest, default in (_QUICK_OPTIONS | _BACKGROUND_OPTIONS | _SCENARIO_OPTIONS).values():
        if getattr(args, dest, None) is None:
            setattr(args, dest, default)


def _output_to_devnull() -> None:
    """stdout and stderr, whose reader or terminal is gone, pointed at /dev/null: what is
    left in their buffers then goes nowhere at the exit, without an error."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        os.dup2(devnull, stream.fileno())
    os.close(devnull)


def cmd_drill_local(args: argparse.Namespace) -> int:
    import signal

    from forewarn.providers.registry import REGISTRY

    from .drill_local import check_steps, longest_socket, minimum_steps, run_local_drill
    from .drill_reclaim import machines_for, run_reclaim_drill

    steps_given = getattr(args, "steps", None) is not None
    _drill_local_options(args)

    # Only a simulator with a drill script can stand in for the control socket: DigitalOcean's
    # (its notice is an email) passed this check and failed as 'drill failed', exit 1.
    sources = ["local"]
    for spec in REGISTRY.with_simulator():
        assert spec.simulate is not None
        if spec.simulate().drill_script():
            sources.append(spec.name)
    if args.source in REGISTRY and args.source not in sources:
        raise UsageError(
            f"drill local: --provider: {args.source} has no simulator the drill can run; "
            f"choose among {', '.join(sources)}"
        )
    if args.source not in sources:
        raise UsageError(f"drill local: --provider: {REGISTRY.unknown(args.source, sources)}")
    if args.background and (args.source != "local" or args.scenario != "quick"):
        raise UsageError(
            "drill local: --background runs the quick scenario with the local notice source"
        )
    if args.scenario == "quick":
        if not steps_given:
            # A slow --upload-delay spaces the periodic saves out past the default run: the
            # default grows to fit rather than be refused as if the user had asked for 400.
            least = minimum_steps(args.step_time, args.background, args.upload_delay)
            args.steps = max(args.steps, least)
        check_steps(args.steps, args.step_time, args.background, args.upload_delay)
    if args.dir is not None:
        try:
            args.dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            why = error.strerror
            raise UsageError(f"drill local: --dir: cannot use {args.dir}: {why}") from None
        # One that exists but is not this user's to write into (another user's, a read-only
        # mount) failed once the drill had started, as an unexpected error (exit 1).
        try:
            tempfile.TemporaryFile(dir=args.dir).close()
        except OSError as error:
            why = error.strerror
            raise UsageError(f"drill local: --dir: cannot write into {args.dir}: {why}") from None
        # After the checks above: a --dir under a file was refused as too deep when its path was
        # long as well (pytest's temporary directories past pytest-999), not as unusable.
        too_long = longest_socket(args.dir, machines_for(args))
        if too_long is not None:
            raise UsageError(
                f"drill local: --dir: {args.dir} is too deep for the agents' sockets: "
                f"{too_long} is {len(os.fsencode(too_long))} bytes, Linux allows at most "
                f"{IPC_PATH_MAX} (give a shorter directory)"
            )

    # A SIGTERM (a CI timeout, `kill`, a closed terminal's SIGHUP) ended the drill at once and
    # left its agent, its demo and a reclaim drill's torchrun job running: as an interrupt,
    # it goes through the drill's cleanup like Ctrl-C does, and a second one (Ctrl-C pressed
    # again) does not cut that cleanup short.
    stops = [signal.SIGTERM]
    # SIGHUP only at its default: `nohup forewarn drill local &` was interrupted at the logout
    # all the same, the drill taking the hangup nohup had it ignore for an interrupt.
    if signal.getsignal(signal.SIGHUP) is signal.SIG_DFL:
        stops.append(signal.SIGHUP)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        stops.append(signal.SIGINT)
    heard: list[str] = []

    def passed_by(signum: int, frame: object) -> None:
        """A stop after the first: the cleanup goes on. A handler, not SIG_IGN: a second
        signal already on its way as the first's handler set SIG_IGN printed Python's
        `OSError: Signal 15 ignored due to race condition` traceback."""

    def interrupt(signum: int, frame: object) -> None:
        for stop in stops:
            signal.signal(stop, passed_by)
        heard.append(signal.Signals(signum).name)
        raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, interrupt) for signum in stops}
    try:
        return run_local_drill(args, reclaim=run_reclaim_drill, machines=machines_for(args))
    except KeyboardInterrupt:
        # An interrupted drill ended 130 in silence, its timeline cut short as if it were
        # still running: the last line says it was stopped, by what, and that it measured
        # nothing. Said once the cleanup (the finally blocks under this) has run.
        by = heard[0] if heard else "SIGINT"
        try:
            print(
                f"forewarn: drill local: interrupted by {by}: its agent and job were stopped, "
                "no steps measured",
                file=sys.stderr,
                flush=True,
            )
        except OSError:
            # A closed terminal answers with EIO: the interrupt became an unexpected error,
            # exit 1, or, the line left in the buffer, exit 120 from Python's own flush at
            # the exit, for whoever reads the status (`ssh host forewarn drill local`).
            _output_to_devnull()
        return EXIT_INTERRUPTED
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# The parser.


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("forewarn")
    except PackageNotFoundError:
        return "unknown (not installed)"


class _ShowVersion(argparse.Action):
    """`--version` as argparse's own shows it, with the version read only when asked:
    argparse's `version=` string was read as every command built its parser, importlib.metadata
    and a search of the installed packages' metadata for each `forewarn status` or `ack`
    (about 0.035 of its 0.17 CPU-s)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "show program's version number and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> NoReturn:
        print(f"forewarn {_version()}")
        parser.exit()


def _section_loader(registry: Registry, name: str) -> Callable[[Path | None], Any]:
    def load(config_file: Path | None = None) -> Any:
        from .config import load_settings

        return load_settings(config_file, registry=registry).provider_settings(name)

    return load


def build_parser(
    command: str | None = None,
    registry: Registry | None = None,
    *,
    top: bool = False,
    provider: str | None = None,
) -> argparse.ArgumentParser:
    """The whole parser; given the `command` about to run, only what it needs is imported
    (the agent must not carry every provider's simulator and drill in memory). The provider
    choices, `simulate` and `drill` subcommands come from `registry` (default: all). With
    `top`, only what `forewarn --help` and `--version` show: the commands, not their
    arguments. With `provider`, the one `simulate` or `drill` names: only its face is loaded,
    the other providers' subcommands have no arguments (only their names are read)."""
    if top:
        command = ""
    if registry is None and command in (None, "agent", "simulate", "drill"):
        # Only these need the providers (and pydantic); `watch` and `wait` start quickly.
        from forewarn.providers.registry import REGISTRY

        registry = REGISTRY
    names = registry.names() if registry is not None else ()
    if provider not in names:  # `simulate --help`, `drill --yes aws`: every face, as before
        provider = None

    def wanted(name: str) -> bool:
        return command is None or command == name

    parser = Parser(
        prog="forewarn",
        description="Turn every provider's interruption notice into one event your job acts on.",
        epilog="Exit codes: 0 done, 1 failed (notify, status and ack: also no agent, or no "
        "answer; status: a part dead; checkpoint verify: a corrupt generation), 2 bad input "
        "(drill: also missing cloud credentials), 3 no agent heard (wait, watch; checkpoint: "
        "the store could not be read, or prune could not delete), 4 not ready (status "
        "--ready: a provider has not polled successfully yet), 130 interrupted (wait and "
        "watch end by the SIGINT itself). --debug (anywhere) shows the traceback of an "
        "unexpected error.",
    )
    parser.add_argument("--version", action=_ShowVersion)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    agent = commands.add_parser("agent", help="run the agent")
    agent.add_argument(
        "--provider",
        action="extend",
        type=_provider_names(("auto", *names)),
        metavar="NAME",
        help="watcher to run: auto, or one or several of "
        f"{', '.join(names)} (repeat, or separate by commas or space; default: auto)",
    )
    agent.add_argument(
        "--config",
        type=_path,
        help="TOML file (default: $FOREWARN_CONFIG, "
        "else /etc/forewarn/forewarn.toml when it exists)",
    )
    # Each with its default, as the README's table gives it: an operator asking the agent
    # where its sockets and state go was not told.
    agent.add_argument(
        "--runtime-dir",
        type=_path,
        help="directory of the sockets and flag file (default: /run/forewarn when "
        "writable, else $XDG_RUNTIME_DIR/forewarn, else /tmp/forewarn-<uid>)",
    )
    agent.add_argument(
        "--state-dir",
        type=_path,
        help="directory of the state file, telemetry and the watchers' own files (default: "
        "/var/lib/forewarn when writable, else $XDG_STATE_HOME/forewarn, "
        "~/.local/state/forewarn without it)",
    )
    agent.add_argument("--events", help="events endpoint to bind (default: ipc://<runtime>/events)")
    agent.add_argument(
        "--control", help="control endpoint to bind (default: ipc://<runtime>/control)"
    )
    agent.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow TCP endpoints on addresses other than loopback",
    )
    # As text, read by the configuration as its key's value from every source (a number as
    # TOML writes one, or a duration): `--exit-margin 1_000` was refused while
    # FOREWARN_EXIT_MARGIN=1_000 and the file's `exit_margin = 1_000` were read.
    agent.add_argument(
        "--exit-margin",
        type=_config_number,
        metavar="DURATION",
        help="floor of the margin before a deadline at which drain becomes terminate (default 30s)",
    )
    agent.add_argument(
        "--heartbeat-interval",
        type=_config_number,
        metavar="DURATION",
        help="seconds between heartbeats (default 1s)",
    )
    agent.add_argument(
        "--metrics-address",
        metavar="HOST:PORT",
        help="serve /metrics, /healthz and /readyz here, e.g. 127.0.0.1:9464 (default: off)",
    )
    agent.add_argument(
        "--log-level",
        type=choice_as_written,
        choices=("debug", "info", "warning", "error"),
        help="(default info; any case, warn is warning)",
    )
    agent.add_argument(
        "--log-format",
        type=choice_as_written,
        choices=("text", "json"),
        help="json: one JSON object per line (default text)",
    )
    agent.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="any config key, e.g. aws.url=http://127.0.0.1:1338",
    )
    agent.set_defaults(func=cmd_agent)

    notify = commands.add_parser("notify", help="raise or clear a manual notice")
    notify.add_argument("action", type=word_as_written, choices=("drain", "terminate", "clear"))
    notify.add_argument("--deadline", help="RFC 3339 time or a duration such as 90s, 15m, 2h")
    notify.add_argument(
        "--reason",
        help="why (default manual; drain and terminate only)",
        type=word_as_written,
        choices=(
            "manual",
            "drill",
            "reclaim",
            "scheduled-maintenance",
            "host-maintenance",
            "node-drain",
        ),
    )
    notify.add_argument(
        "--note",
        type=_unset_if_blank,
        help="free text carried in detail.note (drain and terminate only)",
    )
    notify.add_argument(
        "--id", type=_notice_id, help="notice id (default: a new one; for clear: all manual)"
    )
    notify.add_argument("--json", action="store_true", help="print the agent's reply as JSON")
    _add_control_timeout(notify)
    _add_endpoint_flags(notify)
    notify.set_defaults(func=cmd_notify)

    watch = commands.add_parser("watch", help="print events as they arrive")
    watch.add_argument("--json", action="store_true", help="one JSON object per line")
    watch.add_argument("--heartbeats", action="store_true", help="print heartbeats too")
    watch.add_argument("--count", type=_positive_int, help="exit after this many notices")
    watch.add_argument(
        "--timeout", type=_duration("--timeout", positive=True), help="exit 1 after this long"
    )
    _add_agent_timeout(watch)
    _add_endpoint_flags(watch)
    watch.set_defaults(func=cmd_watch)

    wait = commands.add_parser("wait", help="block until a drain or terminate; exit 0")
    wait.add_argument(
        "--for",
        dest="wait_for",
        type=word_as_written,
        choices=("drain", "terminate"),
        default="terminate",
        help="drain also returns on terminate (default: terminate)",
    )
    wait.add_argument(
        "--timeout",
        type=_duration("--timeout", positive=True),
        help="give up after this long and exit 1 (default: never)",
    )
    wait.add_argument("--json", action="store_true", help="print the notice as JSON")
    wait.add_argument(
        "--exit-margin",
        type=_duration("--exit-margin"),
        default=WAIT_EXIT_MARGIN,
        help="a terminate an earlier job acted on ends the wait this long before its deadline "
        f"(default {WAIT_EXIT_MARGIN:g}s, as the client library)",
    )
    _add_client_flag(
        wait,
        "the id this loop's `forewarn ack --client` sends: a drain in force before this wait "
        "is passed by only when this client acked it, not when another client saved for it",
    )
    wait.add_argument(
        "--pid",
        type=_pid,
        metavar="PID",
        help='with --client: the process that acks (the loop\'s shell, "$$"); killed before '
        "its ack, its hold on the notice is let go (default: held until the ack or the "
        "notice's end)",
    )
    _add_agent_timeout(wait)
    _add_endpoint_flags(wait)
    wait.set_defaults(func=cmd_wait)

    status = commands.add_parser(
        "status",
        help="show the agent and its active notices",
        epilog="Exit codes: 0 the agent answered and every part of it runs, 1 no agent runs, it "
        "is stopped, it did not answer within --timeout (with --json: a JSON object on stdout "
        "saying why, `answered` false), or a part of it is dead (a `dead` line each, as "
        "/healthz answers 503), 2 bad input, or the agent refused the request (no control "
        "token), 4 (with --ready only) the agent answered but a provider has not polled "
        "successfully yet (as /readyz answers 503).",
    )
    status.add_argument(
        "--json",
        action="store_true",
        help="print the agent's reply as JSON (with none: an object saying why, `answered` false)",
    )
    status.add_argument(
        "--ready",
        action="store_true",
        help="exit 4 while a provider has not polled successfully yet, as /readyz answers 503 "
        "(for a readiness check; not for a liveness probe)",
    )
    _add_control_timeout(status)
    _add_endpoint_flags(status)
    status.set_defaults(func=cmd_status)

    ack = commands.add_parser("ack", help="tell the agent a checkpoint was saved (for a notice)")
    ack.add_argument(
        "notice_id",
        nargs="?",
        type=_acked_notice_id,
        metavar="NOTICE_ID",
        help="the active notice the save was for (default: with --client, each notice held for "
        "that client, the ones its `forewarn wait --client` returned, and with --flush-seconds "
        "only those noticed before the save began; without --client, none: the save counts "
        "only for the flush times)",
    )
    ack.add_argument("--step", type=_ack_figure(_step), help="the step saved")
    ack.add_argument(
        "--flush-seconds",
        type=_ack_figure(_flush_time),
        help="how long the save took (90, 90s, 1m30s); the slowest sizes the exit margin",
    )
    ack.add_argument(
        "--outcome",
        type=word_as_written,
        choices=("saved", "failed"),
        default="saved",
        help="saved (default), or failed: the save did not complete",
    )
    ack.add_argument(
        "--action",
        type=word_as_written,
        choices=("drain", "terminate"),
        help="the action the save was for (the notice's action as `wait` printed it): a "
        "drain's save is not counted for the terminate the notice became meanwhile",
    )
    ack.add_argument(
        "--note",
        type=_unset_if_blank,
        help="one line on the save, kept in telemetry (and logged for a failed one)",
    )
    _add_client_flag(
        ack,
        "who saved (the id a loop's `forewarn wait --client` passes by its own acks for); "
        "named in `status` and the heartbeat's `acked_by`",
    )
    ack.add_argument("--json", action="store_true", help="print the agent's reply as JSON")
    _add_control_timeout(ack)
    _add_endpoint_flags(ack)
    ack.set_defaults(func=cmd_ack)

    schema = commands.add_parser("schema", help="print the JSON Schema of protocol v1")
    schema.set_defaults(func=cmd_schema)

    simulate = commands.add_parser(
        "simulate", help="serve a provider's notice endpoint on loopback"
    )
    sims = simulate.add_subparsers(dest="provider", required=True, metavar="PROVIDER")
    for spec in registry.with_simulator() if registry and wanted("simulate") else ():
        assert spec.simulate is not None
        if provider not in (None, spec.name):
            # Only the name: the other simulators cost `simulate aws` 0.02 of its 0.55 CPU-s.
            sims.add_parser(spec.name, help=f"a faithful simulator of {spec.summary}")
            continue
        simulate_face = spec.simulate()
        # A face's own HELP line where the contract's summary is not what it serves.
        said = getattr(simulate_face, "HELP", None) or f"a faithful simulator of {spec.summary}"
        sub = sims.add_parser(spec.name, help=said)
        simulate_face.add_arguments(sub)  # --host, --port, --ready-file ... from the sim base
        sub.set_defaults(func=simulate_face.run)

    drill = commands.add_parser("drill", help="rehearse a reclaim, locally or for real")
    drills = drill.add_subparsers(dest="provider", required=True, metavar="PROVIDER")
    local = drills.add_parser("local", help="agent + demo training loop: drain, terminate, resume")
    local.add_argument(
        "--provider",
        dest="source",
        type=_provider_name,
        default=None,  # local; None: not given (see _drill_local_options)
        help="notice source: local (default: the control socket) or a provider simulator "
        "(aws, gcp, azure, kubernetes)",
    )
    local.add_argument(
        "--steps",
        type=count_within(1, MAX_STEPS),
        default=None,
        help=f"steps of the demo run (default 400; at least 100, more with --background; at "
        f"most {MAX_STEPS})",
    )
    local.add_argument(
        "--step-time",
        type=seconds_within(MAX_STEP_TIME, zero=True),
        default=None,
        help=f"seconds per demo step (default 0.02; 0 to {written_bound(MAX_STEP_TIME)})",
    )
    local.add_argument(
        "--background",
        action="store_true",
        help="the demo saves through background uploads; the terminate arrives during one",
    )
    local.add_argument(
        "--upload-delay",
        type=seconds_within(MAX_UPLOAD_DELAY, zero=False),
        default=None,
        help="with --background: seconds each checkpoint upload takes (default 1.5; more than "
        f"0 and at most {written_bound(MAX_UPLOAD_DELAY)})",
    )
    local.add_argument(
        "--deadline",
        type=seconds_within(MAX_DEADLINE, zero=False),
        default=None,
        help="with --background: the terminate's deadline, seconds after it is sent (default "
        f"20; more than 0 and at most {written_bound(MAX_DEADLINE)})",
    )
    local.add_argument("--dir", type=_path, help="work directory (default: a temporary one)")
    local.add_argument(
        "--keep",
        action="store_true",
        help="keep the temporary work directory (a --dir is always kept)",
    )
    if wanted("drill") and provider in (None, "local"):
        # The reclaim drill brings ctypes, the demo machine and the planner (with the report
        # model, pydantic): not for `forewarn agent`, nor for `drill aws` and its `--help`.
        drill_reclaim = importlib.import_module("forewarn.agent.drill_reclaim")
        drill_reclaim.add_arguments(local)
    local.set_defaults(func=cmd_drill_local)
    for spec in registry.with_drill() if registry and wanted("drill") else ():
        assert spec.drill is not None and registry is not None
        if provider not in (None, spec.name):
            drills.add_parser(spec.name, help=f"trigger {spec.name}'s real test path")
            continue
        drill_face = spec.drill()
        said = getattr(drill_face, "HELP", None) or f"trigger {spec.name}'s real test path"
        sub = drills.add_parser(spec.name, help=said)
        drill_face.add_arguments(sub)
        sub.set_defaults(func=drill_face.run, load_settings=_section_loader(registry, spec.name))

    render = commands.add_parser("render", help="render deployment files (cloud-init)")
    kinds = render.add_subparsers(dest="kind", required=True, metavar="KIND")
    cloud_init = kinds.add_parser(
        "cloud-init", help="user data that installs forewarn and starts it with a training job"
    )
    if wanted("render"):
        from .deploy import cloud_init as cloud_init_render

        cloud_init_render.add_arguments(cloud_init)
        cloud_init.set_defaults(func=cloud_init_render.run)

    checkpoint = commands.add_parser(
        "checkpoint", help="list, inspect, verify, copy out and prune checkpoint stores"
    )
    if wanted("checkpoint"):
        from . import checkpoint_cli

        checkpoint_cli.add_arguments(checkpoint)

    plan = commands.add_parser("plan", help="checkpoint interval and spot economics")
    if wanted("plan"):
        plan_cli = importlib.import_module("forewarn.agent.plan.cli")
        plan_cli.add_arguments(plan)
        plan.set_defaults(func=plan_cli.run)
    return parser


def _join_negative_values(words: list[str]) -> list[str]:
    """`--deadline -5m` as `--deadline=-5m`, so the value reaches its check and the message
    names it, instead of argparse's "expected one argument"."""
    joined: list[str] = []
    for word in words:
        if joined and joined[-1] in _VALUE_FLAGS and re.match(r"^-\d", word):
            joined[-1] = f"{joined[-1]}={word}"
        else:
            joined.append(word)
    return joined


def _provider_words(words: list[str], registry: Registry | None) -> list[str]:
    """`simulate AWS` and `drill GCP` as `simulate aws` and `drill gcp`: a provider name is
    taken in any case, as `--provider` and the config file take it."""
    if len(words) < 2 or words[0] not in ("simulate", "drill"):
        return words
    name = words[1].lower()
    if registry is None:
        from forewarn.providers.registry import REGISTRY

        registry = REGISTRY
    if name != words[1] and (name in registry or name == "local"):
        return [words[0], name, *words[2:]]
    return words


def _innermost(parser: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser:
    """The parser of the subcommand `words` name (`drill gcp`), else `parser`."""
    for word in words:
        commands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if commands and word in commands[0].choices:
            parser = commands[0].choices[word]
    return parser


# The commands a script blocks in. Stopped by Ctrl-C, they end by the SIGINT itself, as Python
# does on a KeyboardInterrupt it does not catch: bash goes on with a script whose command
# exited 130 (it takes that for a command that dealt with Ctrl-C itself), and stops one whose
# command the SIGINT killed. `id=$(forewarn wait --for drain --json | jq -r .id)` went on to
# the job's save and an ack of an empty id. The shell's `$?` is 130 either way.
ENDED_BY_SIGINT = ("wait", "watch")


def _end_by_sigint() -> None:
    import signal

    # Every line went out flushed: nothing is lost by ending without Python's exit.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def main(argv: Sequence[str] | None = None, registry: Registry | None = None) -> int:
    """Run one command; every error ends as one `forewarn: ...` line on stderr and an exit
    code (2 for bad input), with the traceback only under `--debug`."""
    words = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in words
    words = _join_negative_values([word for word in words if word != "--debug"])
    words = _provider_words(words, registry)
    command = words[0] if words and not words[0].startswith("-") else None
    try:
        # Without a command, the words are `--help`, `--version` or none (anything else is
        # refused below): what they show needs no command's arguments, and building them all
        # imported every provider's settings and simulator (0.43 CPU-s for `--version`).
        # `simulate aws`, `drill gcp`: only the named provider's face (an unknown name is
        # refused by the parser, which still has every name).
        named = words[1] if command in ("simulate", "drill") and len(words) > 1 else None
        parser = build_parser(command, registry, top=command is None, provider=named)
        if not words:
            parser.print_help()
            return 0
        top = ("-h", "--help", "--version")
        if command is None and not any(option.startswith(words[0]) for option in top):
            # `forewarn --verison` said "the following arguments are required: COMMAND".
            near = difflib.get_close_matches(words[0], top[1:], n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else " before a COMMAND"
            raise UsageError(f"unrecognized argument {words[0]!r}{hint}; see 'forewarn --help'")
        args, extra = parser.parse_known_args(words)
        if extra:
            # Said by the top parser ("see 'forewarn --help'"), whose help lists none of the
            # options of `drill gcp` in `forewarn drill gcp --zone us central1-a`.
            _innermost(parser, words).error(f"unrecognized arguments: {' '.join(extra)}")
        if registry is None and command in ("agent", "drill"):
            from forewarn.providers.registry import REGISTRY

            registry = REGISTRY
        args.registry = registry
        result: int = args.func(args)
        return result
    except KeyboardInterrupt:
        if command in ENDED_BY_SIGINT and argv is None:  # the program, not a call in a process
            _end_by_sigint()
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`forewarn watch | head -3`): nothing to say, and nobody to
        # say it to; flushing stdout at exit must not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except ForewarnError as error:
        if debug:
            traceback.print_exc()
        print(f"forewarn: {error}", file=sys.stderr)
        return error.exit_code
    except Exception as error:
        if debug:
            traceback.print_exc()
        print(
            f"forewarn: unexpected {type(error).__name__}: {error} (run with --debug for the "
            "traceback, and please report it)",
            file=sys.stderr,
        )
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
