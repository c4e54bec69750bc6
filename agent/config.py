"""The agent's configuration: one model read from flags, `FOREWARN_*` variables and a TOML file.

Precedence, highest first: command-line flags, environment, TOML file, defaults.
Environment names are `FOREWARN_<KEY>` for top-level keys and `FOREWARN_<SECTION>_<KEY>`
for a provider section (`FOREWARN_AWS_URL`, `FOREWARN_LOCAL_FLAG_FILE`).
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from forewarn.protocol.wire import EndpointError, resolve_endpoints, runtime_dir
from forewarn.providers import PROVIDERS
from forewarn.providers.aws.settings import Settings as AwsSettings
from forewarn.providers.azure.settings import Settings as AzureSettings
from forewarn.providers.digitalocean.settings import Settings as DigitalOceanSettings
from forewarn.providers.gcp.settings import Settings as GcpSettings
from forewarn.providers.kubernetes.settings import Settings as KubernetesSettings
from forewarn.providers.local.settings import Settings as LocalSettings
from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from .notifications.settings import WebhookSettings

DEFAULT_CONFIG_FILE = Path("/etc/forewarn/forewarn.toml")
SYSTEM_STATE_DIR = Path("/var/lib/forewarn")


class ConfigError(ValueError):
    """Configuration that cannot be used; the text names the key and what was wrong."""


class Settings(BaseSettings):
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
        "names among local, aws, gcp, azure, digitalocean, kubernetes.",
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
        description="Floor, in seconds, of the margin before a deadline at which a drain is "
        "re-sent as terminate; the margin is the larger of this and twice the slowest flush.",
    )
    heartbeat_interval: float = Field(
        default=1.0, gt=0, le=60, description="Seconds between heartbeats on the events socket."
    )
    metrics_address: str | None = Field(
        default=None,
        description="HOST:PORT of the Prometheus metrics, /healthz and /readyz server (needs "
        "the `metrics` extra), e.g. 127.0.0.1:9464; unset, empty or `off` serves none. "
        "Addresses other than loopback need allow_remote.",
    )
    telemetry: bool = Field(
        default=True,
        description="Append one JSON line per notice, escalation, ack and resume to "
        "`telemetry.jsonl` in the state directory (read by `forewarn plan`).",
    )
    telemetry_max_bytes: int = Field(
        default=10 * 1024 * 1024,
        ge=4096,
        description="Size at which `telemetry.jsonl` is rotated (three older files are kept).",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="Least severe level logged: debug, info, warning or error."
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="`text` for people, `json` for machines: one JSON object a line with ts, "
        "level, logger, msg and any extra fields.",
    )

    local: LocalSettings = Field(default_factory=LocalSettings)
    aws: AwsSettings = Field(default_factory=AwsSettings)
    gcp: GcpSettings = Field(default_factory=GcpSettings)
    azure: AzureSettings = Field(default_factory=AzureSettings)
    digitalocean: DigitalOceanSettings = Field(default_factory=DigitalOceanSettings)
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)
    webhook: WebhookSettings = Field(default_factory=WebhookSettings)

    @field_validator("providers", mode="before")
    @classmethod
    def _split_providers(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("providers")
    @classmethod
    def _known_providers(cls, value: list[str]) -> list[str]:
        for name in value:
            if name != "auto" and name not in PROVIDERS:
                raise ValueError(f"unknown provider {name!r}; use auto or {', '.join(PROVIDERS)}")
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
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        return tuple(sources)

    def provider_settings(self, name: str) -> Any:
        return getattr(self, name)

    def resolved_runtime_dir(self) -> Path:
        return self.runtime_dir if self.runtime_dir is not None else runtime_dir()

    def resolved_state_dir(self) -> Path:
        """`state_dir`, else /var/lib/forewarn when writable, else the XDG state home."""
        if self.state_dir is not None:
            return self.state_dir
        if os.access(SYSTEM_STATE_DIR, os.W_OK) or (
            not SYSTEM_STATE_DIR.exists() and os.access(SYSTEM_STATE_DIR.parent, os.W_OK)
        ):
            return SYSTEM_STATE_DIR
        xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        return Path(xdg) / "forewarn"

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


# The TOML path is chosen per load; pydantic-settings asks for sources on the class.
_CONFIG_FILE: dict[str, Path | None] = {"path": None}


def parse_listen_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` or `[IPv6]:PORT` with an IP address or `localhost` (port 0 picks a free
    one); raises ValueError saying what was wrong."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{text!r}: expected HOST:PORT such as 127.0.0.1:9464")
    if host.startswith("["):
        if not host.endswith("]"):
            raise ValueError(f"{text!r}: unbalanced brackets around the IPv6 address")
        host = host[1:-1]
    if host == "localhost":
        host = "127.0.0.1"
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{text!r}: {host!r} is not an IP address (or localhost)") from None
    return host, int(port)


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "(config)"
        value = item.get("input")
        # A webhook URL or a password may be the secret itself: never echo it to the journal.
        secret = any(word in key for word in ("password", "token", "secret", "webhook"))
        shown = f" (got {value!r})" if not isinstance(value, dict) and not secret else ""
        lines.append(f"config key {key}: {item['msg']}{shown}")
    return "; ".join(lines)


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Read the configuration; raise ConfigError naming the key at fault.

    `config_file` is the TOML file (else `$FOREWARN_CONFIG`, else /etc/forewarn/forewarn.toml
    when it exists). `overrides` are flag values; None means "not given".
    """
    path = config_file or (
        Path(os.environ["FOREWARN_CONFIG"]) if os.environ.get("FOREWARN_CONFIG") else None
    )
    if path is None and DEFAULT_CONFIG_FILE.is_file():
        path = DEFAULT_CONFIG_FILE
    if path is not None:
        if not path.is_file():
            raise ConfigError(f"config file {path}: not found")
        try:
            _check_toml(path)
        except ValueError as error:
            raise ConfigError(f"config file {path}: {error}") from None
    _CONFIG_FILE["path"] = path
    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**given)
    except ValidationError as error:
        raise ConfigError(_describe(error)) from None
    except SettingsError as error:
        raise ConfigError(f"environment: {error}") from None
    finally:
        _CONFIG_FILE["path"] = None


def _check_toml(path: Path) -> None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    with path.open("rb") as handle:
        try:
            tomllib.load(handle)
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"not valid TOML: {error}") from None


__all__ = ["ConfigError", "Settings", "load_settings", "parse_listen_address"]
