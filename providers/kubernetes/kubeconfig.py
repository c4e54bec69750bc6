"""Kubeconfigs through the official Kubernetes client library (forewarn's `k8s` extra).

The library reads what kubectl reads: YAML or JSON, several files in `KUBECONFIG` merged,
`exec` credential plugins (`aws eks get-token`, `gke-gcloud-auth-plugin`, `kubelogin`) run
again when their token expires, OIDC, client certificates, CAs as files or `-data`. It is
imported here only, and only when a kubeconfig is used: in a pod the agent needs neither it
nor PyYAML.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import types
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from forewarn.protocol.errors import ConfigError

from .settings import DEFAULT_EXEC_TIMEOUT

if TYPE_CHECKING:
    from kubernetes.client import Configuration


def install_hint() -> str:
    from forewarn.protocol.install import extra_hint

    return f"install the Kubernetes client library: {extra_hint('k8s')}"


DEFAULT_KUBECONFIG = Path(".kube") / "config"

# What systemd's ProtectHome= hides from a service (forewarn-agent.service sets
# ProtectHome=yes): a kubeconfig there is missing to the agent alone, while the same command
# in a shell finds it.
PROTECTED_HOMES = (Path("/home"), Path("/root"), Path("/run/user"))


def _hidden_by_unit(paths: list[Path], env: Mapping[str, str]) -> str:
    """Why the first of `paths` in a home directory may be unseen: the agent runs as a
    systemd service (systemd sets INVOCATION_ID), whose ProtectHome= hides home directories.
    Empty when neither holds."""
    if not env.get("INVOCATION_ID"):
        return ""
    hidden = [path for path in paths if any(path.is_relative_to(home) for home in PROTECTED_HOMES)]
    if not hidden:
        return ""
    return (
        f"; {hidden[0]} may be hidden, not missing: the agent runs as a systemd service, and "
        "a unit's ProtectHome= (forewarn-agent.service sets ProtectHome=yes) hides /home, "
        "/root and /run/user from it."
    )


def protect_home_hint(paths: list[Path], env: Mapping[str, str]) -> str:
    """Why a kubeconfig in a home directory may be unseen, and where to put it instead."""
    hidden = _hidden_by_unit(paths, env)
    if not hidden:
        return ""
    return (
        f"{hidden} Copy the kubeconfig to /etc/forewarn/kubeconfig, readable by group "
        "forewarn (mode 0640), and set kubernetes.kubeconfig (FOREWARN_KUBERNETES_KUBECONFIG) "
        "to that path"
    )


def plugin_home_hint(command: str, env: Mapping[str, str]) -> str:
    """Why an exec plugin installed in a home directory (a cloud SDK unpacked in ~, `pip
    install --user`) does not start under the unit, and where to put it instead: the same
    command runs from a shell, and the error alone said "No such file or directory"."""
    hidden = _hidden_by_unit([Path(command)], env) if os.path.isabs(command) else ""
    if not hidden:
        return ""
    return (
        f"{hidden} Install the plugin outside them (e.g. in /usr/local/bin), readable and "
        "executable by user forewarn, and name that path as the kubeconfig's exec command"
    )


def _visible(path: Path) -> bool | None:
    """Whether `path` is a file; None when this user may not look (a directory on the way
    that it cannot enter, as ProtectHome=yes leaves /home)."""
    try:
        return path.is_file()
    except PermissionError:
        return None


def default_paths(env: Mapping[str, str]) -> str | None:
    """What kubectl reads when given no file: every file of `$KUBECONFIG` (merged), else
    `~/.kube/config` when it exists; None when neither."""
    listed = env.get("KUBECONFIG", "").strip()
    if listed:
        return listed
    home = env.get("HOME", "").strip()
    if home and _visible(Path(home) / DEFAULT_KUBECONFIG):
        return str(Path(home) / DEFAULT_KUBECONFIG)
    return None


class _Collect(logging.Handler):
    """The library logs (instead of raising) a failed exec plugin; keep those lines."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if f"{os.sep}kubernetes{os.sep}" in record.pathname:
            self.messages.append(record.getMessage())


# Seconds an exec plugin has to print its credential. The library waits on it for ever (as
# kubectl does, where a person can press Ctrl-C): a plugin that hung (`aws eks get-token` with
# no route to STS, a login waiting for a browser) held the watcher without an error, and the
# agent at start when `kubernetes.events` or `cordon` is on. A cloud CLI answers in seconds.
# The agent's own calls use `kubernetes.exec_timeout` (`exec_limit`); this is for the rest.
EXEC_TIMEOUT = DEFAULT_EXEC_TIMEOUT


@contextmanager
def exec_limit(seconds: float | None) -> Iterator[None]:
    """Exec plugins this thread starts meanwhile have `seconds` to answer (None: EXEC_TIMEOUT).
    Per thread: the library starts the plugin in the thread that asks for the credential."""
    previous = getattr(_current, "limit", None)
    _current.limit = seconds
    try:
        yield
    finally:
        _current.limit = previous


