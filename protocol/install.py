"""How to add one of forewarn's extras to the forewarn that is installed.

forewarn is on no package index: installing it by its name would find nothing, or someone
else's package. So a message that asks for an extra names the source this forewarn was
installed from, as pip recorded it (PEP 610's `direct_url.json`), and otherwise the forms
that work from a checkout or a built wheel.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlsplit


def install_command(extra: str, direct_url: str | None, pip: str = "pip") -> str:
    """The pip command that adds `extra`, given the text of forewarn's `direct_url.json`
    (None when pip recorded none), run by `pip`."""
    try:
        found = json.loads(direct_url) if direct_url else None
        url = found["url"] if isinstance(found, dict) else None
    except (ValueError, KeyError):
        url = None
    if not isinstance(url, str) or not url:
        return (
            f"{pip} install '.[{extra}]' in a forewarn checkout, or "
            f"'forewarn-VERSION-py3-none-any.whl[{extra}]' from a release"
        )
    assert isinstance(found, dict)
    vcs = found.get("vcs_info")
    if isinstance(vcs, dict) and isinstance(vcs.get("vcs"), str):
        revision = vcs.get("requested_revision") or vcs.get("commit_id")
        at = f"@{revision}" if isinstance(revision, str) and revision else ""
        return f"{pip} install 'forewarn[{extra}] @ {vcs['vcs']}+{url}{at}'"
    dir_info = found.get("dir_info")
    parts = urlsplit(url)
    if isinstance(dir_info, dict) and dir_info.get("editable") and parts.scheme == "file":
        return f"{pip} install -e '{unquote(parts.path)}[{extra}]'"
    return f"{pip} install 'forewarn[{extra}] @ {url}'"


def own_pip() -> str:
    """`pip` when the pip on PATH is the one of the environment forewarn runs in, else that
    environment's pip by its path. The systemd and cloud-init installs run forewarn through
    /usr/local/bin/forewarn, a link into /opt/forewarn/venv: a bare `pip install` there ran
    the system's pip, which Debian 12 and Ubuntu 24.04 refuse (externally-managed) and other
    systems use to install into another Python, the extra still missing for forewarn."""
    own = Path(sys.executable).parent / "pip"
    on_path = shutil.which("pip")
    if on_path is not None and Path(on_path).resolve() == own.resolve():
        return "pip"
    if own.exists():
        return shlex.quote(str(own))
    return f"{shlex.quote(sys.executable)} -m pip"


def _gone(direct_url: str) -> str | None:
    """The recorded `file://` source (a wheel, an sdist, a directory) when it no longer
    exists, else None: the container image installs its wheel from /dist, then deletes it."""
    try:
        found = json.loads(direct_url)
    except ValueError:
        return None
    url = found.get("url") if isinstance(found, dict) else None
    if not isinstance(url, str) or "vcs_info" in found:
        return None
    parts = urlsplit(url)
    if parts.scheme != "file" or Path(unquote(parts.path)).exists():
        return None
    return url


def extra_hint(extra: str) -> str:
    """`install_command` for the forewarn this code was loaded from."""
    # The first that pip installed: a checkout's own forewarn.egg-info (on sys.path when
    # run from there) records no source.
    for found in metadata.distributions(name="forewarn"):
        direct_url = found.read_text("direct_url.json")
        if direct_url:
            gone = _gone(direct_url)
            if gone is not None:
                return (
                    f"{install_command(extra, None, own_pip())} (this forewarn was installed "
                    f"from {gone}, which is no longer there)"
                )
            return install_command(extra, direct_url, own_pip())
    return install_command(extra, None, own_pip())


__all__ = ["extra_hint", "install_command", "own_pip"]
