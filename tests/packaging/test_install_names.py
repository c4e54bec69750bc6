"""Nothing tells a user to install forewarn by a name: forewarn is on no package index, so
`pip install 'forewarn[aws]'` finds nothing (or someone else's package). The docs install
from a checkout or a built release, and a message that asks for an extra names the source
this forewarn was installed from."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from forewarn.protocol.install import extra_hint, install_command, own_pip

ROOT = Path(__file__).resolve().parents[2]
# `pip install`, its options, then forewarn as a bare name (with or without extras and a
# version) rather than `forewarn[...] @ URL`, a path or a file.
BARE_NAME = re.compile(
    r"pip3? install(\s+-[-\w]+)*\s+['\"]?forewarn(\[[\w,\s]*\])?([=<>~!]=?[\w.*]+)?"
    r"(?![\w./\[-])(?!['\"]?\s*@)"
)


def shipped_text_files() -> list[Path]:
    pages = [ROOT / "README.md", ROOT / "Dockerfile", *(ROOT / "docs").rglob("*.md")]
    code = [
        path
        for folder in ("protocol", "agent", "providers", "clients", "testing", "bench")
        for path in (ROOT / folder).rglob("*.py")
    ]
    packaging = [path for path in (ROOT / "packaging").rglob("*") if path.is_file()]
    return [*pages, *code, *packaging]


def test_the_pattern_finds_a_bare_name_and_only_that():
    for bad in (
        "pip install forewarn",
        "pip install 'forewarn[aws]'",
        'run `pip install "forewarn[metrics,aws]"` first',
        "pip install -q forewarn==0.1.0",
    ):
        assert BARE_NAME.search(bad), bad
    for good in (
        "pip install '.[aws]'",
        "pip install 'forewarn[metrics] @ git+https://host/forewarn.git@v0.1.0'",
        'pip install "$(ls dist/forewarn-*.whl)[metrics]"',
        "pip install /tmp/dist/forewarn-0.1.0-py3-none-any.whl",
        "`pip install`s `forewarn[metrics] @ SOURCE`",
        "pip install -e '/src/forewarn[k8s]'",
    ):
        assert not BARE_NAME.search(good), good


def test_no_doc_or_message_installs_forewarn_by_name():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in shipped_text_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if BARE_NAME.search(line)
    ]
    assert found == [], "\n".join(found)


WHEEL = "file:///srv/dist/forewarn-0.1.0-py3-none-any.whl"


@pytest.mark.parametrize(
    ("direct_url", "command"),
    [
        (
            {"url": WHEEL, "archive_info": {"hashes": {"sha256": "00"}}},
            f"pip install 'forewarn[aws] @ {WHEEL}'",
        ),
        (
            {"url": "https://dl.example.org/forewarn-0.1.0.tar.gz", "archive_info": {}},
            "pip install 'forewarn[aws] @ https://dl.example.org/forewarn-0.1.0.tar.gz'",
        ),
        (
            {"url": "file:///home/me/forewarn", "dir_info": {"editable": True}},
            "pip install -e '/home/me/forewarn[aws]'",
        ),
        (
            {"url": "file:///home/me/forewarn", "dir_info": {}},
            "pip install 'forewarn[aws] @ file:///home/me/forewarn'",
        ),
        (
            {
                "url": "https://git.example.org/forewarn.git",
                "vcs_info": {"vcs": "git", "requested_revision": "v0.1.0", "commit_id": "ab12"},
            },
            "pip install 'forewarn[aws] @ git+https://git.example.org/forewarn.git@v0.1.0'",
        ),
        (
            {"url": "https://git.example.org/forewarn.git", "vcs_info": {"vcs": "git"}},
            "pip install 'forewarn[aws] @ git+https://git.example.org/forewarn.git'",
        ),
    ],
)
def test_the_hint_installs_from_where_forewarn_came_from(
    direct_url: dict[str, object], command: str
):
    assert install_command("aws", json.dumps(direct_url)) == command


@pytest.mark.parametrize("direct_url", [None, "", "not json", "[]", '{"url": 5}'])
def test_without_a_recorded_source_the_hint_gives_the_forms_that_work(direct_url: str | None):
    hint = install_command("gcp", direct_url)
    assert "'.[gcp]'" in hint and "py3-none-any.whl[gcp]" in hint
    assert not BARE_NAME.search(hint)


def test_this_checkout_s_hint_names_its_own_install():
    # The test environment is an editable install of this checkout (README's test command).
    hint = extra_hint("k8s")
    assert not BARE_NAME.search(hint), hint
    assert hint.startswith(f"{own_pip()} install ") and "[k8s]" in hint


class _Installed:
    """A forewarn distribution as importlib.metadata finds it, with this direct_url.json."""

    def __init__(self, direct_url: dict[str, object]) -> None:
        self.direct_url = json.dumps(direct_url)

    def read_text(self, name: str) -> str | None:
        return self.direct_url if name == "direct_url.json" else None


def test_a_hint_never_names_a_wheel_that_is_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The container image installs the wheel from /dist and then deletes /dist: a hint to
    `pip install 'forewarn[k8s] @ file:///dist/...whl'` there failed on a missing file."""
    wheel = tmp_path / "forewarn-0.1.0-py3-none-any.whl"
    found = [_Installed({"url": wheel.as_uri(), "archive_info": {}})]
    monkeypatch.setattr("forewarn.protocol.install.metadata.distributions", lambda name: found)
    hint = extra_hint("k8s")
    assert hint.startswith(install_command("k8s", None, own_pip())), hint
    assert f"installed from {wheel.as_uri()}, which is no longer there" in hint, hint
    wheel.write_bytes(b"")  # while the wheel is there, the hint installs from it
    assert extra_hint("k8s") == f"{own_pip()} install 'forewarn[k8s] @ {wheel.as_uri()}'"


