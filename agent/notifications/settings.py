"""Settings of the `[webhook]` section (environment `FOREWARN_WEBHOOK_<KEY>`)."""

from __future__ import annotations

import math
import ssl
import string
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from forewarn.protocol.timefmt import duration_or_as_is
from forewarn.providers.settings import read_value, shown_as_written
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator


class WebhookSettings(BaseModel):
    """Where to POST each published notice. Off unless `url` or `url_file` is set."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(
        default=None,
        description="http(s) URL that receives each published notice as a POST. A Slack "
        "incoming-webhook URL holds its secret: prefer `url_file`, or the environment.",
    )
    url_file: Path | None = Field(
        default=None,
        description="A file holding the URL (read at start), so the secret stays out of "
        "the configuration; used when `url` is unset.",
    )
    headers_file: Path | None = Field(
        default=None,
        description="A file of HTTP headers to send with each POST, one `Name: value` a line "
        "(`#` comments and blank lines skipped), such as `Authorization: Bearer <token>` for "
        "a receiver that asks for a token; checked at start, read again when it changes (a "
        "rotated token), its values never logged nor shown.",
    )
    ca_file: Path | None = Field(
        default=None,
        description="PEM file of the CA certificates to trust for an https receiver signed by "
        "a private CA (read at start); unset, the public CAs httpx ships (certifi), not the "
        "system store nor SSL_CERT_FILE.",
    )
    proxy: str | None = Field(
        default=None,
        description="The HTTP proxy to post through (`http://host:port`, with "
        "`user:password@` if it asks for one). Unset: `https_proxy` for an https receiver "
        "(`http_proxy` for http), else `all_proxy`, in the agent's environment in either "
        "case, unless `no_proxy` names the receiver's host.",
    )
    format: Literal["json", "slack"] = Field(
        default="json",
        description="`json`: the notice exactly as on the event socket (protocol v1); "
        '`slack`: a Slack-compatible `{"text": ...}` message.',
    )
    timeout: float = Field(
        default=5.0,
        gt=0,
        le=300,
        description="How long one delivery attempt may take, connection included (a "
        "duration such as `5s` or seconds).",
    )
    retries: int = Field(
        default=5,
        ge=0,
        le=100,
        description="Attempts after the first for a notice that failed (connection error, "
        "timeout, 429 or 5xx), with backoff (or the receiver's Retry-After, up to 60 s); "
        "other answers are not retried. A notice whose attempts all failed so is kept and "
        "tried again, 30 s doubling to every 10 min, until delivered or superseded by a "
        "newer notice of its id.",
    )
    queue: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Notices held for delivery; past it the oldest is dropped (and logged "
        "by action and id).",
    )

    @field_validator("*", mode="before")
    @classmethod
    def _read_value(cls, value: object, info: ValidationInfo) -> object:
        return read_value(cls.model_fields.get(info.field_name or ""), value)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        check_url(value)
        return value

    @field_validator("proxy")
    @classmethod
    def _proxy_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        from .proxy import proxy_url

        # The message never holds the value: a proxy URL may hold a password.
        return proxy_url(value.strip())

    @field_validator("timeout", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        # Durations read the same here as on the command line: `5s`, `1m`, or seconds;
        # refused, shown as written (`got '0'`, not `got 0.0`).
        seconds = duration_or_as_is(value)
        if isinstance(value, str) and isinstance(seconds, float):
            return shown_as_written(seconds, value)
        return seconds

    @field_validator("timeout")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number of seconds")
        return value

    @field_validator("url_file")
    @classmethod
    def _readable_file(cls, value: Path | None) -> Path | None:
        # Read now, so a missing or bad file stops the agent at start (exit 2).
        if value is not None:
            read_url_file(value)
        return value

    @field_validator("headers_file")
    @classmethod
    def _headers_file(cls, value: Path | None) -> Path | None:
        # Read now, so a missing or bad file stops the agent at start (exit 2).
        if value is not None:
            read_headers_file(value)
        return value

    @field_validator("ca_file")
    @classmethod
    def _ca_file(cls, value: Path | None) -> Path | None:
        # Read now, so a missing or bad file stops the agent at start (exit 2).
        if value is not None:
            tls_context(value)
        return value

    def verify(self) -> ssl.SSLContext | bool:
        """What the client checks the receiver's certificate against."""
        return True if self.ca_file is None else tls_context(self.ca_file)

    def headers(self) -> dict[str, str]:
        """The headers of `headers_file` to send with each POST; none when it is unset."""
        return {} if self.headers_file is None else read_headers_file(self.headers_file)

    def resolved_url(self) -> str | None:
        """The URL to post to, or None when webhooks are off."""
        if self.url is not None:
            return self.url
        if self.url_file is not None:
            return read_url_file(self.url_file)
        return None


