"""`forewarn render cloud-init`: user data that installs forewarn and starts it with a job.

The template and the systemd units ship in the package (`files/` is packaging/ of the source
tree), so the installed command renders exactly what the repository holds. The units are
copied unchanged, except the training unit's user, directory and command. forewarn is not on
a package index, so the install source is one the user names (`--source`: a wheel or sdist
URL, or a git URL); a template that could not install is never rendered. Bad input exits 2
with a message naming the option.
"""

from __future__ import annotations

import argparse
import json
import posixpath
import re
import shlex
import sys
import unicodedata
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from forewarn.protocol.errors import UsageError

if TYPE_CHECKING:
    from forewarn.providers.kubernetes.settings import Settings as KubernetesSettings

    from ..config import Settings

FILES = Path(__file__).resolve().parent / "files"
TEMPLATE = FILES / "cloud-init" / "user-data.yaml.tmpl"
SYSTEMD = FILES / "systemd"

_BLOCK = re.compile(r"^(?P<indent>[ ]*)@@(?P<name>\w+)@@$", re.MULTILINE)
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}\Z")
# A unit systemctl can enable and start: a plain name or a template's instance (foo@bar), never
# a template itself (foo@), never a name systemctl would read as an option (-x).
_UNIT = re.compile(r"^(?!-)[A-Za-z0-9:_.-]+(@[A-Za-z0-9:_.-]+)?\.service\Z")


# What pip on a fresh machine can fetch: an archive over HTTP(S), or a git repository. pip
# fetches the URL whole, query string (`?job=build`) included, and names the file by its path.
_ARCHIVE_URL = re.compile(r"^https?://[^\s/?#]+/[^\s?#]*\.(whl|tar\.gz|zip)(\?[^\s#]*)?(#\S*)?\Z")
_GIT_URL = re.compile(r"^git\+(https|ssh|http)://\S+\Z")
# pip takes an archive's name from the last part of the URL's path and refuses a wheel whose
# name is not NAME-VERSION(-BUILD)-PY-ABI-PLATFORM.whl, or whose NAME is not forewarn's.
_WHEEL_NAME = re.compile(r"^forewarn-[^-]+(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl\Z", re.IGNORECASE)
_SDIST_NAME = re.compile(r"^forewarn-[^-]+\.(tar\.gz|zip)\Z", re.IGNORECASE)
_EXTRA = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")
# A word systemd would split, unescape or read as a separator unless it is quoted.
_QUOTE_FOR_SYSTEMD = re.compile(r"[\s\"'\\;]")
# Words that mean something only to a shell, which ExecStart= is not.
_SHELL_OPERATORS = frozenset({";", "&&", "||", "|", "&", ">", ">>", "<", "2>", "2>&1"})


# The first step of runcmd: the Python the venv is made with. On an image whose python3 is
# older (Ubuntu 20.04, Debian 11, RHEL 9, Amazon Linux 2023) the install failed deep in pip,
# 'requires a different Python' or 'No matching distribution', naming no image that works.
# Indexes only, no f-string: it must run on any python3.
PYTHON_CHECK = (
    "import sys; v = sys.version_info; sys.exit(0 if v[:2] >= (3, 10) else "
    "'forewarn needs Python 3.10 or newer; python3 here is %d.%d.%d (%s): use an image whose "
    "python3 is 3.10 or newer (Ubuntu 22.04, Debian 12 or later)' "
    "% (v[0], v[1], v[2], sys.executable))"
)
# The last step: cloud-init runs runcmd as a /bin/sh script without -e, whose status is its
# last command's, so a failed install left `cloud-init status` at done while the job trained
# with no agent to warn it.
AGENT_CHECK = (
    "systemctl is-active --quiet forewarn-agent.service || { echo 'forewarn: "
    "forewarn-agent.service is not running: see /var/log/cloud-init-output.log and "
    "journalctl -u forewarn-agent.service' >&2; exit 1; }"
)


