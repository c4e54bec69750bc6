"""Where the API server is and how to authenticate: in-cluster by default, or a kubeconfig.

In-cluster: `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`, the service-account
token file (re-read on every request: projected tokens rotate) and its `ca.crt`.

Kubeconfig (`kubernetes.kubeconfig`; outside a pod also `$KUBECONFIG` or `~/.kube/config`,
as kubectl): read by the official Kubernetes client library (forewarn's `k8s` extra),
so exec credential plugins (EKS, GKE, AKS), OIDC, tokens, client certificates and CAs work
as they do for kubectl. The library is imported only on this path.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from forewarn.protocol.errors import ConfigError

from . import kubeconfig
from .nodes import HostBoot
from .settings import Settings

log = logging.getLogger("forewarn.providers.kubernetes")


class TokenFile:
    """A bearer token read from a file on every use (kubelet rotates projected tokens)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self) -> str:
        try:
            token = self.path.read_text().strip()
        except OSError as error:
            reason = error.strerror or type(error).__name__
            raise ConfigError(
                f"service-account token {self.path} is unreadable: {reason}"
            ) from None
        if not token:
            raise ConfigError(f"service-account token {self.path} is empty")
        return token


TokenSource = Callable[[], "str | None"]


@dataclass
class Cluster:
    """How to reach the API server."""

    server: str
    token: TokenSource
    verify: ssl.SSLContext | bool
    # For messages: "in-cluster", "kubernetes.url <url> (token from <file>)",
    # "kubeconfig <path> (context <name>)" or, for a URL over a kubeconfig,
    # "kubernetes.url <url> (credentials from kubeconfig <path>, context <name>)".
    source: str
    names_server: bool = False  # `source` names `server` (a URL given)

    @property
    def where(self) -> str:
        """`source` and the server, the server named once (the log's "watching node ... via")."""
        return self.source if self.names_server else f"{self.source} at {self.server}"


def node_name(settings: Settings, env: Mapping[str, str]) -> str:
    # Lower case: a Node's name is a DNS subdomain (lower case only), and the kubelet lowers
    # the hostname it registers; a name written as `hostname` prints it (`GPU-Box-1`) named a
    # node that cannot exist, and the watch found nothing, ever.
    name = (settings.node_name or env.get("NODE_NAME", "")).strip().lower()
    if not name:
        raise ConfigError(
            "no node to watch: set NODE_NAME from the downward API (fieldRef spec.nodeName) "
            "or kubernetes.node_name (FOREWARN_KUBERNETES_NODE_NAME)"
        )
    return name


HOST_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def host_boot_id(settings: Settings, env: Mapping[str, str]) -> str | None:
    """This host's boot id, to tell a shutdown reported before a reboot from a current one;
    None when there is nothing to compare (the agent may not run on the node)."""
    path = settings.boot_id_file
    if path is None:
        in_pod = settings.kubeconfig is None and settings.url is None
        if not (in_pod and env.get("KUBERNETES_SERVICE_HOST", "").strip()):
            return None
        path = HOST_BOOT_ID
    try:
        boot_id = path.read_text().strip().lower()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        if settings.boot_id_file is not None:
            raise ConfigError(f"kubernetes.boot_id_file {path} is unreadable: {reason}") from None
        # Without it every shutdown counts, as before: better a stale one than none.
        log.warning("this host's boot id %s is unreadable (%s): not compared", path, reason)
        return None
    if not boot_id:
        raise ConfigError(f"kubernetes.boot_id_file {path} is empty")
    return boot_id


HOST_STAT = Path("/proc/stat")


def host_boot_time(settings: Settings) -> datetime | None:
    """This host's boot time: the `btime` line (seconds since the epoch) of /proc/stat or
    of `boot_time_file`. None, with a warning, when the default is unreadable."""
    path = settings.boot_time_file or HOST_STAT
    try:
        text = path.read_text()
    except OSError as error:
        problem = f"is unreadable: {error.strerror or type(error).__name__}"
    else:
        problem = "has no `btime <seconds>` line"
        for line in text.splitlines():
            fields = line.split()
            if len(fields) == 2 and fields[0] == "btime" and fields[1].isascii():
                with contextlib.suppress(ValueError, OverflowError, OSError):
                    return datetime.fromtimestamp(int(fields[1]), timezone.utc)
    if settings.boot_time_file is not None:
        raise ConfigError(f"kubernetes.boot_time_file {path} {problem}")
    log.warning("this host's boot time %s %s: shutdowns not compared", path, problem)
    return None


