"""Which HTTP proxy the webhook goes through: `webhook.proxy`, else the environment's.

The agent's other HTTP clients (the metadata services, the Kubernetes API) never take a proxy:
they talk to the node or the cluster. The webhook talks to the internet, which on many
clusters is reachable only through a proxy named in `HTTPS_PROXY`; it read no proxy at all,
and every notice failed to reach Slack there. httpx's own `trust_env` would also take
`SSL_CERT_FILE` and `.netrc`, which the documentation promises the agent ignores, so the
variables are read here, as curl reads them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from forewarn.protocol.errors import UsageError

# The refusals, fixed texts: a proxy URL may hold a password, and is never echoed.
SOCKS_REFUSED = "a SOCKS proxy is not supported for the webhook; name an http:// proxy"
NOT_A_PROXY = (
    "not a proxy URL the webhook can use (expected http://host:port, with user:password@ if "
    "the proxy asks for one, a port from 1 to 65535 and no spaces)"
)


class ProxyError(UsageError):
    """A proxy setting the webhook cannot use; names the setting, never the value (it may
    hold a password)."""


@dataclass(frozen=True)
class Proxy:
    url: str
    source: str  # `webhook.proxy`, or the variable it came from

    @property
    def shown(self) -> str:
        """Where the proxy is, as logs may name it: scheme, host and port, no password."""
        parts = urlsplit(self.url)
        host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
        return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}"


def _variable(environ: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """(the variable's name as set, its value) of `name` in lower case, else in upper case;
    blank is unset. Lower case first, as curl and Python's urllib read them."""
    for spelled in (name.lower(), name.upper()):
        value = environ.get(spelled, "").strip()
        if value:
            return spelled, value
    return None


def webhook_proxy(configured: str | None, url: str, environ: Mapping[str, str]) -> Proxy | None:
    """The proxy for posting to `url`: `configured` (`webhook.proxy`) when set, else
    `https_proxy` for an https receiver (`http_proxy` for http), else `all_proxy`, each in
    either case, unless `no_proxy` names the receiver's host. ProxyError for one that cannot
    be used."""
    if configured is not None and configured.strip():
        return Proxy(_named(configured.strip(), "webhook.proxy"), "webhook.proxy")
    parts = urlsplit(url)
    found = _variable(environ, f"{parts.scheme}_proxy") or _variable(environ, "all_proxy")
    if found is None:
        return None
    name, value = found
    no_proxy = _variable(environ, "no_proxy")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if no_proxy is not None and _bypassed(parts.hostname or "", port, no_proxy[1]):
        return None
    return Proxy(_named(value, name), name)


def _bypassed(host: str, port: int, no_proxy: str) -> bool:
    """Whether `no_proxy` names `host` (a lower-case host name or address, brackets off) at
    `port`: `*`, or a comma-separated entry that is the host or a domain it is under (a leading
    dot optional), with an optional `:port` that must then match, or a CIDR block holding the
    host's address (`10.0.0.0/8`), as curl reads it. Written
    here: urllib's own reader is undocumented (`proxy_bypass_environment`)."""
    for entry in no_proxy.split(","):
        entry = entry.strip().lower()
        if entry == "*":
            return True
        if "/" in entry:
            # A CIDR block (`10.0.0.0/8`, `fd00::/8`), as a cluster names its pod and service
            # networks: it matches a receiver at an address in it, never a name.
            if _in_network(host, entry.replace("[", "").replace("]", "")):
                return True
            continue
        if entry.startswith("["):  # [::1] or [::1]:8080
            name, _, rest = entry[1:].partition("]")
            wanted = rest.removeprefix(":")
        elif entry.count(":") == 1:  # host:port (an IPv6 address has more colons)
            name, _, wanted = entry.partition(":")
        else:
            name, wanted = entry, ""
        if wanted and wanted != str(port):
            continue
        name = name.lstrip(".")
        if name and (host == name or host.endswith("." + name)):
            return True
    return False


def _in_network(host: str, block: str) -> bool:
    """Whether `host` is an IP address within the CIDR `block`; False for a name, or a block
    that is none (`10.0.0.0/33`)."""
    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network(block, strict=False)
    except ValueError:
        return False


def _named(value: str, name: str) -> str:
    try:
        return proxy_url(value)
    except ProxyError as error:
        raise ProxyError(f"{name}: {error}") from None


def proxy_url(value: str) -> str:
    """`value` as the proxy URL httpx takes; ProxyError saying why it cannot be one."""
    import httpx  # here: every command loads the settings that call this

    # A bare `host:port`, as people write it in HTTPS_PROXY, is an http proxy to curl too.
    candidate = value if "://" in value else f"http://{value}"
    if candidate.lower().startswith("socks"):
        raise ProxyError(SOCKS_REFUSED)
    try:
        parts = urlsplit(candidate)
        usable = (
            parts.scheme in ("http", "https")
            and bool(parts.hostname)
            and parts.port != 0
            and all(char.isprintable() and not char.isspace() for char in candidate)
        )
        # As httpx reads it: a host urlsplit takes (`¡`, a malformed `xn--` label) raised in
        # the webhook's task, which then ended, and no notice was delivered.
        httpx.Proxy(candidate).url.host  # noqa: B018
    except (ValueError, httpx.InvalidURL):  # `[`, a port past 65535
        usable = False
    if not usable:
        raise ProxyError(NOT_A_PROXY)
    return candidate


__all__ = ["NOT_A_PROXY", "SOCKS_REFUSED", "Proxy", "ProxyError", "proxy_url", "webhook_proxy"]
