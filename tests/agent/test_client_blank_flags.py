"""A blank value (nothing, or whitespace alone) given to an option of a client command
(`notify`, `watch`, `wait`, `status`, `ack`) follows the agent's rule for its own flags: it sets
nothing, as if the option were left out, or it is refused with exit 2 naming the option.
`--events "$EP"` with EP unset once fell back to the default while `--events " "` was refused
as an endpoint, `--id " "` went to the agent as an id while `--id ""` was refused, and
`--note " "` went out as the note."""

from __future__ import annotations

import argparse
import string
from pathlib import Path
from typing import Any

import pytest
from forewarn.agent import cli
from forewarn.agent.cli import build_parser, main
from forewarn.protocol.timefmt import typed_duration
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support import examples

# Each client command as a user starts it, before the option under test.
COMMANDS = (
    ("watch",),
    ("wait",),
    ("status",),
    ("notify", "drain"),
    ("notify", "clear"),
    ("ack",),
)
BLANKS = st.text(alphabet=" \t\n\r\f\v", max_size=4)


class _Reached(BaseException):
    """Raised where the command would reach the agent, with what it would send there;
    a BaseException, so that `main` lets it through as it would not an error."""

    def __init__(self, what: dict[str, Any]) -> None:
        super().__init__()
        self.what = what


def _value_options(command: tuple[str, ...]) -> list[str]:
    """The options of `command` that take a value (not --help, not the on/off ones)."""
    parser = build_parser(command[0], None)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(
        action.option_strings[-1]
        for action in sub.choices[command[0]]._actions
        if action.option_strings and action.nargs != 0
    )