def test_the_hint_names_the_pip_of_forewarn_s_own_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The systemd and cloud-init installs run forewarn through /usr/local/bin/forewarn, a
    link into /opt/forewarn/venv: the `pip install ...` a hint gave ran the system's pip,
    which Debian 12 and Ubuntu 24.04 refuse (externally-managed-environment) and others use
    to install into another Python, so the drill asked for boto3 again. A hint names the
    pip of the environment forewarn runs in, unless `pip` on PATH is that one."""
    own = Path(sys.executable).parent / "pip"
    assert own.exists()
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PATH", str(path))  # no pip at all
    assert extra_hint("aws").startswith(f"{own} install "), extra_hint("aws")
    (path / "pip").write_text("#!/bin/sh\n")  # the system's
    (path / "pip").chmod(0o755)
    assert extra_hint("aws").startswith(f"{own} install "), extra_hint("aws")
    (path / "pip").unlink()
    (path / "pip").symlink_to(own)  # an activated environment's, or a link to it
    assert extra_hint("aws").startswith("pip install "), extra_hint("aws")


def test_the_documented_wheel_is_one_file_with_an_older_wheel_left_in_dist(
    tmp_path: Path,
) -> None:
    """`pip install "$(ls dist/forewarn-*.whl)[metrics]"` with the wheel of an earlier build
    still in `dist/` gave pip both names in one argument, which it refused: the install
    lines pick the newest version's wheel."""
    import subprocess

    dist = tmp_path / "dist"
    dist.mkdir()
    for version in ("0.9.0", "0.10.0", "0.1.0"):
        (dist / f"forewarn-{version}-py3-none-any.whl").write_bytes(b"")
    (dist / "forewarn-0.10.0.tar.gz").write_bytes(b"")
    lines = [
        line
        for line in (ROOT / "docs" / "operations.md").read_text().splitlines()
        if "pip install" in line and "dist/forewarn-" in line
    ]
    # The release's venv, the systemd install, and the systemd install's `k8s` for a kubeconfig.
    assert len(lines) == 3, lines
    for line in lines:
        found = re.search(r'"\$\((?P<command>[^)]*)\)\[metrics(,[a-z0-9]+)*\]"', line)
        assert found, line
        named = subprocess.run(
            ["bash", "-c", found["command"]], cwd=tmp_path, capture_output=True, text=True
        )
        assert named.stdout == "dist/forewarn-0.10.0-py3-none-any.whl\n", (line, named)
