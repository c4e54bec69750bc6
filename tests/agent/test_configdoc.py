"""docs/operations.md lists every configuration key, with names that really work."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from forewarn.agent import configdoc
from forewarn.agent.config import load_settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"

# A value to set each key to from the environment, and what it reads as.
NAMED = {
    "providers": ("local,aws", ["local", "aws"]),
    "events": ("tcp://127.0.0.1:5999", "tcp://127.0.0.1:5999"),
    "control": ("tcp://127.0.0.1:5998", "tcp://127.0.0.1:5998"),
    "metrics_address": ("127.0.0.1:5997", "127.0.0.1:5997"),
    "log_level": ("debug", "debug"),
    "log_format": ("json", "json"),
}
BY_TYPE: dict[type, tuple[str, object]] = {
    bool: ("true", True),
    float: ("7", 7.0),
}


def sample(key: str, current: object) -> tuple[str, object]:
    if key in NAMED:
        return NAMED[key]
    if key.endswith(".url"):
        return "http://127.0.0.1:5999", "http://127.0.0.1:5999"
    if key.endswith(("_dir", "_file")):
        return "/tmp/forewarn-doc-test", Path("/tmp/forewarn-doc-test")
    if type(current) in BY_TYPE:
        return BY_TYPE[type(current)]
    pytest.skip(f"no sample value for {key} ({type(current).__name__})")


def test_operations_doc_table_is_current():
    assert configdoc.main(["--check", str(DOC)]) == 0, (
        "run: python -m forewarn.agent.configdoc --write docs/operations.md"
    )


def test_check_notices_a_stale_table(tmp_path: Path):
    stale = tmp_path / "ops.md"
    stale.write_text(f"# x\n{configdoc.BEGIN}\n| old |\n{configdoc.END}\n")
    assert configdoc.main(["--check", str(stale)]) == 1
    assert configdoc.main(["--write", str(stale)]) == 0
    assert configdoc.main(["--check", str(stale)]) == 0
    assert "`FOREWARN_METRICS_ADDRESS`" in stale.read_text()


def test_every_key_has_a_description():
    missing = [key for key, _, _, description in configdoc.settings_keys() if not description]
    assert missing == [], f"add description= to {missing}"


def _get(settings: object, key: str) -> object:
    for part in key.split("."):
        settings = getattr(settings, part)
    return settings


@pytest.mark.parametrize(("key", "env"), [k[:2] for k in configdoc.settings_keys()])
def test_documented_environment_name_sets_the_key(
    key: str, env: str, monkeypatch: pytest.MonkeyPatch
):
    for name in list(os.environ):
        if name.startswith("FOREWARN_"):
            monkeypatch.delenv(name)
    current = _get(load_settings(), key)
    text, expected = sample(key, current)
    assert current != expected
    monkeypatch.setenv(env, text)
    assert _get(load_settings(), key) == expected
