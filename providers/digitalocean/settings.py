"""Settings of the `[digitalocean]` section (environment `FOREWARN_DIGITALOCEAN_<KEY>`)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from ..settings import EndpointSettings

METADATA_URL = "http://169.254.169.254"
DEFAULT_SENDER = r"(?i)@([a-z0-9-]+\.)*digitalocean\.com$"
DEFAULT_SUBJECT = r"(?i)reclaim|reclamation|spot|interrupt|preempt"
IMAP_PORTS = {"tls": 993, "starttls": 143, "none": 143}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _is_address(host: str) -> bool:
    """An IP address (IPv6 with a zone too): its colons are no port."""
    try:
        ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return False
    return True


class Settings(EndpointSettings):
    # The metadata service speaks plain http only.
    url_schemes = ("http",)

    url: str | None = Field(
        default=None,
        description="Base URL of the droplet metadata service (default http://169.254.169.254).",
    )
    droplet_id: str | None = Field(
        default=None,
        description="This droplet's numeric id; read from droplet metadata when not set.",
    )
    droplet_name: str | None = Field(
        default=None,
        description="This droplet's name; read from droplet metadata (hostname) when not set.",
    )
    imap_host: str | None = Field(
        default=None,
        description="IMAP server of the mailbox that receives DigitalOcean's reclaim emails; "
        "without it the mailbox is not watched.",
    )
    imap_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="IMAP port (default 993 for tls, 143 for starttls and none).",
    )
    imap_tls: Literal["tls", "starttls", "none"] = Field(
        default="tls",
        description="tls (IMAPS), starttls, or none (allowed only for a loopback imap_host).",
    )
    imap_ca_file: Path | None = Field(
        default=None,
        description="PEM file of CA certificates to trust for the IMAP server, instead of the "
        "system store.",
    )
    imap_mailbox: str = Field(default="INBOX", description="Mailbox (folder) to watch.")
    imap_timeout: float = Field(
        default=30.0, gt=0, le=3600, description="Seconds to wait for the IMAP server to answer."
    )
    credentials_file: Path | None = Field(
        default=None,
        description="Env file with FOREWARN_IMAP_USER= and FOREWARN_IMAP_PASSWORD= lines.",
    )
    poll_interval: float = Field(
        default=30.0,
        gt=0,
        le=86400,
        description="Seconds between mailbox checks when the server has no IDLE.",
    )
    idle_renew: float = Field(
        default=1500.0,
        gt=0,
        le=86400,
        description="Seconds after which IDLE is re-issued (servers drop it after 30 min).",
    )
    sender: str = Field(
        default=DEFAULT_SENDER,
        description="Regular expression the From address of a reclaim email must match.",
    )
    subject: str = Field(
        default=DEFAULT_SUBJECT,
        description="Regular expression the Subject of a reclaim email must match (search).",
    )
    lead: float = Field(
        default=7200.0,
        ge=0,
        # The mail parser passes over any time more than 30 days after the Date; a larger lead
        # (1e15 s) made every start of the watcher fail with OverflowError.
        le=30 * 86400,
        description="Deadline after the email's Date when its text names no time (seconds or "
        "a duration such as 2h).",
    )
    max_age: float = Field(
        default=86400.0,
        gt=0,
        le=366 * 86400,
        description="A matching email dated longer ago than this is recorded as handled but "
        "raises nothing (an old reclaim of a droplet that had the same name).",
    )
    require_dkim: bool = Field(
        default=False,
        description="Require an Authentication-Results header with dkim=pass for the sender's "
        "domain (set it when your mail server adds one).",
    )
    retry_max: float = Field(
        default=300.0, gt=0, le=86400, description="Longest wait between reconnection attempts."
    )

    @field_validator("sender", "subject")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as error:
            raise ValueError(f"not a regular expression: {error}") from None
        return value

    @field_validator("imap_ca_file")
    @classmethod
    def _readable_ca_file(cls, value: Path | None) -> Path | None:
        # Read now, so a missing or bad file stops the agent at start (exit 2), as the
        # webhook's ca_file: read only when connecting, a mistyped path left the mailbox
        # unwatched while the agent ran on. A file gone later is a `tls` error naming it.
        if value is not None:
            from .imap import MailboxError, tls_context

            try:
                tls_context(value)
            except MailboxError as error:
                raise ValueError(str(error)) from None
        return value

    @field_validator("droplet_name")
    @classmethod
    def _blank_name_is_unset(cls, value: str | None) -> str | None:
        # Blank (`FOREWARN_DIGITALOCEAN_DROPLET_NAME=` from a compose file's unset `${VAR}`)
        # is unset, as azure.vm_name and kubernetes.node_name: read from droplet metadata. Kept
        # as "", the name was taken as known and nothing was read.
        return value or None

    @field_validator("imap_host")
    @classmethod
    def _host_not_blank(cls, value: str | None) -> str | None:
        # No host is named "": refused at start, not run with the mailbox unwatched (said
        # only in the watcher's health).
        if value == "":
            raise ValueError("empty: leave it unset when no mailbox is to be watched")
        if value is None or _is_address(value):
            return value
        # A mail client's server URL (`imaps://imap.example.com`) or a host with its port
        # (`imap.example.com:993`) did not resolve as a host name: the agent ran on with the
        # mailbox unwatched. Refused at start, saying what to write instead.
        scheme, _, rest = value.rpartition("://")
        written = urlsplit(f"//{rest}")
        try:
            port = written.port
        except ValueError:
            port = None
        if written.hostname and (scheme or port is not None or written.path not in ("", "/")):
            keys = f'imap_host = "{written.hostname}"'
            if port is not None:
                keys += f", imap_port = {port}"
            tls = {"imaps": "tls", "imap": "starttls"}.get(scheme.lower())
            if tls:
                keys += f', imap_tls = "{tls}"'
            raise ValueError(f"a host name, not a URL nor host:port: write {keys}")
        # An address in brackets, as a URL writes it (`[::1]`), is the address.
        if value.startswith("[") and value.endswith("]"):
            return value[1:-1]
        return value

    @field_validator("droplet_id")
    @classmethod
    def _numeric_id(cls, value: str | None) -> str | None:
        if value is not None and not (value.strip().isascii() and value.strip().isdigit()):
            raise ValueError("a droplet id is a number")
        return value.strip() if value is not None else None

    @model_validator(mode="after")
    def _plain_only_on_loopback(self) -> Settings:
        if self.imap_tls == "none" and self.imap_host and not is_loopback(self.imap_host):
            raise ValueError(
                f"imap_tls = none is allowed only for a loopback imap_host, not "
                f"{self.imap_host!r}: use tls or starttls"
            )
        return self

    def metadata_url(self) -> str:
        return (self.url or METADATA_URL).rstrip("/")

    def port(self) -> int:
        return self.imap_port or IMAP_PORTS[self.imap_tls]


__all__ = ["DEFAULT_SENDER", "DEFAULT_SUBJECT", "METADATA_URL", "Settings", "is_loopback"]