# `install -d -o USER` hands an existing directory to USER (mode 0755, through a symlink too):
# a training directory of `/`, `/home` or `/opt/forewarn` gave the training user the root file
# system, every home, or the programs root runs (`forewarn` itself); `/var/tmp` lost its
# sticky bit, `/var/lib` and `/var/log` went to the job's user; `/var/run` is `/run`.
_SYSTEM_TOP = re.compile(
    r"^/(bin|boot|dev|etc|home|lib\w*|media|mnt|opt|proc|root|run|sbin|snap|srv|sys|tmp|usr"
    r"|var(/[^/]+)?)?\Z"
)
_SYSTEM_TREE = re.compile(
    r"^/(bin|boot|dev|etc|lib\w*|proc|root|run|sbin|sys|usr|opt/forewarn|var/lib/forewarn"
    r"|var/run|var/lock)/"
)
# A home directory: another user's, handed to the training user, locked its owner out of ssh
# (sshd refuses keys in a home its owner does not own); a directory inside one the job could
# not enter where homes are 0750 (Ubuntu's): it failed at once (200/CHDIR).
_HOME = re.compile(r"^/home/(?P<user>[^/]+)(?P<inside>/.*)?\Z|^/(?P<root>root)/")


def _system_dir(path: str) -> bool:
    """`/`, a top-level system directory, or a path inside one that only root should own."""
    return bool(_SYSTEM_TOP.match(path) or _SYSTEM_TREE.match(path + "/"))


class RenderError(UsageError):
    """Input that cannot be rendered; the text names the option."""


def one_line(value: str, what: str) -> str:
    """`value` when it is one line of printable text, else RenderError naming `what`.

    Not only \\n and \\r end a line: str.splitlines (which lays out the file blocks) also
    breaks at U+000B, U+000C, U+001C-U+001E, U+0085, U+2028 and U+2029, YAML at the last three,
    and YAML refuses other control characters. A value holding one split an ExecStart= in two
    (the second half a unit line of its own, `User=root` included), cut an env line, or broke
    the document.
    """
    for char in value:
        category = unicodedata.category(char)
        if (char != "\t" and category in ("Cc", "Cs", "Zl", "Zp")) or char in "\ufffe\uffff":
            raise RenderError(
                f"{what}: a value cannot span lines or hold control characters "
                f"(found U+{ord(char):04X})"
            )
    return value


def _extras() -> set[str] | None:
    """The extras this forewarn declares (normalized), or None when it is not installed."""
    try:
        declared = metadata.metadata("forewarn").get_all("Provides-Extra") or []
    except metadata.PackageNotFoundError:
        return None
    return {re.sub(r"[-_.]+", "-", name.lower()) for name in declared}


def requirement(source: str, extras: Sequence[str]) -> str:
    """The pip requirement for forewarn from `source` with `extras`, or RenderError."""
    source = one_line(source.strip(), "--source")
    if not (_ARCHIVE_URL.match(source) or _GIT_URL.match(source)):
        raise RenderError(
            f"--source {source!r}: the new machine cannot install from it; give a URL of a "
            "wheel or sdist (https://.../forewarn-0.1.0-py3-none-any.whl, built with "
            "`python -m build`) or a git URL (git+https://host/repo.git@TAG)"
        )
    if _ARCHIVE_URL.match(source):
        name = unquote(urlsplit(source).path.rsplit("/", 1)[-1])
        if not (_WHEEL_NAME.match(name) or _SDIST_NAME.match(name)):
            raise RenderError(
                f"--source {source!r}: pip cannot install {name!r}: a release's file keeps "
                "the name `python -m build` gave it (forewarn-VERSION-py3-none-any.whl or "
                "forewarn-VERSION.tar.gz)"
            )
    known = _extras()
    for extra in extras:
        if not _EXTRA.match(extra):
            raise RenderError(f"--extra {extra!r}: not an extra name")
        # pip installs without an extra the project lacks, saying so only in its log.
        if known is not None and re.sub(r"[-_.]+", "-", extra.lower()) not in known:
            raise RenderError(
                f"--extra {extra!r}: forewarn has no such extra (its extras: "
                f"{', '.join(sorted(known))})"
            )
    named = f"forewarn[{','.join(extras)}]" if extras else "forewarn"
    return f"{named} @ {source}"


