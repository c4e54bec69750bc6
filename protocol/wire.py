"""Where the bytes travel: topics, the runtime directory and the two endpoints.

One function computes the default endpoints for agent and clients alike. Standard library
only, so the in-process client can import it cheaply.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import logging
import os
import re
import socket
import string
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import jsontext
from .errors import ForewarnError, UsageError
from .writtenfloat import written_float

PROTOCOL_VERSION = 1

TOPIC_NOTICE = "notice"
TOPIC_HEARTBEAT = "heartbeat"
# A client that acks subscribes to `client/<id>` as well. Nothing is ever published there:
# the subscription itself tells the agent which clients listen, and so who is expected to ack.
TOPIC_CLIENT_PREFIX = "client/"
# A subscriber that must know when the agent has answered its subscription (a periodic
# heartbeat with nothing active looks like the replay of nothing) subscribes to
# `replay/<token>` too, after `notice`: nothing is published there either. The agent replays
# the active notices for it and lists the token in the `replay_for` of the heartbeat that
# starts that replay; the notices that heartbeat lists follow it, each taking the next `seq`.
# An agent that does this sends `replay_for` (empty) in every heartbeat, so a heartbeat without
# it is an older agent's, which never will.
TOPIC_REPLAY_PREFIX = "replay/"
MAX_REPLAY_TOKEN_LENGTH = 64
_REPLAY_TOKEN = re.compile(r"[A-Za-z0-9_.-]{1,64}", re.ASCII)

ENV_RUNTIME_DIR = "FOREWARN_RUNTIME_DIR"
ENV_EVENTS = "FOREWARN_EVENTS"
ENV_CONTROL = "FOREWARN_CONTROL"
ENV_CONFIG = "FOREWARN_CONFIG"
DEFAULT_CONFIG_FILE = Path("/etc/forewarn/forewarn.toml")


def environment(name: str) -> str | None:
    """The variable `name` in any case, as the agent's settings read every FOREWARN_ name
    (pydantic-settings): the agent took `forewarn_runtime_dir` while its clients, looking
    for `FOREWARN_RUNTIME_DIR` alone, went to the default place. The exact spelling first;
    the agent refuses one variable in two spellings. Without one pair of quotes around the
    value (`unquoted`), as the agent reads it."""
    if name in os.environ:
        return unquoted(os.environ[name])
    wanted = name.upper()
    value = next((value for key, value in os.environ.items() if key.upper() == wanted), None)
    return None if value is None else unquoted(value)


def unquoted(text: str) -> str:
    """`text` without one pair of matching quotes around the whole of it (after the space
    around it), as TOML reads a string: `"node-1"` (with `\\` escapes) or `'node-1'`. A
    Docker `--env-file` line and an `ExecStart=... --set key="v"` keep the quotes, and a node
    named `"node-1"` was watched, a state directory named `"/x"` made in the working
    directory. Quotes inside, or unmatched, are left: they are part of the value."""
    stripped = text.strip(string.whitespace)
    if len(stripped) < 2 or stripped[0] != stripped[-1] or stripped[0] not in "\"'":
        return text
    inner = stripped[1:-1]
    if stripped[0] == "'":
        return text if "'" in inner else inner
    try:
        value = json.loads(stripped)
    except ValueError:
        return text
    return value if isinstance(value, str) else text


SYSTEM_RUNTIME_DIR = Path("/run/forewarn")
# The file an agent holds locked in its runtime directory while it runs (left there after).
AGENT_LOCK = "agent.lock"
# The control token: a secret the agent writes (mode 0600) into its runtime directory when
# control listens where file permissions cannot guard it (tcp://, ipc://@abstract). Every
# request there must carry it, so only who can read the agent's runtime directory can ask.
TOKEN_FILE = "control-token"
TOKEN_FIELD = "token"
MAX_TOKEN_BYTES = 256
# sizeof(sockaddr_un.sun_path) - 1 on Linux: the longest path (or @name) an ipc:// takes.
IPC_PATH_MAX = 107
# The largest control request the agent reads (the largest it needs, a notify, is under 3 KB).
MAX_REQUEST_BYTES = 64 * 1024


class EndpointError(UsageError):
    """An endpoint that forewarn refuses to bind or connect, with the reason in its text."""


def request_too_large(size: int) -> str:
    """The error a control request of `size` bytes, over MAX_REQUEST_BYTES, gets."""
    return (
        f"request too large: {size} bytes, over the limit of {MAX_REQUEST_BYTES} bytes "
        f"({MAX_REQUEST_BYTES // 1024} KiB)"
    )


class ReplyError(ForewarnError, ValueError):
    """What answered on the control endpoint is not an agent speaking protocol v1: its reply
    is not a JSON object, or lacks what the request asks for. The text names the endpoint."""


def _writable(directory: Path) -> bool:
    if directory.is_dir():
        return os.access(directory, os.W_OK | os.X_OK)
    parent = directory.parent
    return parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)


def _agent_runs_in(directory: Path) -> bool:
    """Whether this process can enter `directory` and an agent has used it: its lock file
    (kept across restarts) or its control socket is there."""
    if not os.access(directory, os.X_OK):
        return False
    return any(os.path.lexists(directory / name) for name in (AGENT_LOCK, "control"))


class ConfigFileError(UsageError):
    """The agent's config file cannot be read, or sets `runtime_dir`, `events` or `control`
    to something that is not text; the text names the file and the key."""


@dataclass(frozen=True)
class ClientConfig:
    """What a client takes from the agent's config file: where the agent listens. Unset keys
    are None; `path` is the file read (None: there is none)."""

    path: Path | None = None
    runtime_dir: Path | None = None
    events: str | None = None
    control: str | None = None


CLIENT_KEYS = ("runtime_dir", "events", "control")
_log = logging.getLogger("forewarn.config")
_warned: set[str] = set()


def config_file(given: Path | None = None) -> Path | None:
    """The agent's TOML file, found as the agent finds it: `given` (`--config`), else
    `$FOREWARN_CONFIG`, else /etc/forewarn/forewarn.toml when it exists; None when none."""
    path = given
    # Without the space around it, blank as unset, as the agent reads it and every other path
    # variable: with a ConfigMap block's newline the clients read no file, in silence.
    named = _set(ENV_CONFIG)
    if path is None and named:
        path = Path(named)
    if path is None and DEFAULT_CONFIG_FILE.is_file():
        path = DEFAULT_CONFIG_FILE
    return path.expanduser() if path is not None else None


_BOM = b"\xef\xbb\xbf"


# `key = value` where the value is no TOML value but text written bare: `30s`, `debug`,
# `127.0.0.1:9464` (not a quote, list, table, number alone, boolean or date).
_BARE_TEXT = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*=\s*([^\s\"'\[{#][^#]*?)\s*(?:#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*=")
_ERROR_LINE = re.compile(r"\(at line (\d+), column \d+\)")


def _quote_hint(text: str, error: str) -> str:
    """Why tomllib refused the line it names, when that line gives a text unquoted: its own
    words ("Expected newline or end of document after a statement") did not say that a
    duration (`exit_margin = 30s`) or an address is a string in TOML."""
    found = _ERROR_LINE.search(error)
    lines = text.splitlines()
    if not found or not 1 <= int(found.group(1)) <= len(lines):
        return ""
    line = lines[int(found.group(1)) - 1]
    key = _KEY.match(line)
    if key and error.startswith("Cannot overwrite a value"):
        # `exit_margin = 40` below `exit_margin = 30` was told to quote the 40.
        return f" ({key.group(1)} is set twice: keep one)"
    bare = _BARE_TEXT.match(line)
    if not bare:
        return ""
    if _toml_value(bare.group(2)):
        return ""  # a number, a date, `inf`: refused for something else on the line
    if bare.group(2).lower() in ("true", "false"):
        # `True` as Python writes it: quoting it works too, but TOML's own form is the one
        # to write.
        return f" (a boolean is lower case in TOML: {bare.group(1)} = {bare.group(2).lower()})"
    return f' (a text is quoted in TOML: {bare.group(1)} = "{bare.group(2)}")'


def _toml_value(text: str) -> bool:
    """Whether `text` is a TOML value as it stands (a number, a date, `inf`)."""
    try:
        _tomllib().loads(f"value = {text}")
    except ValueError:  # TOMLDecodeError is one
        return False
    return True


def _tomllib() -> Any:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    return tomllib


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML document at `path`, for the agent and the clients alike; ConfigFileError
    naming the file and what is wrong with it (missing, a directory, unreadable, not UTF-8,
    not TOML). A leading UTF-8 byte order mark is ignored."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    try:
        if path.is_dir():
            raise ConfigFileError(f"config file {path}: is a directory")
        if not path.is_file():
            what = "not a regular file" if path.exists() else "not found"
            raise ConfigFileError(f"config file {path}: {what}")
        data = path.read_bytes()
        # Notepad and PowerShell start UTF-8 with a byte order mark, which tomllib takes for
        # a key: "Invalid statement (at line 1, column 1)", nothing the author could see.
        mark = len(_BOM) if data.startswith(_BOM) else 0
        # `lead = 1e400` is infinity to tomllib: a refusal of it then said "got inf".
        return tomllib.loads(data[mark:].decode(), parse_float=written_float)
    except tomllib.TOMLDecodeError as error:
        hint = _quote_hint(data[mark:].decode(errors="replace"), str(error))
        raise ConfigFileError(f"config file {path}: not valid TOML: {error}{hint}") from None
    except RecursionError:
        # tomllib recurses once per level: a few hundred (`x = [[[...]]]`) ended every
        # command that read the file with "unexpected RecursionError".
        raise ConfigFileError(
            f"config file {path}: not valid TOML: its arrays or inline tables are nested too "
            "deep to read"
        ) from None
    except UnicodeDecodeError as error:
        raise ConfigFileError(
            f"config file {path}: not UTF-8 text (byte {error.start + mark}), as TOML must be"
        ) from None
    except OSError as error:
        # A file (or a directory above it) this user cannot read.
        raise ConfigFileError(
            f"config file {path}: cannot read it ({error.strerror or error})"
        ) from None


_SHELL_VARIABLE = re.compile(r"\$(?:\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")


def shell_variable(path: str) -> str | None:
    """The first shell variable `path` holds (`$HOME`, `${STATE_DIRECTORY}`), or None. No
    shell reads the config file, an EnvironmentFile, a Docker `--env-file` or a ConfigMap,
    so such a path is refused, by the agent and the clients alike: read as written, the agent
    made a directory named `$HOME` where no one looked. A `$` that names no variable
    (`price$5`) is part of the path."""
    found = _SHELL_VARIABLE.search(path)
    return found.group() if found else None


def shell_variable_problem(path: str) -> str | None:
    """Why `path` cannot be used as written (`shell_variable`), or None."""
    variable = shell_variable(path)
    if variable is None:
        return None
    return (
        f"{path.strip(string.whitespace)!r} holds {variable}, which nothing expands here: "
        "write the path out (a `~` at its start is the home directory)"
    )


def read_client_config(path: Path) -> ClientConfig:
    """`runtime_dir`, `events` and `control` of the TOML file at `path`, read as the agent
    reads them (keys in any case, a blank value is unset, `~` is a home directory, a relative
    path is relative to the file's directory); other keys are the agent's to check.
    ConfigFileError naming the file when it cannot be read or a key is not text."""
    document = read_toml(path)
    found: dict[str, str] = {}
    for key, value in document.items():
        name = key.lower()
        if name not in CLIENT_KEYS:
            continue
        if name in found:
            raise ConfigFileError(f"config file {path}: config key {key}: set twice")
        if not isinstance(value, str):
            raise ConfigFileError(
                f"config file {path}: config key {key}: expected a string, got {value!r}"
            )
        if "\x00" in value:  # "\u0000" in TOML: no path or endpoint holds one
            raise ConfigFileError(f"config file {path}: config key {key}: holds a NUL character")
        found[name] = value.strip(string.whitespace)  # as the agent reads them
        held = ipc_path(found[name]) if name != "runtime_dir" else found[name]
        problem = shell_variable_problem(str(held)) if held is not None else None
        if problem:
            raise ConfigFileError(f"config file {path}: config key {key}: {problem}")
    runtime = found.get("runtime_dir", "")
    return ClientConfig(
        path=path,
        runtime_dir=resolve_config_path(runtime, path) if runtime else None,
        events=resolve_config_endpoint(found["events"], path) if found.get("events") else None,
        control=resolve_config_endpoint(found["control"], path) if found.get("control") else None,
    )


def resolve_config_path(text: str, config: Path) -> Path:
    """A path the config file at `config` names: `~` is a home directory, and a relative path
    is relative to the file's directory (the agent's working directory is / under systemd,
    a client's is anywhere: only the file's place is the same for both)."""
    path = Path(os.path.expanduser(text))
    if path.is_absolute():
        return path
    return Path(os.path.abspath(config)).parent / path


def resolve_config_endpoint(endpoint: str, config: Path) -> str:
    """`endpoint` with a relative `ipc://` path made relative to the config file's directory."""
    path = ipc_path(endpoint)
    if path is None or not str(path) or path.is_absolute():
        return endpoint
    return f"ipc://{resolve_config_path(str(path), config)}"