def host_boot(settings: Settings, env: Mapping[str, str]) -> HostBoot | None:
    """This host's boot id and time, to tell a shutdown reported before a reboot from a
    current one; None when there is nothing to compare (then every shutdown counts)."""
    boot_id = host_boot_id(settings, env)
    if boot_id is None:
        return None
    # Read wherever the boot id is compared: a current shutdown is posted after the boot of
    # any running machine, so even another machine's boot time never makes it stale.
    booted_at = host_boot_time(settings)
    return None if booted_at is None else HostBoot(boot_id, booted_at)


def resolve(
    settings: Settings, env: Mapping[str, str] | None = None, *, credentials: bool = True
) -> Cluster:
    """The API server and how to authenticate. With `credentials` false a kubeconfig's exec
    plugin or auth provider is not run (see `kubeconfig.load`): a check, at start, of all
    that can be checked without it; the Cluster then has no token from them."""
    env = os.environ if env is None else env
    if settings.kubeconfig is not None:
        return from_kubeconfig(
            settings.kubeconfig,
            settings.context,
            settings.url,
            credentials=credentials,
            exec_timeout=settings.exec_timeout,
        )
    if settings.url is None and not env.get("KUBERNETES_SERVICE_HOST", "").strip():
        # Outside a pod, as kubectl does: $KUBECONFIG, else ~/.kube/config.
        paths = kubeconfig.default_paths(env)
        if paths is not None:
            return from_kubeconfig(
                paths,
                settings.context,
                None,
                credentials=credentials,
                exec_timeout=settings.exec_timeout,
            )
    return in_cluster(settings, env)


def _no_token() -> str | None:
    return None


def in_cluster(
    settings: Settings, env: Mapping[str, str], *, url_from: str = "kubernetes.url"
) -> Cluster:
    """The service account's API server and token, or `settings.url` (named `url_from` in
    messages: the setting, or the drill's flag) with the token file when it exists."""
    server = settings.url
    if server is None:
        host = env.get("KUBERNETES_SERVICE_HOST", "").strip()
        port = env.get("KUBERNETES_SERVICE_PORT", "").strip() or "443"
        if not host:
            home = env.get("HOME", "").strip()
            default = Path(home) / kubeconfig.DEFAULT_KUBECONFIG
            hint = kubeconfig.protect_home_hint([default], env) if home else ""
            raise ConfigError(
                "not in a pod: KUBERNETES_SERVICE_HOST is not set, and neither $KUBECONFIG "
                "nor ~/.kube/config names a kubeconfig; set kubernetes.kubeconfig or "
                f"kubernetes.url{hint}"
            )
        server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    server = server.rstrip("/")
    token_source: TokenSource = TokenFile(settings.token_file)
    # Where the server came from, for the log and the errors: a URL given outside a pod was
    # called "in-cluster" too, which sent an operator looking for a service account.
    source = "in-cluster" if settings.url is None else f"{url_from} {server}"
    if settings.url is not None and not settings.token_file.exists():
        # An explicit URL (kubectl proxy, a simulator) may need no token at all.
        token_source = _no_token
        source += f" (no token: {settings.token_file} does not exist)"
    else:
        if settings.url is not None:
            source += f" (token from {settings.token_file})"
        token_source()  # fail now, with the path in the message, if it is unreadable
    verify: ssl.SSLContext | bool = True
    if server.startswith("https://"):
        if settings.ca_file.exists():
            verify = _context(cafile=str(settings.ca_file), what=f"CA {settings.ca_file}")
        else:
            verify = _context(what="system CAs")
    return Cluster(server, token_source, verify, source, names_server=settings.url is not None)