def env_file(pairs: Sequence[str], option: str) -> str:
    """KEY=VALUE pairs as an EnvironmentFile: one quoted assignment a line."""
    lines = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not _ENV_KEY.match(key):
            raise RenderError(f"{option} {pair!r}: expected KEY=VALUE with KEY a variable name")
        one_line(value, f"{option} {key}")
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'{key}="{escaped}"')
    return "\n".join(lines) + "\n" if lines else "# (no settings)\n"


# The agent's settings that say where it listens, which its clients read too (in any case).
_WHERE_IT_LISTENS = (
    "FOREWARN_RUNTIME_DIR",
    "FOREWARN_EVENTS",
    "FOREWARN_CONTROL",
    "FOREWARN_CONFIG",
)


def listening_pairs(agent_env: Sequence[str], training_env: Sequence[str]) -> list[str]:
    """The --env pairs that move the agent's sockets, for training.env too, unless
    --training-env sets that variable: they moved the agent alone, and the training unit's
    client (FOREWARN_RUNTIME_DIR=/run/forewarn) looked where no agent listened. Written in
    upper case, the last of each winning, as systemd and the agent read them."""
    given = {pair.partition("=")[0].upper() for pair in training_env}
    chosen: dict[str, str] = {}
    for pair in agent_env:
        key, _, value = pair.partition("=")
        if key.upper() in _WHERE_IT_LISTENS and key.upper() not in given:
            chosen[key.upper()] = value
    return [f"{key}={value}" for key, value in chosen.items()]


def agent_variables(pairs: Sequence[str]) -> None:
    """RenderError for a FOREWARN_ variable of --env that is no setting of the agent: on the
    machine the agent exits 2 at each start on a near typo (`FOREWARN_PROVIDER`) and ignores
    any other, so the machine came up without the agent or without what was asked of it.
    Names only: `agent_values` checks the values."""
    from ..config import settings_model, variable_problem

    model = settings_model()
    for pair in pairs:
        key = pair.partition("=")[0]
        problem = variable_problem(key, model, strict=True)
        if problem:
            raise RenderError(f"--env {key}: {problem}")


# Keys whose file the agent reads as it loads its settings: the file is on the machine, so
# their values are not checked here.
_READ_AT_LOAD = (
    "FOREWARN_WEBHOOK_URL_FILE",
    "FOREWARN_WEBHOOK_CA_FILE",
    "FOREWARN_WEBHOOK_HEADERS_FILE",
)
# The specifiers of the agent unit's Environment= lines, as systemd gives them to a system unit.
_SPECIFIERS = {"%t": "/run", "%S": "/var/lib"}


def agent_values(pairs: Sequence[str]) -> None:
    """RenderError naming the --env variable whose value the machine's agent would refuse:
    `FOREWARN_EXIT_MARGIN=30S` rendered without a word, and on the machine the agent exited 2
    at each start, so the job trained with no agent to warn it. Read as the agent reads them
    there: after the unit's own Environment= lines, a later pair winning, as systemd reads an
    EnvironmentFile. A FOREWARN_CONFIG is a file only the machine has, which may set the keys
    a value depends on (allow_remote): then only the machine can tell."""
    import tempfile

    named = [
        (key, value)
        for key, _, value in (pair.partition("=") for pair in pairs)
        if key.upper().startswith("FOREWARN_") and key.upper() not in _READ_AT_LOAD
    ]
    if any(key.upper() == "FOREWARN_CONFIG" for key, _ in named):
        return
    unit = _unit_environment()
    with tempfile.TemporaryDirectory() as directory:
        # An empty file, so that this machine's own /etc/forewarn/forewarn.toml is not read.
        empty = Path(directory) / "forewarn.toml"
        empty.write_text("")
        if _agent_refuses(empty, unit, named) is None:
            _writable_by_the_unit(empty, unit, named)
            return
        # The first pair with which the agent refuses them names the variable at fault (a
        # value refused only until a later pair, allow_remote, passed the check above).
        for count in range(1, len(named) + 1):
            error = _agent_refuses(empty, unit, named[:count])
            if error is not None:
                # The agent names the variable a bad value came from: --env names it here.
                variable = named[count - 1][0]
                error = error.removeprefix(f"environment {variable.upper()}: ")
                raise RenderError(f"--env {variable}: {error}")