def load_client_config(given: Path | None = None, *, strict: bool = False) -> ClientConfig:
    """The agent's config file's `runtime_dir`, `events` and `control` (`config_file` finds
    it). When the file cannot be used: ConfigFileError when `strict`, else one warning per
    problem and no keys, so that a bad config file never stops a training job."""
    path = config_file(given)
    if path is None:
        return ClientConfig()
    try:
        return read_client_config(path)
    except ConfigFileError as error:
        if strict:
            raise
        if str(error) not in _warned:
            _warned.add(str(error))
            _log.warning("%s; looking for the agent in the default places", error)
        return ClientConfig(path=path)


def _set(variable: str) -> str | None:
    """The variable's value without the space around it (a ConfigMap's YAML block ends it
    with a newline); None when it is unset or blank, as the agent reads it."""
    return (environment(variable) or "").strip(string.whitespace) or None


def runtime_dir(*, for_agent: bool = False, config: ClientConfig | None = None) -> Path:
    """`$FOREWARN_RUNTIME_DIR`, else (for a client) the config file's `runtime_dir` (`config`,
    else `load_client_config()`), else /run/forewarn when writable (for a client, also when it
    can enter it and an agent runs there), else `$XDG_RUNTIME_DIR/forewarn`, else
    /tmp/forewarn-<uid>. The agent reads its config file itself."""
    explicit = _set(ENV_RUNTIME_DIR)
    if explicit is not None:
        # As the agent's configuration reads it: blank is unset, `~` is a home directory.
        return Path(os.path.expanduser(explicit))
    if not for_agent:
        # An agent whose runtime_dir is set in its config file alone: clients looking only
        # at the environment went to the default place and never heard it.
        chosen = (config if config is not None else load_client_config()).runtime_dir
        if chosen is not None:
            return chosen
    return default_runtime_dir(for_agent=for_agent)