def _outcome(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: Any) -> tuple[Any, ...]:
    """("reached", what the command would send and how) or ("exit", code, stderr)."""
    seen: dict[str, Any] = {}
    endpoints = cli._endpoints

    def recorded_endpoints(args: argparse.Namespace) -> tuple[str, str]:
        chosen = endpoints(args)
        seen["args"] = {k: v for k, v in vars(args).items() if k not in ("func", "registry")}
        seen["endpoints"] = chosen
        return chosen

    def ask(control: str, payload: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if argv[0] == "ack" and payload == {"op": "status"}:
            # `ack` looks first at what is active and held for whom: none here.
            return {"active": [], "held_for": {}}
        sent = dict(payload)
        if str(sent.get("id", "")).startswith("local/manual/"):
            sent["id"] = "<new>"  # a new random id each run
        raise _Reached({**seen, "payload": sent})

    def subscribe(events: str, token: str) -> Any:
        raise _Reached({**seen, "subscribed": events})

    monkeypatch.setattr(cli, "_endpoints", recorded_endpoints)
    monkeypatch.setattr(cli, "_ask", ask)
    monkeypatch.setattr(cli, "_subscribe", subscribe)
    try:
        code = main(argv)
    except _Reached as reached:
        return ("reached", reached.what)
    return ("exit", code, capsys.readouterr().err)


def test_every_client_command_has_options_to_try() -> None:
    found = {command: _value_options(command) for command in COMMANDS}
    assert {"--events", "--control", "--runtime-dir", "--config"} <= set(found[("status",)])
    assert {"--deadline", "--note", "--id", "--reason"} <= set(found[("notify", "drain")])
    assert {"--timeout", "--count", "--agent-timeout"} <= set(found[("watch",)])
    assert {"--timeout", "--for", "--agent-timeout"} <= set(found[("wait",)])


@pytest.mark.parametrize(
    ("command", "option"),
    [(command, option) for command in COMMANDS for option in _value_options(command)],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else value,
)
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(blank=BLANKS)
def test_a_blank_option_is_left_out_or_refused_naming_it(
    command: tuple[str, ...],
    option: str,
    blank: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("FOREWARN_CONFIG", raising=False)
    for variable in ("FOREWARN_RUNTIME_DIR", "FOREWARN_EVENTS", "FOREWARN_CONTROL"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr("forewarn.protocol.wire.DEFAULT_CONFIG_FILE", tmp_path / "absent.toml")
    capsys.readouterr()
    base = [*command, "--runtime-dir", str(tmp_path)]
    left_out = _outcome(base, monkeypatch, capsys)
    assert left_out[0] == "reached", left_out
    given_blank = _outcome([*base, f"{option}={blank}"], monkeypatch, capsys)
    if given_blank[0] == "exit":
        _, code, stderr = given_blank
        assert code == 2 and option in stderr, (code, stderr)
        assert len(stderr.strip().splitlines()) == 1, stderr
    else:
        assert given_blank == left_out


def test_padded_endpoints_are_read_as_the_agent_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("forewarn.protocol.wire.DEFAULT_CONFIG_FILE", tmp_path / "absent.toml")
    events, control = f"ipc://{tmp_path}/e", f"ipc://{tmp_path}/c"
    reached = _outcome(
        ["status", f"--events= {events}\n", f"--control=\t{control} "], monkeypatch, capsys
    )
    assert reached[0] == "reached", reached
    assert reached[1]["endpoints"] == (events, control)


def test_a_note_keeps_its_own_spaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("forewarn.protocol.wire.DEFAULT_CONFIG_FILE", tmp_path / "absent.toml")
    reached = _outcome(
        ["notify", "drain", "--runtime-dir", str(tmp_path), "--note", "  two spaces"],
        monkeypatch,
        capsys,
    )
    assert reached[0] == "reached", reached
    assert reached[1]["payload"]["note"] == "  two spaces"


@settings(
    max_examples=examples(80),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    step=st.text(max_size=8) | st.integers(min_value=-(2**64), max_value=2**64).map(str),
    flush=st.text(max_size=8)
    | st.floats(allow_nan=True, allow_infinity=True).map(str)
    | st.sampled_from(
        ["90", "90s", "1m30s", "2h", "250ms", "-1", "-1m5s", "-0s", "- 5", "3600", "3600.1"]
    ),
)
# A flag reads a bare number as a config key does (`typed_duration`): `0E0` and `1_000`, which
# the stricter `parse_duration` refuses, found by check 50a once the flags took that rule.
@example(step="", flush="0E0")
@example(step="", flush="1_000")
def test_any_step_and_flush_given_to_ack_is_sent_as_read_or_refused_naming_it(
    step: str,
    flush: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("FOREWARN_CONFIG", raising=False)
    monkeypatch.setattr("forewarn.protocol.wire.DEFAULT_CONFIG_FILE", tmp_path / "absent.toml")
    capsys.readouterr()
    argv = ["ack", "--runtime-dir", str(tmp_path), f"--step={step}", f"--flush-seconds={flush}"]
    outcome = _outcome(argv, monkeypatch, capsys)
    if outcome[0] == "exit":
        _, code, stderr = outcome
        assert code == 2 and ("--step" in stderr or "--flush-seconds" in stderr), stderr
        assert len(stderr.strip().splitlines()) == 1, stderr
        return
    payload = outcome[1]["payload"]
    # A blank one (`--step "$STEP"`, STEP unset) is left out: the ack goes without it.
    if step.strip(string.whitespace):
        assert payload["step"] == int(step) and 0 <= payload["step"] < 2**63
    else:
        assert "step" not in payload
    # One over an hour (a save of terabytes) too: sent as the hour the agent takes. A
    # negative one (`$(( $(date +%s) - started ))s` across the clock stepped back) is left
    # out: how long the save took is not known.
    written = flush.strip(string.whitespace)
    if written.startswith("-") and written[1:2].isdigit():
        if typed_duration(written[1:]) > 0:  # else refused above
            assert "flush_seconds" not in payload
        else:
            assert payload["flush_seconds"] == 0
    elif written:
        assert payload["flush_seconds"] == min(typed_duration(flush), 3600)
    else:
        assert "flush_seconds" not in payload