# What the agent unit may write under ProtectSystem=strict: its RuntimeDirectory= and
# StateDirectory= (its /tmp and /var/tmp are its own, PrivateTmp=, which no job sees).
_UNIT_WRITES = ("/run/forewarn", "/var/lib/forewarn")
# The settings naming a place the agent writes (its directories, its sockets' files).
_WRITTEN = {
    "runtime_dir": "FOREWARN_RUNTIME_DIR",
    "state_dir": "FOREWARN_STATE_DIR",
    "events": "FOREWARN_EVENTS",
    "control": "FOREWARN_CONTROL",
}


def _writable_by_the_unit(config: Path, unit: dict[str, str], named: list[tuple[str, str]]) -> None:
    """RenderError naming the --env variable that puts a directory or socket of the agent
    where its unit cannot write: `FOREWARN_STATE_DIR=/mnt/data/forewarn` rendered, and on
    the machine the agent exited 2 at each start (read-only file system) until systemd gave
    up, with the job training on and no agent."""
    import os

    from forewarn.protocol.wire import ipc_path

    from ..config import load_settings

    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update({"PATH": saved.get("PATH", ""), **unit, **dict(named)})
    try:
        settings = load_settings(config)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    for field, variable in _WRITTEN.items():
        value = getattr(settings, field)
        if value is None:
            continue  # the default, in the runtime or state directory
        path = ipc_path(value) if field in ("events", "control") else Path(value)
        if path is None:
            continue  # tcp://, or an abstract socket: no file
        place = posixpath.normpath(str(path))
        if path.is_absolute() and any(
            place == root or place.startswith(root + "/") for root in _UNIT_WRITES
        ):
            continue
        key = next((k for k, _ in reversed(named) if k.upper() == variable), variable)
        raise RenderError(
            f"--env {key}: {path}: the agent unit writes only in {' and '.join(_UNIT_WRITES)} "
            "(ProtectSystem=strict; its /tmp is its own, PrivateTmp=): on the machine the "
            "agent would exit 2 at each start; name a place under one of them"
        )


def _agent_refuses(config: Path, unit: dict[str, str], named: list[tuple[str, str]]) -> str | None:
    """The agent's error for these variables after the unit's own, or None."""
    import os

    from ..config import ConfigError, load_settings

    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update({"PATH": saved.get("PATH", ""), **unit, **dict(named)})
    try:
        # Its endpoints too, which the agent checks as it starts (loopback, a socket file's
        # path and length, one endpoint for both): rendered unchecked, it exited 2 there.
        load_settings(config).resolved_endpoints()
    except ConfigError as error:
        return str(error)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return None


def _unit_environment() -> dict[str, str]:
    """The agent unit's own FOREWARN_* Environment= lines, specifiers given their meaning."""
    unit: dict[str, str] = {}
    for line in (SYSTEMD / "forewarn-agent.service").read_text().splitlines():
        key, _, value = line.removeprefix("Environment=").partition("=")
        if line.startswith("Environment=") and key.startswith("FOREWARN_"):
            for specifier, meaning in _SPECIFIERS.items():
                value = value.replace(specifier, meaning)
            unit[key] = value
    return unit