def default_runtime_dir(*, for_agent: bool = False) -> Path:
    """The runtime directory when nothing names one: /run/forewarn when writable (for a
    client, also when it can enter it and an agent runs there), else
    `$XDG_RUNTIME_DIR/forewarn`, else /tmp/forewarn-<uid>."""
    if _writable(SYSTEM_RUNTIME_DIR):
        return SYSTEM_RUNTIME_DIR
    # A client needs no write access there: a member of the system agent's group enters the
    # 0750 directory and uses its 0660 sockets. Looking for writable alone sent every such
    # user's CLI and CheckpointGuard to a directory of their own, where no agent ever runs.
    if not for_agent and _agent_runs_in(SYSTEM_RUNTIME_DIR):
        return SYSTEM_RUNTIME_DIR
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and _writable(Path(xdg)):
        return Path(xdg) / "forewarn"
    return Path(f"/tmp/forewarn-{os.getuid()}")


def default_endpoints(
    runtime: Path | None = None, *, config: ClientConfig | None = None
) -> tuple[str, str]:
    """(events, control): `FOREWARN_EVENTS` / `FOREWARN_CONTROL`, else the config file's
    `events` / `control` (`config`; without `runtime`, a client's: `load_client_config()`),
    else ipc sockets in the runtime directory."""
    if runtime is None and config is None:
        config = load_client_config()
    base = runtime if runtime is not None else runtime_dir(config=config)
    events = _set(ENV_EVENTS) or (config and config.events) or f"ipc://{base}/events"
    control = _set(ENV_CONTROL) or (config and config.control) or f"ipc://{base}/control"
    return events, control