class _ServerName(ssl.SSLContext):
    """Verifies the certificate against `server_name` (and sends it as SNI), whatever host
    the URL names: a kubeconfig's `tls-server-name`, as kubectl honours it (a server reached
    through a tunnel, a bastion's port, an IP address its certificate does not list)."""

    server_name: str | None = None

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return super().wrap_bio(incoming, outgoing, server_side, self.server_name, session)

    def wrap_socket(
        self,
        sock: socket.socket,
        server_side: bool = False,
        do_handshake_on_connect: bool = True,
        suppress_ragged_eofs: bool = True,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLSocket:
        return super().wrap_socket(
            sock,
            server_side,
            do_handshake_on_connect,
            suppress_ragged_eofs,
            self.server_name,
            session,
        )


def _context(
    cafile: str | None = None,
    cadata: str | None = None,
    *,
    what: str,
    server_name: str | None = None,
) -> ssl.SSLContext:
    try:
        if not server_name:
            return ssl.create_default_context(cafile=cafile, cadata=cadata)
        context = _ServerName(ssl.PROTOCOL_TLS_CLIENT)
        context.server_name = server_name
        if cafile or cadata:
            context.load_verify_locations(cafile=cafile, cadata=cadata)
        else:
            context.load_default_certs()
        return context
    except (OSError, ssl.SSLError, ValueError) as error:
        raise ConfigError(f"cannot load {what}: {error}") from None


def from_kubeconfig(
    path: Path | str,
    context: str | None,
    url: str | None,
    *,
    credentials: bool = True,
    exec_timeout: float | None = None,
    url_from: str = "kubernetes.url",
) -> Cluster:
    """The context's server and credentials, as the Kubernetes client library reads them
    (exec plugins, given `exec_timeout` seconds to answer, else kubeconfig.EXEC_TIMEOUT;
    several files in one `os.pathsep`-separated `path`); `url` overrides the server (named
    `url_from` in messages)."""
    with kubeconfig.exec_limit(exec_timeout):
        configuration, name = kubeconfig.load(str(path), context, credentials=credentials)
    source = f"kubeconfig {path} (context {name})"
    server = (url or configuration.host or "").rstrip("/")
    if url:
        # The server is the URL, only the credentials the kubeconfig's: named as the
        # kubeconfig alone, the log and a 401 sent the operator to the kubeconfig's cluster.
        source = f"{url_from} {server} (credentials from kubeconfig {path}, context {name})"
    if not server:
        raise ConfigError(f"{source}: the context's cluster has no server")
    verify: ssl.SSLContext | bool = True
    if server.startswith("https://"):
        if configuration.verify_ssl:
            verify = _context(
                cafile=configuration.ssl_ca_cert or None,
                what=f"{source} CA",
                server_name=configuration.tls_server_name or None,
            )
        else:
            # insecure-skip-tls-verify: as kubectl, accept the server's certificate unchecked
            # (left at True, a token-only kubeconfig failed verification on every request).
            verify = False
        if configuration.cert_file and configuration.key_file:
            if not isinstance(verify, ssl.SSLContext):
                # insecure-skip-tls-verify: still present the client certificate.
                verify = ssl.create_default_context()
                verify.check_hostname = False
                verify.verify_mode = ssl.CERT_NONE
            try:
                verify.load_cert_chain(configuration.cert_file, configuration.key_file)
            except (ssl.SSLError, OSError) as error:
                raise ConfigError(f"{source}: client certificate: {error}") from None

    def token() -> str | None:
        # In the thread that runs it (off_loop's), where the plugin is started.
        with kubeconfig.exec_limit(exec_timeout):
            return kubeconfig.bearer(configuration)

    token()  # fail now, naming the kubeconfig, if the credentials cannot be had
    return Cluster(server, token, verify, source, names_server=bool(url))


__all__ = [
    "Cluster",
    "ConfigError",
    "TokenFile",
    "TokenSource",
    "from_kubeconfig",
    "host_boot",
    "host_boot_id",
    "host_boot_time",
    "in_cluster",
    "node_name",
    "resolve",
]