def _machine_settings(pairs: Sequence[str]) -> Settings | None:
    """The settings the machine's agent reads from `pairs` (the --env lines) after its
    unit's own Environment= lines; None when it would refuse them (`agent_values` names the
    variable). A FOREWARN_CONFIG file is only on the machine: its keys are not seen here."""
    import os
    import tempfile

    from ..config import ConfigError, load_settings

    named = [
        (key, value)
        for key, _, value in (pair.partition("=") for pair in pairs)
        if key.upper().startswith("FOREWARN_") and key.upper() != "FOREWARN_CONFIG"
    ]
    saved = dict(os.environ)
    with tempfile.TemporaryDirectory() as directory:
        empty = Path(directory) / "forewarn.toml"
        empty.write_text("")
        os.environ.clear()
        os.environ.update({"PATH": saved.get("PATH", ""), **_unit_environment(), **dict(named)})
        try:
            return load_settings(empty)
        except ConfigError:
            return None
        finally:
            os.environ.clear()
            os.environ.update(saved)


def _kubernetes(settings: Settings) -> KubernetesSettings:
    from forewarn.providers.kubernetes.settings import Settings as KubernetesSettings

    section = settings.provider_settings("kubernetes")
    assert isinstance(section, KubernetesSettings)
    return section


def _other_variable(pairs: Sequence[str], name: str) -> str:
    """The value a variable other than the agent's settings gets on the machine (the last
    pair naming it, as systemd reads an EnvironmentFile), stripped; empty when not given."""
    values = [value for key, _, value in (pair.partition("=") for pair in pairs) if key == name]
    return values[-1].strip() if values else ""


def library_extras(pairs: Sequence[str]) -> list[str]:
    """The extras the machine's agent needs for what `pairs` (the --env lines) ask of it:
    `k8s` when it reads a kubeconfig (`FOREWARN_KUBERNETES_KUBECONFIG`, or `KUBECONFIG`
    with no `FOREWARN_KUBERNETES_URL`: outside a pod the agent reads $KUBECONFIG as kubectl
    does), which only the Kubernetes client library reads. Without it the machine's agent
    ran, and its Kubernetes watcher logged "install the Kubernetes client library" once a
    minute, with no notice ever. Read as the agent reads them there (a blank value is
    unset)."""
    settings = _machine_settings(pairs)
    if settings is None:
        return []
    kubernetes = _kubernetes(settings)
    from_env = bool(_other_variable(pairs, "KUBECONFIG")) and kubernetes.url is None
    return ["k8s"] if kubernetes.kubeconfig is not None or from_env else []


def kubernetes_reachable(pairs: Sequence[str]) -> None:
    """RenderError when `pairs` turn the kubernetes provider on with no API server it can
    reach: the machine's agent runs under systemd, not in a pod (no
    KUBERNETES_SERVICE_HOST, no service-account token), and its unit hides the homes
    (ProtectHome=), so without `FOREWARN_KUBERNETES_URL`, a kubeconfig
    (`FOREWARN_KUBERNETES_KUBECONFIG`, `KUBECONFIG`) or a FOREWARN_CONFIG file that may name
    one, its watcher said "not in a pod" once a minute and never watched the node."""
    if any(pair.partition("=")[0].upper() == "FOREWARN_CONFIG" for pair in pairs):
        return
    settings = _machine_settings(pairs)
    if settings is None or "kubernetes" not in settings.providers:
        return
    kubernetes = _kubernetes(settings)
    if kubernetes.url is not None or kubernetes.kubeconfig is not None:
        return
    if _other_variable(pairs, "KUBECONFIG") or _other_variable(pairs, "KUBERNETES_SERVICE_HOST"):
        return
    key = next(
        (
            key
            for key, _, _ in reversed([p.partition("=") for p in pairs])
            if key.upper() == "FOREWARN_PROVIDERS"
        ),
        "FOREWARN_PROVIDERS",
    )
    raise RenderError(
        f"--env {key}: the kubernetes provider needs an API server to reach: the machine's "
        "agent runs under systemd, not in a pod, and its unit hides home directories "
        "(ProtectHome=), so no ~/.kube/config is read; add --env "
        "FOREWARN_KUBERNETES_KUBECONFIG=/etc/forewarn/kubeconfig (a file you put there; the "
        "k8s extra that reads it is then installed) or --env FOREWARN_KUBERNETES_URL=URL"
    )