def resolve_endpoints(
    runtime: Path,
    events: str | None = None,
    control: str | None = None,
    *,
    allow_remote: bool = False,
    names: tuple[str, str] = ("events", "control"),
    config: ClientConfig | None = None,
) -> tuple[str, str]:
    """The given endpoints, else the defaults for `runtime` (and `config`, a client's config
    file), each checked by `check_endpoint` (EndpointError names the one at fault by `names`)."""
    default_events, default_control = default_endpoints(runtime, config=config)
    chosen = (events or default_events, control or default_control)
    for endpoint, what in zip(chosen, names, strict=True):
        check_endpoint(endpoint, allow_remote=allow_remote, what=what)
    if _same_endpoint(*chosen):
        # Two ipc binds on one path: the second replaced the first's socket file in silence,
        # and the agent served events no client could reach.
        raise EndpointError(
            f"{names[0]} and {names[1]} are the same endpoint, {chosen[0]!r}; give each its own"
        )
    return chosen


def _same_endpoint(first: str, second: str) -> bool:
    paths = ipc_path(first), ipc_path(second)
    if paths[0] is not None and paths[1] is not None:
        return os.path.normpath(os.path.abspath(paths[0])) == os.path.normpath(
            os.path.abspath(paths[1])
        )
    return first == second


