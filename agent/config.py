"""The agent's configuration: one model read from flags, `FOREWARN_*` variables and a TOML file.

Precedence, highest first: command-line flags, environment, TOML file, defaults; a blank
flag or variable sets nothing (`_without_blank`).
Environment names are `FOREWARN_<KEY>` for top-level keys and `FOREWARN_<SECTION>_<KEY>`
for a provider section (`FOREWARN_AWS_URL`, `FOREWARN_LOCAL_FLAG_FILE`).
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import ipaddress
import math
import os
import re
import string
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeGuard, get_args

from forewarn.protocol.errors import ConfigError
from forewarn.protocol.wholenumber import toml_number
from forewarn.protocol.wire import (
    ENV_CONFIG,
    ConfigFileError,
    EndpointError,
    default_runtime_dir,
    environment,
    ipc_path,
    read_toml,
    resolve_config_endpoint,
    resolve_config_path,
    resolve_endpoints,
    runtime_dir,
    unquoted,
)
from forewarn.providers.registry import ALIASES, REGISTRY, Registry, nearest_provider
from forewarn.providers.settings import (
    ProviderSettings,
    _holds_path,
    read_value,
    refuse_shell_variable,
    shown_as_written,
    split_list,
)
from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from .argtypes import choice_as_written
from .notifications.settings import WebhookSettings
from .state import STATE_FILE, saved_seq

DEFAULT_CONFIG_FILE = Path("/etc/forewarn/forewarn.toml")
# A `_` between two digits, as TOML and Python group them.
_DIGIT_GROUPS = re.compile(r"(?<=[0-9])_(?=[0-9])")
SYSTEM_STATE_DIR = Path("/var/lib/forewarn")


class Settings(BaseSettings):
    """The top-level keys. The model the agent loads (`settings_model`) adds one section per
    provider of a registry, so a provider's settings come from its spec alone."""

    model_config = SettingsConfigDict(
        env_prefix="FOREWARN_",
        env_nested_delimiter="_",
        env_nested_max_split=1,
        extra="forbid",
        validate_default=True,
    )

    providers: Annotated[list[str], NoDecode] = Field(
        default=["auto"],
        description="Watchers to run: `auto` (local plus every cloud contract detected), or "
        "names among local, aws, gcp, azure, digitalocean, kubernetes (in the environment and "
        "`--set`, separated by commas or space, `local,aws`, or a JSON list).",
    )
    runtime_dir: Path | None = Field(
        default=None, description="Directory of the sockets and the flag file."
    )
    state_dir: Path | None = Field(
        default=None,
        description="Directory of the state file, telemetry and the watchers' own files "
        "(GCP notices in force, the DigitalOcean mailbox state).",
    )
    events: str | None = Field(default=None, description="Events endpoint (XPUB).")
    control: str | None = Field(default=None, description="Control endpoint (REP).")
    allow_remote: bool = Field(
        default=False, description="Accept TCP endpoints on addresses other than loopback."
    )
    exit_margin: float = Field(
        default=30.0,
        ge=0,
        # A day is far beyond any flush; a margin past what a datetime holds stopped the agent
        # (its escalation failed with OverflowError at every notice).
        le=86400,
        description="Floor, in seconds, of the margin before a deadline at which a drain is "
        "re-sent as terminate; the margin is the larger of this and twice the slowest flush.",
    )
    notice_grace: float = Field(
        default=300.0,
        ge=0,
        le=86400,
        description="Seconds past its deadline after which a notice is retired with a clear "
        "(`detail.expired` says why), unless its provider still shows it: then it stays "
        "active, overdue (said once in the log, `forewarn status` and "
        "`forewarn_notices_overdue`), and nothing is sent for it.",
    )
    control_probe_interval: float = Field(
        default=2.0,
        ge=0,
        le=3600,
        description="Seconds between the agent's own `status` requests on its control "
        "socket: three unanswered in a row, or its socket file gone or replaced at one, mark "
        "control dead in `/healthz` and the systemd watchdog and rebind it; when rebinding "
        "does not help, the agent exits 1 (0: off).",
    )
    manual_lifetime: float = Field(
        default=3600.0,
        gt=0,
        le=30 * 86400,
        description="Seconds a local notice without a deadline (`forewarn notify` without "
        "--deadline, a flag file without one) stays active before it is retired.",
    )
    # Clients call an agent dead after 3 s without a heartbeat (`heartbeat_timeout`), `wait`
    # and `watch` after 5 s: at 8 s every beat made clients flap between lost and found, and
    # `forewarn wait` exit 3 beside a healthy agent. Half of 3 s, so one late beat is no death.
    heartbeat_interval: float = Field(
        default=1.0,
        gt=0,
        le=1.5,
        description="Seconds between heartbeats on the events socket; at most 1.5, since "
        "clients call an agent dead after 3 s without one.",
    )
    metrics_address: str | None = Field(
        default=None,
        description="HOST:PORT of the Prometheus metrics, /healthz and /readyz server (needs "
        "the `metrics` extra), e.g. 127.0.0.1:9464, or [IPv6]:PORT; unset, `off`, or empty "
        "in the file serves none (a blank variable or flag sets nothing: use `off`). "
        "Addresses other than loopback need allow_remote; `[::]:9464` listens "
        "on every IPv6 and IPv4 address (dual-stack; IPv4 alone on a kernel without IPv6).",
    )
    telemetry: bool = Field(
        default=True,
        description="Append one JSON line per notice, escalation, hold, ack and resume to "
        "`telemetry.jsonl` in the state directory (read by `forewarn plan`).",
    )
    telemetry_max_bytes: int = Field(
        default=10 * 1024 * 1024,
        ge=4096,
        # A gibibyte: years of notices. Unbounded, `1e30` (or `1TB`) was taken, the file never
        # rotated, and `forewarn plan` read it whole however large it grew.
        le=1024**3,
        description="Size at which `telemetry.jsonl` is rotated (three older files are kept): "
        "bytes, or a size with its unit (`10MB`, `10MiB`), from 4096 to 1GiB.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info",
        description="Least severe level logged: debug, info, warning or error (any case; warn "
        "is warning).",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="`text` for people, `json` for machines: one JSON object a line with ts, "
        "level, logger, msg and any extra fields.",
    )

    webhook: WebhookSettings = Field(default_factory=WebhookSettings)

    # The providers this model has sections for: none here; `settings_model` sets it.
    registry: ClassVar[Registry] = Registry([])

    # Keys the config file sets that a flag or a variable overrides (`load_settings`).
    _overridden: list[str] = PrivateAttr(default_factory=list)

    @property
    def overridden(self) -> list[str]:
        """One line for each key of the config file whose value is not used, because a flag
        or a FOREWARN_ variable sets that key too; the agent logs them at start."""
        return list(self._overridden)

    @property
    def unused_sections(self) -> list[str]:
        """One line for each provider's section that a source sets while `providers` names
        other watchers (and not `auto`); the agent logs them at start. `providers = ["local"]`
        beside an `[aws]` table started no AWS watcher without a word. A warning, not an
        error: one file or ConfigMap may serve machines whose FOREWARN_PROVIDERS differs."""
        if "auto" in self.providers:
            return []
        notes = []
        for name in self.registry.names():
            section = getattr(self, name, None)
            if name in self.providers or name not in self.model_fields_set:
                continue
            if isinstance(section, BaseModel) and section.model_fields_set:
                notes.append(
                    f"config section [{name}] is set, but providers "
                    f"({', '.join(self.providers)}) does not name {name}: its watcher does "
                    "not run, and these settings are not used"
                )
        return notes

    @field_validator("*", mode="before")
    @classmethod
    def _seconds_accept_durations(cls, value: Any, info: ValidationInfo) -> Any:
        # Every seconds key also takes a duration (`30s`), in TOML, environment and --set.
        return read_value(cls.model_fields.get(info.field_name or ""), value)

    @field_validator("events", "control", mode="before")
    @classmethod
    def _endpoint_text(cls, value: Any) -> Any:
        # Without the space around it, as the clients read it: a ConfigMap's YAML block ends
        # the value with a newline, and the socket file was `events\n`, where no client looked.
        # Blank is unset (the default endpoint), as a blank variable is.
        if not isinstance(value, str):
            return value
        return _absolute_ipc(value.strip(string.whitespace)) or None

    @field_validator("telemetry_max_bytes", mode="before")
    @classmethod
    def _size_with_its_unit(cls, value: Any) -> Any:
        # `10MB`, `10 MiB`, as `forewarn plan --checkpoint-size` takes a size: the key refused
        # them as 'unable to parse string as an integer'. A bare number is bytes, read as
        # every key's (`whole`): `1e7` and `inf` have letters too, and were "not a size".
        if not isinstance(value, str) or toml_number(value) is not None:
            return value
        if not any(char.isalpha() for char in value):
            return value
        from .plan.sizes import parse_size

        # `_` between digits, as a bare number and a duration's number take it (`1_000MB`).
        grouped = _DIGIT_GROUPS.sub("", value)
        try:
            size = parse_size(grouped)
        except ValueError as error:
            raise ValueError(str(error).replace(repr(grouped), repr(value))) from None
        if size != int(size):
            raise ValueError(f"not a whole number of bytes: {value.strip()!r} is {size:g}")
        # Shown as written in a refusal: "got 2147483648" of `2GiB` named no value written.
        return shown_as_written(int(size), value.strip(string.whitespace))

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _choice_any_case(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, str):
            return value
        # A word not among the choices goes on as written, for the refusal to name it so:
        # `log_level = "A"` was refused as "(got 'a')", a value nobody wrote.
        word = choice_as_written(value)
        field = cls.model_fields.get(info.field_name or "")
        return word if field is not None and word in get_args(field.annotation) else value

    @field_validator("providers", mode="before")
    @classmethod
    def _split_providers(cls, value: Any, info: ValidationInfo) -> Any:
        # Blank is the default, `auto`.
        # A JSON list too, as the file writes it (`FOREWARN_PROVIDERS=["local","aws"]` was an
        # unknown provider '["local"'), as FOREWARN_KUBERNETES_TAINTS takes one.
        value = split_list(value, cls.model_fields.get(info.field_name or ""), json_list=True)
        if isinstance(value, list):
            # Any case (`AWS`, `GCP`), as on the command line; separated by space too, as
            # `--provider` takes them: FOREWARN_PROVIDERS="local aws" (a systemd
            # Environment= line) was one unknown provider named 'local aws'.
            return [
                name.lower()
                for part in value
                for name in (part.split() if isinstance(part, str) else [part])
            ]
        return value

    @field_validator("providers")
    @classmethod
    def _known_providers(cls, value: list[str]) -> list[str]:
        for name in value:
            if name != "auto" and name not in cls.registry:
                raise ValueError(cls.registry.unknown(name, ["auto", *cls.registry.names()]))
        if not value:
            raise ValueError("at least one provider is needed")
        return list(dict.fromkeys(value))

    @field_validator("metrics_address")
    @classmethod
    def _metrics_address(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or value.strip().lower() in ("", "off", "none"):
            return None
        host, _ = parse_listen_address(value.strip())
        # allow_remote is declared before metrics_address, so it is validated already.
        if not info.data.get("allow_remote") and not ipaddress.ip_address(host).is_loopback:
            raise ValueError(
                f"{host} is not a loopback address; metrics and health would be reachable "
                "from other machines. Use 127.0.0.1, or set allow_remote (--allow-remote)."
            )
        return value.strip()

    def metrics_listen(self) -> tuple[str, int] | None:
        """(host, port) for the metrics server, or None when metrics are off."""
        if self.metrics_address is None:
            return None
        return parse_listen_address(self.metrics_address)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = _CONFIG_FILE.get("path")
        sources: list[PydanticBaseSettingsSource] = [init_settings, _EnvSource(settings_cls)]
        if toml_file is not None:
            sources.append(_TomlSource(settings_cls, toml_file=toml_file))
        return tuple(sources)

    def provider_settings(self, name: str) -> ProviderSettings:
        """The `[name]` section; `name` must be in this model's registry."""
        self.registry[name]  # raises UnknownProvider
        section: ProviderSettings = getattr(self, name)
        return section

    def resolved_runtime_dir(self) -> Path:
        if self.runtime_dir is not None:
            return self.runtime_dir
        return runtime_dir(for_agent=True)

    def resolved_state_dir(self, *, reading: bool = False) -> Path:
        """`state_dir`, else /var/lib/forewarn when writable, else the XDG state home; when
        only the runtime directory is overridden (to another place than its default), a
        subdirectory of that named after it, so that two agents never share state by
        accident. `reading`: for a command that reads the agent's files (`plan`),
        /var/lib/forewarn also when it can only read it. Absolute:
        a relative `--state-dir` names the directory it was started from, which the reader of
        a unit's journal cannot place."""
        if self.state_dir is not None:
            return Path(os.path.abspath(self.state_dir))
        system = SYSTEM_STATE_DIR
        if os.access(system, os.W_OK) or (
            not system.exists() and os.access(system.parent, os.W_OK)
        ):
            base = system
        elif reading and system.is_dir() and os.access(system, os.R_OK | os.X_OK):
            # A member of the system agent's group reads its 0750 directory and 0640 files
            # but writes nothing there: `plan` looked in ~/.local/state, where no agent ran.
            base = system
        else:
            xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
            base = Path(os.path.abspath(xdg)) / "forewarn"
        default = default_runtime_dir(for_agent=True)
        if self.runtime_dir is not None and not _same_place(self.runtime_dir, default):
            return base / runtime_state_name(self.runtime_dir)
        # A runtime directory written out as the default one is no other agent's: its state
        # is the default's. Earlier versions kept it in a subdirectory named after it (a user
        # who wrote `runtime_dir = "/run/forewarn"` down restarted with no saved notice), and
        # an install set up so keeps its notices there: that one, while it was written last.
        earlier = base / runtime_state_name(self.runtime_dir or default)
        return earlier if _saved_later(earlier, base) else base

    def resolved_endpoints(self) -> tuple[str, str]:
        """The endpoints to bind, each checked: loopback TCP or ipc unless `allow_remote`."""
        try:
            return resolve_endpoints(
                self.resolved_runtime_dir(),
                self.events,
                self.control,
                allow_remote=self.allow_remote,
            )
        except EndpointError as error:
            raise ConfigError(str(error)) from None

    def bind_endpoints(self) -> tuple[str, str]:
        """`resolved_endpoints()`, for the agent that binds them: an `ipc://` path in a
        directory that does not exist (other than the runtime directory, which the agent
        makes) is refused naming the key, before the agent writes its lock or `seq`. Not made
        for it: a path written by hand in a missing directory is most often a typo, which the
        agent would serve where no client looks, and the directory's owner and mode are the
        operator's to choose (a systemd unit's `RuntimeDirectory=`)."""
        chosen = self.resolved_endpoints()
        runtime = os.path.normpath(os.path.abspath(self.resolved_runtime_dir()))
        for endpoint, key in zip(chosen, ("events", "control"), strict=True):
            path = ipc_path(endpoint)
            if path is None:
                continue
            # As the kernel reads it at the bind: `/run/missing/../events` is refused there.
            parent = os.path.dirname(str(path))
            if os.path.isdir(parent) or os.path.normpath(parent) == runtime:
                continue
            why = "is not a directory" if os.path.lexists(parent) else "does not exist"
            raise ConfigError(
                f"{key} {endpoint!r}: its directory {parent!r} {why}; create it (with the "
                "mode the jobs that connect need), or leave the key out for the runtime "
                "directory's socket"
            )
        return chosen


def _absolute_ipc(endpoint: str) -> str:
    """`endpoint` with a `~` at the start of an `ipc://` path read as the home directory, as
    in every path; a relative path is a ValueError naming the absolute one meant. The config
    file's relative paths are made absolute from its directory before this (`_TomlSource`);
    one from a flag, a FOREWARN_* variable or `--set` was bound in the agent's working
    directory (`/` under systemd), where a job started elsewhere never looked, and
    `ipc://run/forewarn/events` (the third slash missing) is the usual way to write one."""
    path = ipc_path(endpoint)
    if path is None or not str(path):
        return endpoint
    written = endpoint[len("ipc://") :]
    refuse_shell_variable(written)
    if written.startswith("~"):
        endpoint = "ipc://" + os.path.expanduser(written)
        written = endpoint[len("ipc://") :]
    if written.startswith("/"):
        return endpoint
    meant = os.path.normpath(os.path.join(os.getcwd(), written))
    raise ValueError(
        f"{endpoint!r} is a relative ipc:// path, read from the working directory, which the "
        f"agent and its clients do not share: write it absolute, ipc://{meant} (three slashes "
        "before an absolute path), or leave it out for the runtime directory's"
    )


class _EnvSource(EnvSettingsSource):
    """The FOREWARN_ variables, a blank one being no value at all (`_without_blank`)."""

    def __call__(self) -> dict[str, Any]:
        return _without_blank(_unquoted_values(super().__call__()), self.settings_cls)


def _unquoted_values(values: dict[str, Any]) -> dict[str, Any]:
    """Each variable's value without one pair of quotes around it (`unquoted`), a section's
    too: a Docker `--env-file` keeps them, as no shell reads that file."""
    return {
        key: _unquoted_values(value)
        if isinstance(value, dict)
        else unquoted(value)
        if isinstance(value, str)
        else value
        for key, value in values.items()
    }


def _without_blank(values: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """`values` (of `model`) without the keys set blank, so that the config file's value (else
    the default) stands, for every key alike: a variable left blank by a compose file's
    `${VAR}` or a Helm or Kustomize env list, or a `--set KEY=` with its shell variable
    unset, sets nothing. Blank paths, endpoints and lists were dropped alone: a blank
    `FOREWARN_KUBERNETES_CONTEXT` beside the file's `context` unset it (with a warning that
    it overrode the file), and a blank number, boolean or word stopped the agent with exit 2.
    Unknown keys stay, to be refused by name; so does a section set blank as one value."""
    fields = {name.lower(): field for name, field in model.model_fields.items()}
    kept: dict[str, Any] = {}
    for key, value in values.items():
        field = fields.get(str(key).lower())
        annotation = field.annotation if field is not None else None
        if field is not None and not _is_section(annotation) and _is_blank(value):
            continue
        if _is_section(annotation) and isinstance(value, dict):
            value = _without_blank(value, annotation)
        kept[key] = value
    return kept


def _is_section(annotation: Any) -> TypeGuard[type[BaseModel]]:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _is_blank(value: Any) -> bool:
    return isinstance(value, str) and not value.strip(string.whitespace)


class _TomlSource(TomlConfigSettingsSource):
    """The TOML file with its relative paths made relative to the file's directory, as the
    clients read them: relative to the agent's working directory (/ under systemd), a client
    elsewhere looked for `runtime_dir = "run"` in a directory of its own."""

    def __init__(self, settings_cls: type[BaseSettings], toml_file: Path) -> None:
        self._model = settings_cls  # `_read_file` runs inside the base class's __init__
        super().__init__(settings_cls, toml_file=toml_file)

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        # `read_toml`, as `load_settings` read it: the base class's own reading took a
        # byte order mark for a key.
        return _relative_to(Path(file_path), read_toml(Path(file_path)), self._model)


def _relative_to(
    config: Path, document: dict[str, Any], model: type[BaseModel], top: bool = True
) -> dict[str, Any]:
    fields = {name.lower(): field for name, field in model.model_fields.items()}
    resolved = dict(document)
    for key, value in document.items():
        field = fields.get(str(key).lower())
        if field is None:
            continue
        annotation = field.annotation
        text = value.strip(string.whitespace) if isinstance(value, str) else None
        if text and _holds_path(annotation):
            resolved[key] = str(resolve_config_path(text, config))
        elif text is not None and top and str(key).lower() in _ENDPOINTS:
            resolved[key] = resolve_config_endpoint(text, config)
        elif (
            isinstance(value, dict)
            and isinstance(annotation, type)
            and issubclass(annotation, BaseModel)
        ):
            resolved[key] = _relative_to(config, value, annotation, top=False)
    return resolved


_ENDPOINTS = ("events", "control")


def _same_place(first: Path, second: Path) -> bool:
    """Whether two paths name one directory: `/var/run/forewarn` is `/run/forewarn` where
    /var/run links to /run, as it does on every systemd distribution."""
    return os.path.realpath(first) == os.path.realpath(second)


def _saved_later(directory: Path, than: Path) -> bool:
    """Whether `directory` holds an agent's state file written after `than`'s (or `than`
    holds none). Told by their `seq` where both name one: it only grows from one start to
    the next, each agent numbering above the directory it ran on, which held the higher;
    by the files' times otherwise (a file no agent wrote). By the times alone, a clock
    stepped back after the agent left one directory for the other gave the one written
    last the older time, and a restart took up the state the agent had left."""

    def written(where: Path) -> float | None:
        try:
            return os.stat(where / STATE_FILE, follow_symlinks=False).st_mtime
        except OSError:
            return None

    mine = written(directory)
    if mine is None:
        return False
    theirs = written(than)
    if theirs is None:
        return True
    my_seq, their_seq = saved_seq(directory), saved_seq(than)
    if my_seq is not None and their_seq is not None:
        return my_seq > their_seq
    return mine > theirs


def runtime_state_name(runtime: Path) -> str:
    """The state subdirectory of an overridden runtime directory: readable, and unique per
    absolute path (`run-<last part>-<hash>`)."""
    absolute = os.path.abspath(runtime)
    digest = hashlib.sha256(absolute.encode()).hexdigest()[:10]
    tail = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(absolute).name)
    return f"run-{tail[:40] or 'root'}-{digest}"


@functools.cache
def settings_model(registry: Registry = REGISTRY) -> type[Settings]:
    """`Settings` plus one `[<provider>]` section per spec of `registry`."""
    sections: dict[str, Any] = {}
    for spec in registry:
        if spec.name in Settings.model_fields:
            raise ValueError(f"provider {spec.name!r} clashes with the top-level key")
        sections[spec.name] = (
            spec.settings,
            Field(default_factory=spec.settings, description=spec.summary),
        )
    model: type[Settings] = create_model("Settings", __base__=Settings, **sections)
    model.registry = registry
    return model


# The TOML path is chosen per load; pydantic-settings asks for sources on the class.
_CONFIG_FILE: dict[str, Path | None] = {"path": None}


def parse_listen_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` or `[IPv6]:PORT` with an IP address or `localhost` (port 0 picks a free
    one); raises ValueError saying what was wrong."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()):
        raise ValueError(f"{text!r}: expected HOST:PORT such as 127.0.0.1:9464")
    if not 0 <= int(port) < 65536:
        # "expected HOST:PORT" of `127.0.0.1:99999` named no fault in it.
        raise ValueError(f"{text!r}: port {int(port)} is not 0-65535 (0: a free one)")
    if host.startswith("["):
        if not host.endswith("]"):
            raise ValueError(f"{text!r}: unbalanced brackets around the IPv6 address")
        host = host[1:-1]
    if host.lower() == "localhost":  # in any case, as a host name is read: LOCALHOST too
        host = "127.0.0.1"
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{text!r}: {host!r} is not an IP address (or localhost)") from None
    return host, int(port)


# A key whose name says it holds a secret never has its value echoed in an error; a webhook
# URL may be the secret itself, and a proxy URL holds its password. By the key's own name:
# matched on the whole path, `webhook` hid every webhook key's value ("webhook.timeout:
# Input should be greater than 0", without the value written).
_SECRET = re.compile(r"token(?!_ttl)|secret|passw|credential|authorization|api_?key|cookie", re.I)
_SECRET_KEYS = frozenset({"webhook.url", "webhook.proxy"})


def _secret(key: str) -> bool:
    return key in _SECRET_KEYS or bool(_SECRET.search(key.rpartition(".")[2]))


def _known_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed where `loc` points (its last part is the key at fault)."""
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


# A key a section might be thought to have for turning its watcher on or off: `providers`
# chooses the watchers.
_ENABLING = ("enabled", "enable", "disabled", "disable")


def _top_level_keys_only(value: object, top: dict[str, str]) -> bool:
    """Whether `value` is a table of top-level keys alone (and of at least one)."""
    return (
        isinstance(value, dict)
        and bool(value)
        and all(str(name).lower() in top for name in value)
        and not any(isinstance(item, dict) for item in value.values())
    )


# pydantic's errors of a number out of its bounds, or not finite where it must be: for NaN,
# which is neither, they say the wrong thing.
_BOUND_ERRORS = frozenset(
    {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number"}
)


def _not_a_number(value: object) -> bool:
    """Whether `value` is NaN: TOML's `nan`, or its text from `--set` or a FOREWARN_*
    variable. (An infinity needs no such word: "less than or equal to 86400 (got inf)" is
    true as it stands.)"""
    if isinstance(value, bool) or not isinstance(value, (float, str)):
        return False
    try:
        return math.isnan(float(value))
    except (ValueError, OverflowError):
        return False


def _not_a_boolean(model: type[BaseModel], loc: tuple[Any, ...], value: object) -> str:
    """What a boolean key at `loc` takes, said for the `value` it refused: a blank one (a
    template's empty value) is told that leaving the key out gives its default."""
    takes = "true or false (yes/no, on/off, 1/0 are read too, in any case)"
    if not (isinstance(value, str) and not value.strip()):
        return f"{value!r} is not a boolean; it takes {takes}"
    field: FieldInfo | None = None
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None:
            break
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            model = field.annotation
    default = field.get_default(call_default_factory=True) if field is not None else None
    if isinstance(default, bool):
        return (
            f"blank; it takes {takes}, or leave the key out for its default, {str(default).lower()}"
        )
    return f"blank; it takes {takes}"


def describe_error(
    error: ValidationError,
    model: type[BaseModel],
    source: Callable[[tuple[Any, ...]], str | None] | None = None,
) -> str:
    """One line naming each key at fault, with the nearest known key for an unknown one.
    Values are shown only where they help and never for an unknown or secret key. `source`
    names where a key's value came from (`environment FOREWARN_X`, `config file F`), put
    before it: the operator set the variable or the file's line, not "config key x"."""
    problems = []
    for item in error.errors():
        loc = tuple(item["loc"])
        key = ".".join(str(part) for part in loc) or "(config)"
        where = source(loc) if source is not None else None
        said = f"{where}: config key {key}" if where else f"config key {key}"
        if item["type"] == "extra_forbidden":
            text = f"{said}: unknown key"
            # In lower case: `[webhook] URL = ...` had no suggestion at all, as no close
            # match of `URL` is `url` to difflib.
            known = {name.lower(): name for name in _known_keys(model, loc)}
            near = difflib.get_close_matches(str(loc[-1]).lower(), list(known), n=1)
            if len(loc) == 1:
                # `[k8s]`, `[do]`: a provider's section by what people call it.
                registry = getattr(model, "registry", None)
                names = registry.names() if isinstance(registry, Registry) else ()
                meant = nearest_provider(str(loc[0]), names)
                near = [meant] if meant is not None and str(loc[0]).lower() in ALIASES else near
            top = {name.lower(): name for name in model.model_fields}
            leaf = str(loc[-1])
            section = model.model_fields.get(str(loc[0])) if len(loc) == 2 else None
            if section is not None and leaf.lower() in top and leaf.lower() not in known:
                # TOML puts every key after a header in that section: a key appended at the
                # end of the file was refused with no word of why.
                text += (
                    f" ({top[leaf.lower()]} is a top-level key, not one of [{loc[0]}]: in "
                    "TOML every key after a [section] header is in that section; write it "
                    "above the first one)"
                )
            elif (
                section is not None
                and leaf.lower() in _ENABLING
                and str(loc[0]) in getattr(model, "registry", ())
            ):
                text += (
                    " (a watcher runs when the top-level key providers names it: "
                    f'providers = ["{loc[0]}"], or "auto")'
                )
            elif len(loc) == 1 and _top_level_keys_only(item.get("input"), top):
                # `[forewarn]` or `[agent]` above the agent's own keys, as many programs'
                # files have it: 'unknown key' alone did not say the keys themselves exist.
                named = [top[str(name).lower()] for name in item["input"]]
                they = (
                    f"{named[0]} is a top-level key: write it"
                    if len(named) == 1
                    else f"{', '.join(named)} are top-level keys: write them"
                )
                text += f" ({they} without the [{leaf}] header, above any [section])"
            elif near:
                text += f" (did you mean {'.'.join([*map(str, loc[:-1]), known[near[0]]])}?)"
            problems.append(text)
            continue
        message = str(item["msg"]).removeprefix("Value error, ")
        if item["type"] in _BOUND_ERRORS and _not_a_number(item.get("input")):
            # pydantic compares NaN with the bound: "less than or equal to 1.5 (got nan)"
            # read as if a smaller NaN would do.
            message = "not a number"
        if item["type"] == "model_type":
            # pydantic says 'a valid dictionary or instance of Settings': a class name.
            leaf = str(loc[-1]) if loc else ""
            message = (
                f"a section, not a value: set its keys ([{leaf}] in TOML, "
                f"FOREWARN_{leaf.upper()}_<KEY>, --set {leaf}.KEY=VALUE)"
            )
        if item["type"] in ("bool_parsing", "bool_type"):
            # pydantic's "unable to interpret input" named nothing the key takes.
            message = _not_a_boolean(model, loc, item.get("input"))
        value = item.get("input")
        shown = ""
        # A blank boolean's message says "blank" itself.
        said_blank = item["type"] == "bool_parsing" and message.startswith("blank;")
        if (
            not isinstance(value, dict)
            and not _secret(key)
            and repr(value) not in message
            and not said_blank
        ):
            shown = f" (got {value!r})"
        if _secret(key):
            message = message.split(", got ")[0]
        problems.append(f"{said}: {message}{shown}")
    return "; ".join(problems)


def _value_source(
    document: dict[str, Any], given: dict[str, Any], path: Path | None
) -> Callable[[tuple[Any, ...]], str | None]:
    """Where the value at a key's `loc` came from, as the sources rank (flags and `--set`,
    then FOREWARN_ variables, then the file): None for a flag's or `--set`'s, which the
    command line names itself (`cli._name_flags`), and for a default."""

    def has(values: dict[str, Any], parts: tuple[str, ...]) -> bool:
        found: Any = values
        for part in parts:
            if not isinstance(found, dict):
                return False
            named = {str(name).lower(): value for name, value in found.items()}
            if part.lower() not in named:
                return False
            found = named[part.lower()]
        return True

    def source(loc: tuple[Any, ...]) -> str | None:
        # The key and its section, as a variable names them (FOREWARN_AWS_URL): not a list's
        # index, nor what lies within a value.
        parts = tuple(str(part) for part in loc[:2] if isinstance(part, str))
        if not parts or (has(given, parts[:1]) and (len(parts) == 1 or has(given, parts))):
            return None
        variables = {name.upper(): value for name, value in os.environ.items()}
        for depth in range(len(parts), 0, -1):
            variable = "FOREWARN_" + "_".join(parts[:depth]).upper()
            if variable in variables and not _is_blank(variables[variable]):
                return f"environment {variable}"
        if path is not None and has(document, parts[:1]):
            return f"config file {path}"
        return None

    return source


def load_settings(
    config_file: Path | None = None, *, registry: Registry = REGISTRY, **overrides: Any
) -> Settings:
    """Read the configuration; raise ConfigError naming the key at fault.

    `config_file` is the TOML file (else `$FOREWARN_CONFIG`, else /etc/forewarn/forewarn.toml
    when it exists). `overrides` are flag values; None means "not given". `registry` says
    which provider sections exist.
    """
    # In any case, as every FOREWARN_ variable is read: `forewarn_config` was ignored. Without
    # the space around it, blank as unset, as the clients read it (`wire.config_file`): with
    # a ConfigMap block's newline or an env file's trailing blank, 'config file ... : not
    # found' stopped every start.
    named = (environment(ENV_CONFIG) or "").strip(string.whitespace) or None
    path = config_file or (Path(named) if named else None)
    if path is None and DEFAULT_CONFIG_FILE.is_file():
        path = DEFAULT_CONFIG_FILE
    if path is not None:
        # `FOREWARN_CONFIG=~/f.toml` (systemd, docker -e) and `--config=~/f.toml` come
        # unexpanded: "not found", while every path key reads `~` as the home directory.
        path = path.expanduser()
    document: dict[str, Any] = {}
    if path is not None:
        try:
            document = read_toml(path)
        except ConfigFileError as error:
            raise ConfigError(str(error)) from None
    given = _without_blank(
        {key: value for key, value in overrides.items() if value is not None},
        settings_model(registry),
    )
    _once_in_any_case(document, f"config file {path}")
    _once_in_any_case(given, "the command line")
    _CONFIG_FILE["path"] = path
    model = settings_model(registry)
    _check_environment_names(model)
    try:
        settings = model(**given)
        settings._overridden = _overridden(document, given, path, model)
        return settings
    except ValidationError as error:
        raise ConfigError(
            describe_error(error, model, _value_source(document, given, path))
        ) from None
    except SettingsError as error:
        raise ConfigError(_environment_error(error, model)) from None
    finally:
        _CONFIG_FILE["path"] = None


def _environment_error(error: SettingsError, model: type[Settings]) -> str:
    """pydantic-settings' complaint about a variable, made plain where it can be: a section
    set as one variable (`FOREWARN_WEBHOOK=<url>`) got 'error parsing value for field
    "webhook" from source "EnvSettingsSource"', naming neither the fix nor the variable."""
    found = re.search(r'field "([^"]+)"', str(error))
    field = model.model_fields.get(found.group(1)) if found else None
    section = field.annotation if field is not None else None
    if found and isinstance(section, type) and issubclass(section, BaseModel):
        key = found.group(1)
        variable = f"FOREWARN_{key.upper()}"
        example = f"{variable}_{next(iter(section.model_fields)).upper()}"
        return (
            f"environment {variable}: {key} is a section, not a value: set its keys "
            f"({variable}_<KEY>, such as {example})"
        )
    return f"environment: {error}"


# FOREWARN_* variables that are not settings of the agent: read by the client library in the
# training process, or by the DigitalOcean credentials file (and FOREWARN_CONFIG, by
# `load_settings` itself).
_NOT_SETTINGS = ("CHECKPOINT_", "IMAP_")


def _sections(model: type[Settings]) -> dict[str, type[BaseModel]]:
    """The model's sections by their names in upper case (`AWS`)."""
    return {
        key.upper(): field.annotation
        for key, field in model.model_fields.items()
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
    }


def _section_keys(model: type[Settings]) -> list[str]:
    """The sections' keys as their variables name them, less the prefix (`AWS_URL`)."""
    return [
        f"{section}_{key.upper()}"
        for section, section_model in _sections(model).items()
        for key in section_model.model_fields
    ]


def variable_problem(variable: str, model: type[Settings], *, strict: bool = False) -> str | None:
    """Why the FOREWARN_ variable `variable` is no setting of `model`, or None (also for a
    variable without the prefix, unless it is a setting's with the prefix misspelt:
    `FORWARN_EXIT_MARGIN`). Not `strict` (the agent's own environment): only a name one
    typo away from a setting, since pydantic-settings ignores an unknown one and names a
    section's unknown key itself. `strict` (`forewarn render cloud-init --env`, a file that
    holds the agent's settings only): any name that is no setting."""
    name = variable.upper().removeprefix("FOREWARN_")
    keys = [key.upper() for key in model.model_fields]
    misspelt = name == variable.upper() and _prefix_problem(
        name, [*keys, *_section_keys(model), "CONFIG"]
    )
    if misspelt:
        return misspelt
    if strict and name == variable.upper() and name in [*keys, *_section_keys(model)]:
        # `--env exit_margin=30s`: the agent reads FOREWARN_ variables only, and ignored it.
        return f"not a setting (the agent reads FOREWARN_{name})"
    if name in (variable.upper(), "CONFIG") or name in keys or name.startswith(_NOT_SETTINGS):
        return None
    if name.startswith("CONFIG"):
        # FOREWARN_CONFIG_FILE (as other tools name theirs) passed as FOREWARN_CONFIG's kin,
        # and the agent started without the file in silence.
        return "not a setting (did you mean FOREWARN_CONFIG?)"
    sections = _sections(model)
    section_keys = _section_keys(model)
    if name in section_keys or (
        not strict and any(name.startswith(section + "_") for section in sections)
    ):
        return None
    alias, _, rest = name.partition("_")
    meant = ALIASES.get(alias.lower(), "").upper()
    if meant in sections and f"{meant}_{rest}" in section_keys:
        # FOREWARN_K8S_NODE_NAME, FOREWARN_DO_IMAP_HOST: a section by what people call it.
        return f"not a setting (did you mean FOREWARN_{meant}_{rest}?)"
    near = difflib.get_close_matches(name, keys + section_keys, n=1, cutoff=0.8)
    if near:
        return f"not a setting (did you mean FOREWARN_{near[0]}?)"
    return "not a setting" if strict else None


def _prefix_problem(name: str, settings: list[str]) -> str | None:
    """Why `name` (a variable without the `FOREWARN_` prefix, in upper case) is no setting,
    when it is a setting's variable with the prefix misspelt (`FORWARN_EXIT_MARGIN`,
    `FOREWARNS_AWS_URL`, `FOREWARNEXIT_MARGIN`), or None. The rest must be a setting's name
    exactly, and the prefix close to `FOREWARN`: another program's `XDG_RUNTIME_DIR` or
    `FORWARD_CONTROL` is none of ours."""
    for key in sorted(settings, key=len, reverse=True):
        if not name.endswith(key):
            continue
        prefix = name[: -len(key)].rstrip("_")
        if prefix and difflib.SequenceMatcher(None, prefix, "FOREWARN").ratio() >= 0.85:
            return f"not read, the agent reads FOREWARN_ variables (did you mean FOREWARN_{key}?)"
    return None


def _check_environment_names(model: type[Settings]) -> None:
    """A FOREWARN_ variable one typo away from a setting is an error naming the setting it
    resembles: pydantic-settings ignores an unknown one, so `FOREWARN_EXIT_MARGN=5` left the
    margin at its default in silence (a section's unknown key is refused already), and so
    did a typo in a section's name: `FOREWARN_DIGITAL_OCEAN_IMAP_HOST` left the mailbox
    unwatched, `FOREWARN_KUBERNETS_EVENTS=true` the Events off."""
    spellings: dict[str, list[str]] = {}
    for variable in sorted(os.environ):
        problem = variable_problem(variable, model)
        if problem:
            raise ConfigError(f"environment {variable}: {problem}")
        spellings.setdefault(variable.upper(), []).append(variable)
    for upper, names in spellings.items():
        # Names are read in any case: of `FOREWARN_EXIT_MARGIN` and `forewarn_exit_margin`,
        # the agent took whichever came last in its environment, in silence.
        # The store's FOREWARN_CHECKPOINT_* and the mailbox's FOREWARN_IMAP_* are not ours.
        others = ("CHECKPOINT_", "IMAP_")
        ours = upper.startswith("FOREWARN_") and not upper[9:].startswith(others)
        if len(names) > 1 and ours and variable_problem(upper, model, strict=True) is None:
            raise ConfigError(
                f"environment {' and '.join(names)}: one variable set twice, in different case"
            )


def _once_in_any_case(keys: dict[str, Any], source: str) -> None:
    """Top-level keys and section names are read in any case, as FOREWARN_ variables are;
    the same one twice in different case kept one of them in silence (`[AWS]` then `[aws]`
    lost the second section)."""
    seen: dict[str, str] = {}
    for key in keys:
        first = seen.setdefault(str(key).lower(), str(key))
        if first != key:
            raise ConfigError(f"config key {key}: set twice in {source}, as {first} and {key}")


def _overridden(
    document: dict[str, Any], given: dict[str, Any], path: Path | None, model: type[BaseModel]
) -> list[str]:
    """A line for each key `document` (the config file at `path`) sets that a flag or a
    FOREWARN_ variable sets too. The systemd unit and the container image set some variables
    themselves (FOREWARN_STATE_DIR, FOREWARN_METRICS_ADDRESS, ...), so the same key edited in
    the file was ignored without a word. A variable that gives the file's own value changes
    nothing and gets no line: a site may set a variable to what its file says. Values are not
    shown: one may be a secret."""
    variables = {name.upper(): value for name, value in os.environ.items()}
    flags = {str(key).lower(): value for key, value in given.items()}
    notes = []
    for key, value in document.items():
        if isinstance(value, dict):
            section = flags.get(key.lower())
            keys = [
                (f"{key}.{leaf}", isinstance(section, dict) and leaf in section, inner)
                for leaf, inner in value.items()
            ]
        else:
            keys = [(key, key.lower() in flags, value)]
        for dotted, by_flag, written in keys:
            variable = "FOREWARN_" + dotted.replace(".", "_").upper()
            if by_flag:
                by = "a command-line option"
            elif (
                variable in variables
                and not _is_blank(variables[variable])
                and not _same_text(written, variables[variable])
            ):
                by = f"the environment variable {variable}"
            else:
                continue
            notes.append(f"config key {dotted}: {by} overrides its value in {path}")
    return notes


def _same_text(written: Any, variable: str) -> bool:
    """Whether a variable's text is the config file's value `written` as written (a TOML
    boolean as `true`/`false`); anything else counts as different, so a note is never lost."""
    if isinstance(written, bool):
        written = "true" if written else "false"
    if not isinstance(written, (str, int, float)):
        return False
    return variable.strip(string.whitespace) == str(written).strip(string.whitespace)


__all__ = [
    "ConfigError",
    "Settings",
    "describe_error",
    "load_settings",
    "parse_listen_address",
    "settings_model",
    "variable_problem",
]