def set_keys(unit: str, values: dict[str, str]) -> str:
    """Replace the value of each `Key=` line of a unit (the first occurrence)."""
    for key, value in values.items():
        pattern = re.compile(rf"^{key}=.*$", re.MULTILINE)
        if not pattern.search(unit):
            raise RenderError(f"the training unit has no {key}= line to set")
        # Escaped, so backslashes in the value are never read as group references.
        unit = pattern.sub(f"{key}={value}".replace("\\", "\\\\"), unit, count=1)
    return unit


def exec_line(argv: Sequence[str]) -> str:
    """`argv` as an ExecStart= value that systemd splits back into exactly these words.

    The command was written as given, but systemd does not split as shlex does: it C-unescapes
    (`a\\tb` gave a tab, `a\\ b` a warning) and takes a lone `;` for a second command, which a
    Type=exec unit refuses. Each word that needs it is double-quoted with `\\` and `"`
    escaped; `%` is doubled, since systemd reads it as a specifier. `$` is left to systemd.
    """
    words = []
    for word in argv:
        word = word.replace("%", "%%")
        if word and not _QUOTE_FOR_SYSTEMD.search(word):
            words.append(word)
        else:
            words.append('"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return " ".join(words)


def training_unit(user: str, directory: str, argv: Sequence[str]) -> str:
    unit = (SYSTEMD / "example-training.service").read_text()
    # systemd reads `%` as a specifier: `/srv/%a` came out changed. `%%` is a literal `%`.
    return set_keys(
        unit,
        {
            "User": user,
            "Group": user,
            "WorkingDirectory": directory.replace("%", "%%"),
            "ExecStart": exec_line(argv),
        },
    )


def fill_blocks(text: str, blocks: dict[str, str]) -> str:
    """Put each block (a file's content) where its @@name@@ line stands, indented to match."""

    def replace(match: re.Match[str]) -> str:
        indent = match.group("indent")
        content = blocks[match.group("name")].rstrip("\n")
        return "\n".join(indent + line if line else "" for line in content.splitlines())

    return _BLOCK.sub(replace, text)


def render(
    *,
    packages: Sequence[str],
    agent_env: Sequence[str],
    training_env: Sequence[str],
    training_user: str,
    training_dir: str,
    training_command: str,
    training_unit_name: str,
) -> str:
    if not _USER.match(training_user) or training_user in ("root", "forewarn"):
        raise RenderError(f"--training-user {training_user!r}: not a usable user name")
    if training_user == "default":
        raise RenderError(
            "--training-user 'default': cloud-init reads it as the image's default user, and "
            "the unit would name a user `default` that does not exist; give that user's name "
            "(ubuntu, admin, ...)"
        )
    one_line(training_dir, "--training-dir")
    one_line(training_command, "--training-command")
    if not training_dir.startswith("/") or any(c.isspace() for c in training_dir):
        raise RenderError(f"--training-dir {training_dir!r}: an absolute path without spaces")
    if posixpath.normpath(training_dir) != training_dir or training_dir.startswith("//"):
        raise RenderError(
            f"--training-dir {training_dir!r}: write it plainly, as "
            f"{posixpath.normpath(training_dir)!r}"
        )
    if _system_dir(training_dir):
        raise RenderError(
            f"--training-dir {training_dir!r}: a directory of the system or of forewarn; the "
            "machine would give it to the training user (install -d -o): name one of its own, "
            "such as /srv/training"
        )
    home = _HOME.match(training_dir)
    if home and home.group("user") != training_user:
        owner = home.group("user")
        why = (
            f"inside the home of user {owner!r}, which {training_user!r} cannot enter where "
            "homes are 0750 (Ubuntu's)"
            if home.group("inside")
            else f"the home of user {owner!r}; the machine would give it to {training_user!r} "
            "(install -d -o)"
        )
        raise RenderError(
            f"--training-dir {training_dir!r}: {why}: name a directory of the job's own, such "
            f"as /srv/training or /home/{training_user}/..., or run the job as {owner!r} "
            f"(--training-user {owner})"
        )
    try:
        argv = shlex.split(training_command)
    except ValueError as error:
        raise RenderError(f"--training-command: {error}") from None
    if not argv or not argv[0].startswith("/"):
        raise RenderError("--training-command: must start with an absolute program path")
    program_home = _HOME.match(posixpath.normpath(argv[0]))
    if program_home and program_home.group("user") != training_user:
        owner = program_home.group("user") or "root"
        instead = (
            "" if owner == "root" else f", or run the job as {owner!r} (--training-user {owner})"
        )
        raise RenderError(
            f"--training-command: {argv[0]} is inside the home of user {owner!r}, which "
            f"{training_user!r} cannot enter (/root is 0700, Ubuntu's homes 0750): install "
            f"the program elsewhere (/opt, /srv){instead}"
        )
    operators = sorted(set(argv) & _SHELL_OPERATORS)
    if operators:
        raise RenderError(
            f"--training-command: {' '.join(operators)}: no shell runs it; to run a shell "
            "command line, give /bin/sh -c '...'"
        )
    if (
        not _UNIT.match(training_unit_name)
        or len(training_unit_name) > 255
        or training_unit_name == "forewarn-agent.service"
    ):
        raise RenderError(f"--training-unit {training_unit_name!r}: expected NAME.service")
    if not packages:
        raise RenderError("--package: at least one package to install")
    for spec in packages:
        if not spec.strip():
            raise RenderError(f"--package {spec!r}: not a requirement")
        one_line(spec, f"--package {spec!r}")
        words = spec.split()
        if len(words) > 1 and any(word.startswith("-") for word in words):
            # One word of pip's command line: `torch --index-url URL` is no requirement, and
            # pip refused the whole install with it, forewarn's own included.
            raise RenderError(
                f"--package {spec!r}: pip reads each --package as one requirement (or one "
                "option written as a single word, --extra-index-url=URL); give the option as "
                "a --package of its own"
            )

    # pip needs git itself for a git URL, and Debian's cloud images come without it.
    system_packages = ["python3-venv"]
    if any("git+" in spec for spec in packages):
        system_packages.append("git")
    blocks = {
        "system_packages": "\n".join(f"- {name}" for name in system_packages),
        "agent_env": env_file(agent_env, "--env"),
        "training_env": env_file(
            [*training_env, *listening_pairs(agent_env, training_env)], "--training-env"
        ),
        "agent_unit": (SYSTEMD / "forewarn-agent.service").read_text(),
        "training_unit": training_unit(training_user, training_dir, argv),
    }
    agent_variables(agent_env)
    agent_values(agent_env)
    kubernetes_reachable(agent_env)
    # JSON strings are valid YAML scalars: quoting never depends on what a value holds.
    values = {
        "package": ", ".join(_scalar(spec.strip()) for spec in packages),
        "training_user": _scalar(training_user),
        "training_dir": _scalar(training_dir),
        # Quoted too: a plain scalar cannot start with `@` or hold `: `.
        "training_unit": _scalar(training_unit_name),
        "training_unit_path": _scalar(f"/etc/systemd/system/{training_unit_name}"),
        "python_check": _scalar(PYTHON_CHECK),
        "agent_check": _scalar(AGENT_CHECK),
    }
    template = "".join(
        line for line in TEMPLATE.read_text().splitlines(keepends=True) if not line.startswith("##")
    )
    text = Template(template).substitute(values)
    return fill_blocks(text, blocks)


def _scalar(value: str) -> str:
    """`value` as a double-quoted YAML scalar: a JSON string with every character but `"`,
    `\\` and the control characters (refused before, by `one_line`) written as itself. With
    json's default ASCII escapes a character beyond U+FFFF became a surrogate pair, which YAML
    reads as two lone surrogates: the value came back changed, and cloud-init could not write
    its runcmd script as UTF-8."""
    return json.dumps(value, ensure_ascii=False)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="forewarn render cloud-init",
        description="Render cloud-init user data that installs and starts forewarn and a "
        "training job.",
    )
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--source",
        required=True,
        metavar="URL",
        help="where the new machine installs forewarn from: a wheel or sdist URL, or a git "
        "URL such as git+https://host/forewarn.git@v0.1.0 (required)",
    )
    p.add_argument(
        "--extra",
        action="append",
        metavar="NAME",
        help="another forewarn extra to install besides metrics, which the agent unit "
        "needs, and k8s, added when --env gives the agent a kubeconfig (repeatable)",
    )
    p.add_argument(
        "--package",
        action="append",
        default=[],
        metavar="REQUIREMENT",
        help="another pip requirement for /opt/forewarn/venv, e.g. torch (repeatable)",
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a line of /etc/forewarn/forewarn.env, e.g. FOREWARN_PROVIDERS=aws (repeatable)",
    )
    p.add_argument(
        "--training-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a line of /etc/forewarn/training.env for the training job (repeatable)",
    )
    p.add_argument("--training-user", default="trainer", help="user of the job (default trainer)")
    p.add_argument(
        "--training-dir",
        default="/srv/training",
        help="its working directory, created (default %(default)s)",
    )
    p.add_argument(
        "--training-command",
        # train.py of the working directory, whichever --training-dir names.
        default="/opt/forewarn/venv/bin/python train.py",
        help="its ExecStart= command line, starting with an absolute path; it runs in "
        "--training-dir (default: /opt/forewarn/venv/bin/python train.py)",
    )
    p.add_argument(
        "--training-unit", default="training.service", help="its unit name (default %(default)s)"
    )
    from ..argtypes import path_arg

    p.add_argument("-o", "--output", type=path_arg, help="write here instead of standard output")