def _is_loopback(host: str) -> bool:
    host = host.strip("[]")
    # In any case, as every host name is read (RFC 4343): `tcp://LOCALHOST:5555` was "not a
    # loopback address; notices would leave this machine".
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    # ZeroMQ reads IPv4 as inet_aton does (`127.1`, `0x7f.1`, `2130706433` bind 127.0.0.1):
    # refused as "not a loopback address" when ZeroMQ would bind loopback. The pattern first,
    # since glibc's inet_aton also takes `127.1 anything`.
    if not _INET_ATON_FORM.fullmatch(host):
        return False
    try:
        return socket.inet_aton(host)[0] == 127
    except OSError:
        return False


# One to four parts, each decimal, octal (a leading 0) or hex (0x); inet_aton checks ranges.
_INET_ATON_FORM = re.compile(
    r"(?:0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)(?:\.(?:0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)){0,3}",
    re.ASCII,
)


def check_endpoint(endpoint: str, *, allow_remote: bool = False, what: str = "endpoint") -> str:
    """Accept `ipc://PATH` and `tcp://` on loopback; refuse anything else unless
    `allow_remote`. The error names the endpoint and why."""
    if "\x00" in endpoint:
        # From a config file ("\u0000" in TOML): zmq cuts the text there, and the path
        # functions raise ValueError.
        raise EndpointError(f"{what} {endpoint!r}: it holds a NUL character")
    if endpoint.startswith("ipc://"):
        path = endpoint[len("ipc://") :]
        if not path or path == "@":
            raise EndpointError(f"{what} {endpoint!r}: ipc:// needs a path (or @name)")
        # zmq refuses these only when it connects, as an error that names no flag.
        size = len(os.fsencode(path))
        if size > IPC_PATH_MAX:
            raise EndpointError(
                f"{what} {endpoint!r}: the socket path is {size} bytes; Linux allows at most "
                f"{IPC_PATH_MAX} (use a shorter path or runtime directory)"
            )
        # A path ending in `/`, `/.` or `/..` is a directory, never a socket file: the agent
        # wrote its lock and `seq` before zmq's bind refused it in words naming no key. An
        # abstract name (`@...`) has no file, and any character in it is its own.
        if not path.startswith("@") and (
            path.endswith("/") or path.rpartition("/")[2] in (".", "..")
        ):
            directory = os.path.normpath(path).rstrip("/")
            name = "control" if "control" in what else "events"
            raise EndpointError(
                f"{what} {endpoint!r}: the path names a directory, not a socket file; name the "
                f"socket in it (ipc://{directory}/{name})"
            )
        return endpoint
    if endpoint.startswith("tcp://"):
        rest = endpoint[len("tcp://") :]
        host, sep, port = rest.rpartition(":")
        # ASCII digits only: isdigit() takes '²', which int() refuses, and '٣', which int()
        # reads as 3 but zmq's bind refuses.
        digits = port.isascii() and port.isdigit()
        if not sep or not host or not digits:
            raise EndpointError(f"{what} {endpoint!r}: expected tcp://HOST:PORT")
        if not 0 < int(port) < 65536:
            # "expected tcp://HOST:PORT" of `tcp://127.0.0.1:99999` named no fault in it.
            raise EndpointError(f"{what} {endpoint!r}: port {int(port)} is not 1-65535")
        if not _is_loopback(host) and not allow_remote:
            raise EndpointError(
                f"{what} {endpoint!r}: {host} is not a loopback address; notices would leave "
                "this machine. Use 127.0.0.1, or pass --allow-remote to accept it."
            )
        return endpoint
    raise EndpointError(f"{what} {endpoint!r}: use ipc://PATH or tcp://127.0.0.1:PORT")