def _cancelled() -> asyncio.CancelledError:
    """A plugin stopped because its caller was cancelled: a CancelledError (a BaseException,
    so no new class outside the ForewarnError root) passes the library's `except Exception`,
    which would log it as an ERROR of a stopping agent."""
    return asyncio.CancelledError("the exec plugin's caller was cancelled")


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up in the parent: the child must not load anything between fork
    and exec. None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return function


def _killed_with(parent: int) -> Callable[[], None] | None:
    """A `preexec_fn` that has the kernel SIGKILL the plugin when the agent dies: a SIGKILLed
    agent (the OOM killer, a pod's grace period ended) cannot stop it, and it was left running
    (a login waiting for a browser, for ever). The signal follows the thread that forked, not
    the process: that thread is the one waiting for the plugin in communicate() (a worker of
    off_loop, the drill's main thread), so it ends only after the plugin, or with the process.
    Only the plugin is covered, not what it starts itself. Between fork and exec it makes
    system calls only, taking no lock another thread could have held at the fork (what makes
    a preexec_fn unsafe in a process with threads)."""
    prctl = _prctl()
    if prctl is None:
        return None
    kill = ctypes.c_ulong(signal.SIGKILL)  # made here: the child only makes the call

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != parent:  # the agent died before the prctl: nothing would signal
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class _BoundedPopen(subprocess.Popen[str]):
    """The library's plugin process, stopped when it has not answered in EXEC_TIMEOUT, and
    killed when the agent dies."""

    def __init__(self, args: Any, **kwargs: Any) -> None:
        # Not interactive (no terminal to share): in a session of its own, so that stopping
        # it stops what it started too, whose open pipe would otherwise hold the read.
        self._group = kwargs.get("stdin") is None
        self._command = str(args[0] if isinstance(args, list) and args else args)
        self.cancelled = False
        preexec = _killed_with(os.getpid())
        try:
            super().__init__(args, start_new_session=self._group, preexec_fn=preexec, **kwargs)
        except OSError as error:
            # The library logs str(error) and the agent says that line: add why it may be.
            hint = plugin_home_hint(self._command, os.environ)
            if not hint:
                raise
            raise type(error)(f"{error}{hint}") from None
        owner: _Owner | None = getattr(_current, "owner", None)
        if owner is not None:
            owner.add(self)

    def communicate(self, input: Any = None, timeout: float | None = None) -> Any:
        limit = timeout if timeout is not None else getattr(_current, "limit", None)
        limit = EXEC_TIMEOUT if limit is None else limit
        try:
            answer = super().communicate(input, limit)
        except subprocess.TimeoutExpired:
            self._stop()
            if self.cancelled:
                raise _cancelled() from None
            from kubernetes.config.config_exception import ConfigException

            raise ConfigException(
                f"exec: {self._command} did not answer within {limit:g}s; it was stopped"
            ) from None
        if self.cancelled:
            raise _cancelled()
        return answer

    def kill_all(self) -> None:
        """Kill it, and what it started when it has a session of its own."""
        try:
            if self._group:
                os.killpg(self.pid, signal.SIGKILL)
            else:
                self.kill()
        except ProcessLookupError:
            pass

    def _stop(self) -> None:
        self.kill_all()
        for pipe in (self.stdout, self.stderr):
            if pipe is not None:
                pipe.close()
        self.wait()


