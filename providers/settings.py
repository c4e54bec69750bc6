"""What every provider's settings section has in common."""

from __future__ import annotations

import types
from typing import Any, ClassVar, Union, get_args, get_origin
from urllib.parse import urlsplit

from forewarn.protocol.timefmt import parse_duration
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator


def is_seconds(annotation: Any) -> bool:
    """Whether a field holds seconds: every `float` (or `float | None`) setting does."""
    if annotation is float:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        return args == [float]
    return False


def seconds(value: Any) -> Any:
    """A duration as people type it (`30s`, `15m`, `2h`) or a number, as seconds. Every
    seconds setting goes through this, so a duration reads the same in TOML, the
    environment and `--set` as in a flag."""
    if isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            return parse_duration(text)
    return value


def check_url(value: str, schemes: tuple[str, ...], bare_host: bool) -> str:
    """`value` as a base URL: a scheme among `schemes` (or, when `bare_host`, none: then it
    is `HOST[:PORT]` over http), a host, a valid port, no query or fragment."""
    text = value.strip()
    if "://" not in text:
        if not bare_host:
            raise ValueError(f"expected a URL such as {schemes[0]}://127.0.0.1:8080, got {value!r}")
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme not in schemes:
        allowed = " or ".join(f"{scheme}://" for scheme in schemes)
        raise ValueError(f"must start with {allowed}, got {value!r}")
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ValueError(f"bad port in {value!r}") from None
    if not parts.hostname:
        raise ValueError(f"no host in {value!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"a base URL has no query or fragment, got {value!r}")
    return value.strip()


class ProviderSettings(BaseModel):
    """The base of every `[<provider>]` section: unknown keys are errors, and every seconds
    setting also accepts a duration (`30s`, `15m`, `2h`)."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _seconds_accept_durations(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and is_seconds(field.annotation):
            return seconds(value)
        return value


class EndpointSettings(ProviderSettings):
    """A section whose watcher talks to an endpoint. `url` points it there (tests and
    simulators use loopback); None means the provider's real address. It is checked when
    the configuration loads, so a URL the watcher cannot use is an error naming the key."""

    # The schemes the watcher speaks, and whether a bare HOST[:PORT] means http.
    url_schemes: ClassVar[tuple[str, ...]] = ("http", "https")
    url_bare_host: ClassVar[bool] = False

    url: str | None = Field(default=None, description="Base URL of the notice endpoint.")

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return check_url(value, cls.url_schemes, cls.url_bare_host)


__all__ = ["EndpointSettings", "ProviderSettings", "check_url", "is_seconds", "seconds"]