def ipv6_address(endpoint: str) -> bool:
    """Whether `endpoint` is `tcp://` to an IPv6 address (`tcp://[::1]:5555`)."""
    if not endpoint.startswith("tcp://"):
        return False
    host = endpoint[len("tcp://") :].rpartition(":")[0].strip("[]")
    try:
        return ipaddress.ip_address(host).version == 6
    except ValueError:
        return False


def allow_ipv6(sock: Any, endpoint: str) -> None:
    """Set ZMQ_IPV6 on the zmq socket `sock` when `endpoint` is an IPv6 address, before its
    bind or connect: without it ZeroMQ refuses one ("No such device"), so an agent given the
    loopback `tcp://[::1]:PORT`, which the endpoint check accepts, exited at start. Only
    then: set for `tcp://localhost`, a connect could pick ::1 while the agent listens on
    127.0.0.1."""
    if ipv6_address(endpoint):
        import zmq

        sock.setsockopt(zmq.IPV6, 1)


def ipc_path(endpoint: str) -> Path | None:
    """The file of an `ipc://` endpoint; None for other transports and for Linux abstract
    sockets (`ipc://@name`), which have no file (and so no file permissions)."""
    if not endpoint.startswith("ipc://") or endpoint.startswith("ipc://@"):
        return None
    return Path(endpoint[len("ipc://") :])


def needs_token(endpoint: str) -> bool:
    """Whether control on `endpoint` asks for the token: every transport but a socket file,
    whose own mode and directory already decide who may connect."""
    return ipc_path(endpoint) is None


def read_token(runtime: Path | None = None) -> str | None:
    """The control token in `runtime` (default: `runtime_dir()`), or None when there is none
    this process may read. Opened without following a link and without blocking on a FIFO."""
    path = (runtime if runtime is not None else runtime_dir()) / TOKEN_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, MAX_TOKEN_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    token = data.decode("ascii", errors="replace").strip()
    return token if token and len(data) <= MAX_TOKEN_BYTES else None