class _Owner:
    """The plugins one `off_loop` call started, to stop when that call is cancelled."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.processes: list[_BoundedPopen] = []
        self.cancelled = False

    def add(self, process: _BoundedPopen) -> None:
        with self.lock:
            self.processes.append(process)
            cancelled = self.cancelled
        if cancelled:
            process.cancelled = True
            process.kill_all()

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True
            processes = list(self.processes)
        for process in processes:
            if process.poll() is None:
                process.cancelled = True
                process.kill_all()


_current = threading.local()
T = TypeVar("T")


async def off_loop(function: Callable[[], T]) -> T:
    """`function()` in a thread, off the event loop: it may run an exec plugin (a cloud CLI,
    seconds). When the caller is cancelled (the agent stopping), the plugin is stopped too:
    asyncio waits for its threads on exit, so one left running held a stopped agent for up
    to EXEC_TIMEOUT."""
    owner = _Owner()

    def run() -> T:
        _current.owner = owner
        try:
            return function()
        finally:
            _current.owner = None

    try:
        return await asyncio.to_thread(run)
    except asyncio.CancelledError:
        owner.cancel()
        raise


def _bound_exec_plugins() -> None:
    """Have the library start exec plugins as _BoundedPopen (its module alone)."""
    from kubernetes.config import exec_provider

    if getattr(exec_provider.subprocess, "Popen", None) is not _BoundedPopen:
        shim = types.SimpleNamespace(**vars(subprocess))
        shim.Popen = _BoundedPopen
        exec_provider.subprocess = shim


@contextmanager
def _library_errors() -> Iterator[_Collect]:
    _bound_exec_plugins()
    collect = _Collect()
    root = logging.getLogger()
    root.addHandler(collect)
    try:
        yield collect
    finally:
        root.removeHandler(collect)


def _runs_something(loader: Any) -> bool:
    """Whether the context's user gets its credentials by running something: an exec plugin
    (a cloud CLI, seconds, failing while it is not logged in) or an auth provider (OIDC or
    Google, a request to a token endpoint). Tokens, token files and certificates are read."""
    user = loader._user
    return user is not None and ("exec" in user or "auth-provider" in user)


def _proxy_refused(loader: Any, paths: str, name: str) -> ConfigError | None:
    """kubectl sends every request of a cluster with `proxy-url` through that proxy; the
    client library ignores the key and forewarn has no proxy support, so such a kubeconfig
    would be used by connecting to the server directly: past the proxy its user relies on
    (the server often not reachable otherwise, or reachable but not meant to be)."""
    if "proxy-url" not in loader._cluster:
        return None
    cluster = loader._current_context["context"]["cluster"]
    return ConfigError(
        f"kubeconfig {paths} (context {name}): cluster {cluster!r} has proxy-url, which "
        "forewarn does not support (it connects to the API server directly, never through "
        "a proxy); use a kubeconfig or context whose cluster is reached without one"
    )


def load(paths: str, context: str | None, *, credentials: bool = True) -> tuple[Configuration, str]:
    """A client `Configuration` for `context` (default: the current one) of the kubeconfig
    file(s) `paths` (`os.pathsep`-separated), and the context's name. Raises ConfigError
    with the file and what was wrong.

    With `credentials` false, what can be checked cheaply is (the files, the context, the
    server, its CA, client certificates, a token or token file) but an exec plugin or an
    auth provider is not run: the configuration then has no credentials from them."""
    try:
        from kubernetes.client import Configuration
        from kubernetes.config import kube_config
        from kubernetes.config.config_exception import ConfigException
        from yaml import YAMLError
    except ImportError:
        raise ConfigError(f"kubeconfig {paths}: to read it, {install_hint()}") from None
    files = [part for part in paths.split(os.pathsep) if part]
    seen = {part: _visible(Path(part).expanduser()) for part in files}
    existing = [part for part, visible in seen.items() if visible]
    if not existing:
        expanded = [Path(part).expanduser().absolute() for part in files]
        # `~` is the agent's user's home, not the operator's: say which file was looked for.
        shown = os.pathsep.join(map(str, expanded))
        where = paths if shown == paths else f"{paths} ({shown})"
        why = "permission denied" if None in seen.values() else "no such file"
        raise ConfigError(f"kubeconfig {where}: {why}{protect_home_hint(expanded, os.environ)}")
    joined = os.pathsep.join(existing)
    configuration = Configuration()
    refused: ConfigError | None = None
    name = context or ""
    try:
        with _library_errors() as errors:
            # What `load_kube_config` does, in its steps (private, hence the pinned versions
            # of the `k8s` extra), so that the proxy is refused before a plugin runs and the
            # plugin can be left for later.
            loader = kube_config._get_kube_config_loader(
                filename=joined, active_context=context, persist_config=False
            )
            current = loader.current_context
            name = context or str(current.get("name") if isinstance(current, dict) else "")
            refused = _proxy_refused(loader, paths, name)
            if refused is None:
                if credentials or not _runs_something(loader):
                    loader.load_and_set(configuration)
                else:
                    loader._load_cluster_info()
                    loader._set_config(configuration)
    except ConfigException as error:
        raise ConfigError(f"kubeconfig {paths}: {error}") from None
    except (OSError, ValueError, TypeError, KeyError, AttributeError, YAMLError) as error:
        # A file that is no kubeconfig (a list, a scalar, bad YAML) fails inside the loader.
        raise ConfigError(f"kubeconfig {paths}: not a usable kubeconfig ({error})") from None
    except Exception as error:  # auth providers raise their own SDKs' errors (google-auth)
        raise ConfigError(
            f"kubeconfig {paths}: its credentials failed: {type(error).__name__}: {error}"
        ) from None
    if refused is not None:
        raise refused
    if errors.messages:
        raise ConfigError(
            f"kubeconfig {paths} (context {name}): {'; '.join(errors.messages)}"
        ) from None
    return configuration, name


def bearer(configuration: Configuration) -> str | None:
    """The bearer token now (an exec plugin whose token expired runs again first)."""
    hook = configuration.refresh_api_key_hook
    if hook is not None:
        with _library_errors() as errors:
            hook(configuration)
        if errors.messages:
            raise ConfigError(f"kubeconfig credentials: {'; '.join(errors.messages)}")
    value: Any = configuration.api_key.get("BearerToken")
    if not value:
        return None
    scheme, _, token = str(value).partition(" ")
    if scheme != "Bearer":
        raise ConfigError(
            "kubeconfig user has a username and password: Kubernetes removed basic "
            "authentication in 1.19; give it a token, an exec plugin or a client certificate"
        )
    # kubectl trims a tokenFile's newline; the library does not.
    return token.strip() or None


__all__ = [
    "DEFAULT_KUBECONFIG",
    "PROTECTED_HOMES",
    "bearer",
    "default_paths",
    "exec_limit",
    "install_hint",
    "load",
    "off_loop",
    "plugin_home_hint",
    "protect_home_hint",
]