def run(args: argparse.Namespace) -> int:
    try:
        # Always `metrics`: the agent unit sets FOREWARN_METRICS_ADDRESS, and without
        # prometheus-client the agent exits 2 at every start. `--extra aws` replaced it.
        extras = ["metrics", *(extra for extra in args.extra or () if extra != "metrics")]
        # And the library of a setting that needs one (a kubeconfig: `k8s`), unless asked.
        if "all" not in extras:
            extras += [e for e in library_extras(args.env or ()) if e not in extras]
        text = render(
            packages=[requirement(args.source, extras), *args.package],
            agent_env=args.env,
            training_env=args.training_env,
            training_user=args.training_user,
            training_dir=args.training_dir,
            training_command=args.training_command,
            training_unit_name=args.training_unit,
        )
    except RenderError as error:
        print(f"forewarn: render cloud-init: {error}", file=sys.stderr)
        return 2
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        args.output.write_text(text, encoding="utf-8")  # what cloud-init reads
    except OSError as error:
        why = error.strerror or str(error)
        print(
            f"forewarn: render cloud-init: --output {args.output}: cannot write it ({why})",
            file=sys.stderr,
        )
        return 2
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(parser().parse_args(argv))


__all__ = [
    "RenderError",
    "add_arguments",
    "kubernetes_reachable",
    "library_extras",
    "main",
    "render",
    "requirement",
    "run",
]