def with_token(
    endpoint: str, payload: dict[str, Any], runtime: Path | None = None
) -> dict[str, Any]:
    """`payload` with the control token added when `endpoint` needs one and this process can
    read it; else unchanged (the agent then refuses the request, saying why)."""
    if not needs_token(endpoint) or TOKEN_FIELD in payload:
        return payload
    token = read_token(runtime)
    return payload if token is None else {**payload, TOKEN_FIELD: token}


# How `unreachable` starts its reason when something may listen but this user may not reach it.
DENIED = "permission denied"


def unreachable(endpoint: str, timeout: float = 1.0) -> str | None:
    """Why nothing can take a connection on `endpoint` (no socket file, connection refused,
    permission denied), or None when something accepts one or this cannot tell. A zmq REQ
    never says: it queues the request and waits, so no agent and a slow one look alike."""
    path = ipc_path(endpoint)
    address: Any
    if path is not None:
        try:
            os.lstat(path)
        except PermissionError:
            # A directory this user may not enter (the agent's 0750 one, not in its group):
            # the socket may well be there, behind it.
            return f"{DENIED}: this user cannot look into {path.parent}"
        except (OSError, ValueError):  # ValueError: a NUL in the path
            return f"no socket file {path}"
        family, address = socket.AF_UNIX, os.fsencode(path)
    elif endpoint.startswith("ipc://@"):
        family, address = socket.AF_UNIX, b"\0" + os.fsencode(endpoint[len("ipc://@") :])
    elif endpoint.startswith("tcp://"):
        host, _, port = endpoint[len("tcp://") :].rpartition(":")
        try:
            infos = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
        except (OSError, ValueError):
            return None
        family, address = infos[0][0], infos[0][4]
    else:
        return None
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.settimeout(timeout)
        try:
            probe.connect(address)
        except OSError as error:
            if error.errno in (errno.EACCES, errno.EPERM):
                return f"{DENIED}: this user may not connect to it"
            if error.errno in (errno.ECONNREFUSED, errno.ENOENT):
                return error.strerror or str(error)
            return None
    return None


# zmq's poll takes its wait as a C int of milliseconds: past 24.8 days (`--timeout 25d`) it
# raised OverflowError, so a longer wait is made of waits of a day at most.
_POLL_SLICE = 86_400.0


# How often a request with `give_up` asks it while it waits for the answer.
_GIVE_UP_CHECK = 0.1


def _poll(sock: Any, timeout: float, give_up: Callable[[], bool] | None = None) -> bool:
    """Whether `sock` has a message within `timeout` seconds, however long that is; with
    `give_up`, False as soon as it says True (asked every _GIVE_UP_CHECK)."""
    end = time.monotonic() + timeout
    slice_ = _POLL_SLICE if give_up is None else _GIVE_UP_CHECK
    while True:
        left = end - time.monotonic()
        step = min(left, slice_)
        if sock.poll(max(0, int(step * 1000))):
            return True
        if step >= left or (give_up is not None and give_up()):
            return False


# What an ack's `client` may be, and so a `client/<id>` topic's id: as every one-line field of
# a control request (the agent's models: at most 200 characters, no control characters).
MAX_CLIENT_ID_LENGTH = 200
# And at most 200 bytes in UTF-8: each heartbeat names up to 16 acking clients of each active
# notice (`acked_by`), so a name of 200 four-byte characters made a heartbeat of 855 kB, and a
# stopped subscriber's 1,000 queued ones took the agent from 57 MB to 505 MB.
MAX_CLIENT_ID_BYTES = 200


def client_id_problem(client: str) -> str | None:
    """Why the agent could never take `client` as a client's id, or None. The agent's own
    check (agent.protocol.client_id_problem, from its models) is pinned to this one by a test:
    a client cannot import the agent."""
    if not client:
        return "empty"
    if len(client) > MAX_CLIENT_ID_LENGTH:
        return f"longer than {MAX_CLIENT_ID_LENGTH} characters ({len(client)})"
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in client):
        return "must be one line of text, without control characters"
    try:
        size = len(client.encode())
    except UnicodeEncodeError:
        return "not encodable as UTF-8 (a lone surrogate)"
    if size > MAX_CLIENT_ID_BYTES:
        return f"longer than {MAX_CLIENT_ID_BYTES} bytes in UTF-8 ({size})"
    return None


