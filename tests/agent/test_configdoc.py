"""docs/operations.md lists every configuration key, with names that really work."""

from __future__ import annotations

import os
from pathlib import Path

import certifi
import pytest
from forewarn.agent import configdoc
from forewarn.agent.config import ConfigError, load_settings, settings_model
from pydantic import BaseModel
from pydantic.fields import FieldInfo

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"

# Keys whose value has a required shape; the others get a value from their type.
# The webhook URL and CA files are read when the configuration loads, so they must exist:
# the URL file is the `shaped` fixture's (a directory made at import was never removed).
SHAPED = {
    "providers": "local,aws",
    "webhook.ca_file": certifi.where(),
    "events": "tcp://127.0.0.1:5999",
    "control": "tcp://127.0.0.1:5998",
    "metrics_address": "127.0.0.1:5997",
}


@pytest.fixture(scope="module")
def shaped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    url_file = tmp_path_factory.mktemp("configdoc") / "webhook-url"
    url_file.write_text("https://hooks.example.org/forewarn\n")
    return {**SHAPED, "webhook.url_file": str(url_file)}


def candidate(key: str, current: object, shaped: dict[str, str]) -> str:
    """A value for `key`, different from `current`, as the environment would hold it."""
    if key in shaped:
        return shaped[key]
    if key.endswith(".url"):
        return "http://127.0.0.1:5999"
    field = field_of(key)
    choices = [arg for arg in getattr(field.annotation, "__args__", ()) if isinstance(arg, str)]
    if choices:
        return next(choice for choice in choices if choice != current)
    if isinstance(current, bool):
        return "false" if current else "true"
    if isinstance(current, (int, float)):
        return str(current + 1)
    if key.endswith(("_dir", "_file")):
        return "/tmp/forewarn-doc-test"
    return "forewarn-doc-test"


def field_of(key: str) -> FieldInfo:
    model: type[BaseModel] = settings_model()
    *sections, leaf = key.split(".")
    for section in sections:
        model = model.model_fields[section].annotation  # type: ignore[assignment]
    return model.model_fields[leaf]


@pytest.mark.parametrize("doc", [DOC, DOC.parents[1] / "README.md"], ids=["operations", "readme"])
def test_config_tables_are_current(doc: Path):
    assert configdoc.main(["--check", str(doc)]) == 0, (
        f"run: python -m forewarn.agent.configdoc --write {doc.relative_to(DOC.parents[1])}"
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
    key: str, env: str, shaped: dict[str, str], monkeypatch: pytest.MonkeyPatch
):
    for name in list(os.environ):
        if name.startswith("FOREWARN_"):
            monkeypatch.delenv(name)
    current = _get(load_settings(), key)
    monkeypatch.setenv(env, candidate(key, current, shaped))
    try:
        changed = _get(load_settings(), key)
    except ConfigError as error:
        # A value the key refuses still proves the name reaches it.
        assert key.rsplit(".", 1)[-1] in str(error)
        return
    assert changed != current
