"""Adding a provider is one folder with a `SPEC` and one registry line: a provider defined in
the tests (example_provider.py) is picked up by the command line, the configuration, the
generated docs and a real agent process, with no other change."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from example_provider import SPEC
from forewarn.agent.cli import build_parser, main
from forewarn.agent.config import ConfigError, load_settings, settings_model
from forewarn.agent.configdoc import table
from forewarn.protocol.errors import UsageError
from forewarn.providers import REGISTRY
from support import AgentProcess, agent_env

REGISTRY_PLUS = REGISTRY.plus(SPEC)

# The agent as the entry point runs it, with the example provider's line added.
LAUNCH = """
import sys
sys.path.insert(0, sys.argv.pop(1))
from example_provider import SPEC
from forewarn.agent.cli import main
from forewarn.protocol.errors import UsageError
from forewarn.providers import REGISTRY
sys.exit(main(sys.argv[1:], REGISTRY.plus(SPEC)))
"""


def test_the_command_line_offers_it(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser(None, REGISTRY_PLUS)
    args = parser.parse_args(["agent", "--provider", "example"])
    assert args.provider == ["example"]
    with pytest.raises(SystemExit):
        main(["drill", "--help"], REGISTRY_PLUS)
    assert "example" in capsys.readouterr().out
    with pytest.raises(UsageError, match="invalid choice 'example'"):
        build_parser(None, REGISTRY).parse_args(["agent", "--provider", "example"])


def test_its_drill_gets_its_validated_section(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FOREWARN_EXAMPLE_URL", "http://127.0.0.1:9")
    assert main(["drill", "example", "--yes"], REGISTRY_PLUS) == 0
    assert "example drill against http://127.0.0.1:9 (yes=True)" in capsys.readouterr().out
    monkeypatch.setenv("FOREWARN_EXAMPLE_URL", "https://127.0.0.1:9")
    assert main(["drill", "example"], REGISTRY_PLUS) == 2
    assert "config key example.url" in capsys.readouterr().err


def test_the_configuration_has_its_section(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOREWARN_EXAMPLE_INTERVAL", "2s")
    settings = load_settings(registry=REGISTRY_PLUS, providers="local,example")
    assert settings.provider_settings("example").interval == 2.0  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"example\.url"):
        load_settings(registry=REGISTRY_PLUS, example={"url": "ftp://x"})
    with pytest.raises(ConfigError, match="unknown provider 'example'"):
        load_settings(providers="example")


def test_the_docs_table_lists_its_keys() -> None:
    text = table(settings_model(REGISTRY_PLUS))
    assert "| `example.interval` | `FOREWARN_EXAMPLE_INTERVAL` | `0.2` |" in text
    assert "`example.announce`" in text and "example" not in table()


def test_an_agent_runs_its_watcher(tmp_path: Path) -> None:
    env = agent_env(tmp_path, FOREWARN_EXAMPLE_ANNOUNCE="true")
    agent = AgentProcess(tmp_path, env=env)
    tests = str(Path(__file__).parent)
    argv = ["agent", "--provider", "local", "--provider", "example"]
    agent.argv = [sys.executable, "-c", LAUNCH, tests, *argv]
    with agent, agent.subscriber() as subscriber:
        notice = subscriber.notice(timeout=15)
        status = agent.control({"op": "status"})
    assert (notice["provider"], notice["action"], notice["id"]) == (
        "example",
        "drain",
        "example/drill/1",
    )
    assert status["agent"]["providers"] == ["local", "example"]