def check_url(url: str) -> None:
    """ValueError unless `url` is an http(s) URL with a host. The message never contains
    the URL: its path may be a secret."""
    import httpx  # here, not at module level: every command loads these settings

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    # urlsplit accepts these, and httpx then raised outside its network errors (at start, or
    # at the first delivery), which stopped the webhook task for good while the agent ran on.
    try:
        port = parts.port
        # `.host` decodes the name: a malformed punycode label (`xn--`) passed the parse and
        # then raised at start, so the webhook never ran and no notice was delivered.
        httpx.URL(url).host  # noqa: B018
    except (ValueError, httpx.InvalidURL):
        port = 0
    if port == 0 or any(char.isspace() or not char.isprintable() for char in url):
        raise ValueError(
            "must have a valid host name, a port from 1 to 65535, and no spaces or control "
            "characters"
        )


def tls_context(ca_file: Path) -> ssl.SSLContext:
    """A client context trusting the CA certificates of `ca_file`; ValueError saying why not."""
    try:
        return ssl.create_default_context(cafile=str(ca_file))
    except ssl.SSLError:
        raise ValueError(f"no certificate in {ca_file} (expected PEM)") from None
    except OSError as error:
        raise ValueError(f"cannot read {ca_file}: {error.strerror or error}") from None


# Headers that are the HTTP client's to write: one from the file would contradict the body it
# sends (Content-Length), the connection it keeps, or the host the URL names.
RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
# RFC 9110's token: the characters a header's name may hold.
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~" + string.digits + string.ascii_letters)


def parse_headers(text: str) -> dict[str, str]:
    """The headers of a headers file's `text`: `Name: value` lines, `#` comments and blank
    lines skipped. ValueError naming the line, never its value (it is the secret)."""
    headers: dict[str, str] = {}
    seen: dict[str, str] = {}  # lower-case name -> as first written
    for number, line in enumerate(text.removeprefix("\ufeff").splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, colon, value = stripped.partition(":")
        name, value = name.strip(), value.strip()
        if not colon or not name:
            raise ValueError(f"line {number}: not `Name: value`")
        if not set(name) <= _TOKEN_CHARS:
            raise ValueError(f"line {number}: not a header name (letters, digits and -)")
        if not value.isascii():
            raise ValueError(f"line {number}: a character that is not ASCII in the value")
        if any(not char.isprintable() for char in value):
            raise ValueError(f"line {number}: a control character in the value")
        if name.lower() in RESERVED_HEADERS:
            raise ValueError(f"line {number}: {name} is the agent's to set")
        if name.lower() in seen:
            raise ValueError(f"line {number}: {seen[name.lower()]} twice")
        seen[name.lower()] = name
        headers[name] = value
    if not headers:
        raise ValueError("holds no header (`Name: value` lines)")
    return headers


def read_headers_file(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        why = error.strerror if isinstance(error, OSError) else "not UTF-8"
        raise ValueError(f"cannot read {path}: {why or error}") from None
    try:
        return parse_headers(text)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def read_url_file(path: Path) -> str:
    try:
        # A file saved by Windows PowerShell or Notepad begins with a byte order mark, which
        # is no space to strip, and the URL behind it read as no URL at all. Removed here
        # rather than by the `utf-8-sig` codec: a codec is imported on first use, and an
        # agent whose Python files it can no longer read (a unit that drops to its user)
        # failed with "unknown encoding".
        text = path.read_text(encoding="utf-8").removeprefix("\ufeff").strip()
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror or error}") from None
    if not text or "\n" in text:
        raise ValueError(f"{path} must hold one URL on one line")
    try:
        check_url(text)
    except ValueError as error:
        raise ValueError(f"the URL in {path} {error}") from None
    return text


__all__ = [
    "WebhookSettings",
    "check_url",
    "parse_headers",
    "read_headers_file",
    "read_url_file",
    "tls_context",
]