def replay_token_problem(token: str) -> str | None:
    """Why the agent takes no `replay/<token>` subscription with `token`, or None: a token is 1
    to MAX_REPLAY_TOKEN_LENGTH ASCII letters, digits, `-`, `_` or `.` (every heartbeat of its
    replay carries it to every subscriber, so it is short and needs no escaping anywhere)."""
    if _REPLAY_TOKEN.fullmatch(token) is None:
        return (
            f"a replay token is 1 to {MAX_REPLAY_TOKEN_LENGTH} ASCII letters, digits, '-', '_' "
            f"or '.', got {token[:80]!r}"
        )
    return None


def new_replay_token() -> str:
    """A token for `replay/<token>` that no other subscriber holds."""
    return uuid.uuid4().hex


def request(
    endpoint: str,
    payload: dict[str, Any],
    timeout: float = 2.0,
    *,
    runtime: Path | None = None,
    give_up: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """One control request (REQ), answered or TimeoutError; on tcp:// and ipc://@ endpoints
    it carries the token from `runtime` (default: `runtime_dir()`). `give_up`, asked while
    the answer is awaited, ends the wait early (TimeoutError) when it says True: the caller
    knows no answer can come (`forewarn status` of a stopped agent). One over
    MAX_REQUEST_BYTES is not sent: its reply is the agent's error for it. zmq is imported here, not
    at module import, so that reading the topics and endpoints stays cheap."""
    import zmq

    payload = with_token(endpoint, payload, runtime)

    body = json.dumps(payload).encode()
    if len(body) > MAX_REQUEST_BYTES:
        # The agent's own answer, given here: over its frame cap (1 MiB) ZeroMQ drops the
        # connection unread, and the request timed out as if no agent were there.
        return {"ok": False, "error": f"{request_too_large(len(body))}; not sent"}
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        allow_ipv6(sock, endpoint)
        sock.connect(endpoint)
        sock.send(body)
        if not _poll(sock, timeout, give_up):
            # A REQ cannot tell no agent from a busy one, which may still carry the request out
            # (an agent answers a notify or an ack only once its state is on disk).
            raise TimeoutError(
                f"no answer on {endpoint} within {timeout:g}s: no agent there, or a busy one "
                "that may still carry the request out"
            )
        data = sock.recv()
    finally:
        sock.close()
    try:
        reply = jsontext.loads(data)
    except jsontext.DuplicateKeyError as error:
        raise ReplyError(f"the agent on {endpoint} sent a reply refused here: {error}") from None
    except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested too deeply
        reply = None
    if not isinstance(reply, dict):
        raise ReplyError(
            f"the agent on {endpoint} sent a reply that is not a JSON object: {data[:60]!r}"
        )
    return reply


__all__ = [
    "DENIED",
    "MAX_CLIENT_ID_BYTES",
    "MAX_CLIENT_ID_LENGTH",
    "MAX_REPLAY_TOKEN_LENGTH",
    "MAX_REQUEST_BYTES",
    "PROTOCOL_VERSION",
    "TOKEN_FIELD",
    "TOKEN_FILE",
    "TOPIC_CLIENT_PREFIX",
    "TOPIC_HEARTBEAT",
    "TOPIC_NOTICE",
    "TOPIC_REPLAY_PREFIX",
    "ClientConfig",
    "ConfigFileError",
    "EndpointError",
    "ReplyError",
    "allow_ipv6",
    "check_endpoint",
    "client_id_problem",
    "default_endpoints",
    "default_runtime_dir",
    "environment",
    "ipc_path",
    "ipv6_address",
    "load_client_config",
    "needs_token",
    "new_replay_token",
    "read_client_config",
    "read_token",
    "read_toml",
    "replay_token_problem",
    "request",
    "request_too_large",
    "resolve_endpoints",
    "runtime_dir",
    "shell_variable",
    "shell_variable_problem",
    "unquoted",
    "unreachable",
    "with_token",
]
