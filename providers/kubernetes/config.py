"""Where the API server is and how to authenticate: in-cluster by default, or a kubeconfig.

In-cluster: `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`, the service-account
token file (re-read on every request: projected tokens rotate) and its `ca.crt`.

Kubeconfig: JSON is always understood (`kubectl config view --raw --flatten -o json`); YAML
is read when PyYAML is installed (`pip install 'forewarn[k8s]'`). Tokens (`token`,
`tokenFile`), client certificates and CAs (file or `-data`) are supported; exec plugins and
auth providers are not, and say so.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forewarn.protocol.errors import ConfigError

from .settings import Settings


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
    source: str  # for messages: "in-cluster" or "kubeconfig <path> (context <name>)"


def node_name(settings: Settings, env: Mapping[str, str]) -> str:
    name = settings.node_name or env.get("NODE_NAME", "").strip()
    if not name:
        raise ConfigError(
            "no node to watch: set NODE_NAME from the downward API (fieldRef spec.nodeName) "
            "or kubernetes.node_name (FOREWARN_KUBERNETES_NODE_NAME)"
        )
    return name


def resolve(settings: Settings, env: Mapping[str, str] | None = None) -> Cluster:
    env = os.environ if env is None else env
    if settings.kubeconfig is not None:
        return from_kubeconfig(settings.kubeconfig, settings.context, settings.url)
    return in_cluster(settings, env)


def _no_token() -> str | None:
    return None


def in_cluster(settings: Settings, env: Mapping[str, str]) -> Cluster:
    server = settings.url
    if server is None:
        host = env.get("KUBERNETES_SERVICE_HOST", "").strip()
        port = env.get("KUBERNETES_SERVICE_PORT", "").strip() or "443"
        if not host:
            raise ConfigError(
                "not in a pod: KUBERNETES_SERVICE_HOST is not set; set kubernetes.kubeconfig "
                "or kubernetes.url"
            )
        server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    server = server.rstrip("/")
    token_source: TokenSource = TokenFile(settings.token_file)
    if settings.url is not None and not settings.token_file.exists():
        # An explicit URL (kubectl proxy, a simulator) may need no token at all.
        token_source = _no_token
    else:
        token_source()  # fail now, with the path in the message, if it is unreadable
    verify: ssl.SSLContext | bool = True
    if server.startswith("https://"):
        if settings.ca_file.exists():
            verify = _context(cafile=str(settings.ca_file), what=f"CA {settings.ca_file}")
        else:
            verify = _context(what="system CAs")
    return Cluster(server, token_source, verify, "in-cluster")


def _context(cafile: str | None = None, cadata: str | None = None, *, what: str) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=cafile, cadata=cadata)
    except (OSError, ssl.SSLError, ValueError) as error:
        raise ConfigError(f"cannot load {what}: {error}") from None


def load_kubeconfig(path: Path) -> dict[str, Any]:
    """A kubeconfig as a dict: JSON always, YAML when PyYAML is importable."""
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"kubeconfig {path}: {error.strerror or error}") from None
    try:
        data = json.loads(text)
    except ValueError:
        try:
            import yaml
        except ImportError:
            raise ConfigError(
                f"kubeconfig {path} is not JSON and PyYAML is not installed: install "
                "'forewarn[k8s]', or convert it with "
                "`kubectl config view --raw --flatten -o json`"
            ) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ConfigError(f"kubeconfig {path}: not valid YAML ({error})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"kubeconfig {path}: not a mapping")
    return data


def _named(config: dict[str, Any], section: str, name: str, path: Path) -> dict[str, Any]:
    for entry in config.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(section[:-1])
            if isinstance(body, dict):
                return body
            raise ConfigError(f"kubeconfig {path}: {section} entry {name!r} has no body")
    raise ConfigError(f"kubeconfig {path}: no {section[:-1]} named {name!r}")


def from_kubeconfig(path: Path, context: str | None, url: str | None) -> Cluster:
    config = load_kubeconfig(path)
    base = path.parent
    name = context or config.get("current-context")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"kubeconfig {path}: no current-context; set kubernetes.context")
    ctx = _named(config, "contexts", name, path)
    cluster = _named(config, "clusters", str(ctx.get("cluster")), path)
    user = _named(config, "users", str(ctx.get("user")), path) if ctx.get("user") else {}
    server = url or cluster.get("server")
    if not isinstance(server, str) or not server:
        raise ConfigError(f"kubeconfig {path}: cluster of context {name!r} has no server")
    for unsupported in ("exec", "auth-provider"):
        if unsupported in user:
            raise ConfigError(
                f"kubeconfig {path}: user of context {name!r} uses {unsupported}, which "
                "forewarn does not run; give it a token, tokenFile or client certificate"
            )

    verify: ssl.SSLContext | bool = True
    if server.startswith("https://"):
        if cluster.get("insecure-skip-tls-verify"):
            verify = False
        else:
            cadata = _pem(cluster, "certificate-authority", base, path)
            verify = _context(cadata=cadata, what=f"kubeconfig {path} CA") if cadata else True
            if verify is True:
                verify = _context(what="system CAs")
        cert = _pem(user, "client-certificate", base, path)
        key = _pem(user, "client-key", base, path)
        if cert and key:
            if not isinstance(verify, ssl.SSLContext):
                verify = ssl.create_default_context()
                verify.check_hostname = False
                verify.verify_mode = ssl.CERT_NONE
            _load_client_cert(verify, cert, key, path)

    token_source: TokenSource = _no_token
    if isinstance(user.get("tokenFile"), str):
        token_source = TokenFile(_relative(user["tokenFile"], base))
        token_source()
    elif isinstance(user.get("token"), str) and user["token"]:
        static = user["token"]
        token_source = lambda: static  # noqa: E731
    return Cluster(server.rstrip("/"), token_source, verify, f"kubeconfig {path} (context {name})")


def _relative(value: str, base: Path) -> Path:
    candidate = Path(value).expanduser()
    return candidate if candidate.is_absolute() else base / candidate


def _pem(section: dict[str, Any], key: str, base: Path, path: Path) -> str | None:
    data = section.get(f"{key}-data")
    if isinstance(data, str) and data:
        try:
            return base64.b64decode(data).decode()
        except (ValueError, UnicodeDecodeError):
            raise ConfigError(f"kubeconfig {path}: {key}-data is not base64 PEM") from None
    file = section.get(key)
    if isinstance(file, str) and file:
        try:
            return _relative(file, base).read_text()
        except OSError as error:
            raise ConfigError(f"kubeconfig {path}: {key} {file}: {error.strerror}") from None
    return None


def _load_client_cert(context: ssl.SSLContext, cert: str, key: str, path: Path) -> None:
    # load_cert_chain reads only files: write them to a private directory just long enough.
    with tempfile.TemporaryDirectory(prefix="forewarn-k8s-") as directory:
        cert_path = Path(directory) / "client.crt"
        key_path = Path(directory) / "client.key"
        for target, text in ((cert_path, cert), (key_path, key)):
            descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as handle:
                handle.write(text)
        try:
            context.load_cert_chain(str(cert_path), str(key_path))
        except (ssl.SSLError, OSError) as error:
            raise ConfigError(f"kubeconfig {path}: client certificate: {error}") from None


__all__ = [
    "Cluster",
    "ConfigError",
    "TokenFile",
    "TokenSource",
    "from_kubeconfig",
    "in_cluster",
    "load_kubeconfig",
    "node_name",
    "resolve",
]
