"""The command line explains itself: every subcommand has --help, and every bad input exits
2 with exactly one `forewarn:` line naming what was wrong, and no traceback."""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest
from forewarn.agent.cli import build_parser, main
from forewarn.agent.config import load_settings, settings_model
from forewarn.protocol.errors import ConfigError
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from support import agent_env, run_forewarn


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, (*path, name))
    return found


COMMANDS = _commands(build_parser())


def test_the_walk_finds_the_nested_commands() -> None:
    assert {("agent",), ("simulate", "aws"), ("drill", "local"), ("drill", "azure")} <= set(
        COMMANDS
    )


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "forewarn")
def test_every_command_has_help(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as caught:
        main([*path, "--help"])
    assert caught.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: forewarn {' '.join(path)}".rstrip())


def test_bare_forewarn_prints_help_and_version_works(tmp_path: Path) -> None:
    env = agent_env(tmp_path)
    bare = run_forewarn(env=env)
    assert bare.returncode == 0 and "COMMAND" in bare.stdout and "Exit codes" in bare.stdout
    version = run_forewarn("--version", env=env)
    assert version.returncode == 0 and version.stdout.startswith("forewarn ")


AWS_DRILL = (
    "--instance-id",
    "i-0123456789abcdef0",
    "--region",
    "eu-west-1",
    "--role-arn",
    "arn:aws:iam::123456789012:role/fis",
)
GCP_DRILL = ["--project", "p", "--zone", "us-central1-a", "--instance", "vm"]
AZURE_DRILL = (
    "--subscription",
    "00000000-0000-0000-0000-000000000000",
    "--resource-group",
    "rg",
    "--vm",
    "gpu-spot-0",
)

CASES = [
    # (argv, environment, text the one line must hold)
    (["fly"], {}, "invalid choice 'fly'"),
    (["notif"], {}, "did you mean 'notify'"),
    # Read by the configuration, as the key is from every source (test_config_numbers).
    (["agent", "--exit-margin", "5x"], {}, "--exit-margin: config key exit_margin: not a duration"),
    (["agent", "--set", "exit_margn=3"], {}, "did you mean exit_margin?"),
    (["agent", "--set", "exit_margin"], {}, "--set 'exit_margin': expected KEY=VALUE"),
    (["agent", "--set", "exit_margin.x=3"], {}, "exit_margin is a key, not a section"),
    (["agent", "--runtime-dir", ""], {}, "agent: --runtime-dir: an empty path"),
    (["agent", "--state-dir", " "], {}, "agent: --state-dir: an empty path"),
    (["agent", "--config", ""], {}, "agent: --config: an empty path"),
    (["status", "--runtime-dir", ""], {}, "status: --runtime-dir: an empty path"),
    (["drill", "local", "--dir", ""], {}, "drill local: --dir: an empty path"),
    (["agent", "--set", "aws.url=x", "--set", "aws=3"], {}, "aws is a section"),
    (["agent", "--set", "aws.=3"], {}, "--set 'aws.=3': expected KEY=VALUE"),
    (["agent", "--set", "aws.url=https://127.0.0.1:1338"], {}, "config key aws.url"),
    # A flag and a --set of the same key: the --set won in silence (`--provider local --set
    # providers=aws` watched AWS), while the same pair in another case was refused already.
    (
        ["agent", "--exit-margin", "10s", "--set", "exit_margin=20s"],
        {},
        "--set 'exit_margin=20s': exit_margin is given twice on the command line (by "
        "--exit-margin too)",
    ),
    (["agent", "--provider", "local", "--set", "providers=aws"], {}, "(by --provider too)"),
    (["agent", "--set", "allow_remote=false", "--allow-remote"], {}, "(by --allow-remote too)"),
    (
        ["agent", "--set", "aws.url=http://127.0.0.1:1", "--set", "aws.url=http://127.0.0.1:2"],
        {},
        "--set 'aws.url=http://127.0.0.1:2': aws.url is given twice on the command line",
    ),
    (["agent", "--provider", "amazon"], {}, "--provider: invalid choice 'amazon'"),
    # Named by where the value came from: the variable, the file, the --set typed, not only
    # by the config key (the operator set FOREWARN_EXIT_MARGIN, not "exit_margin").
    (
        ["agent"],
        {"FOREWARN_EXIT_MARGIN": "5x"},
        "environment FOREWARN_EXIT_MARGIN: config key exit_margin: not a duration",
    ),
    (
        ["agent"],
        {"FOREWARN_AWS_SPOT_INTERVAL": "5x"},
        "environment FOREWARN_AWS_SPOT_INTERVAL: config key aws.spot_interval: not a",
    ),
    (
        ["agent", "--config", "{toml}"],
        {},
        "config file {toml}: config key provider: unknown key (did you mean",
    ),
    (["drill", "local", "--provider", "amazon"], {}, "--provider: unknown provider 'amazon'"),
    (
        ["drill", "local", "--provider", "digitalocean"],
        {},
        "--provider: digitalocean has no simulator",
    ),
    (["simulate", "azur"], {}, "did you mean 'azure'"),
    (["notify", "terminate", "--deadline", "-5m"], {}, "notify: --deadline: '-5m' is in the past"),
    # `notify:` first, as the parser's own errors of the command have it.
    (["notify", "drain", "--deadline", "soonish"], {}, "notify: --deadline: not an RFC 3339 time"),
    (["notify", "drain", "--reason", "nope"], {}, "--reason: invalid choice 'nope'"),
    # Past the agent's 64 KiB request limit, the request went unanswered: 'no agent answers'.
    (["notify", "drain", "--note", "n" * 70_000], {}, "notify: --note: at most 2000 characters"),
    (["notify", "clear", "--id", "local/" + "i" * 70_000], {}, "notify: --id: at most 200"),
    (["notify", "drain", "--id", ""], {}, "--id: empty; leave --id out"),
    # Checked before it is sent, as --note and --id are: was the agent's refusal, or with no
    # agent "no agent runs" (exit 1).
    (["notify", "drain", "--deadline", "400d"], {}, "notify: --deadline: '400d': 20"),
    (["notify", "drain", "--config", "{file}.typo"], {}, "notify: config file {file}.typo: not"),
    (["watch", "--count", "-3"], {}, "--count: must be 1 or more, got -3"),
    (["watch", "--count", "two"], {}, "--count: not a whole number"),
    (["watch", "--timeout", "5x"], {}, "--timeout: not a duration"),
    (["watch", "--timeout", "١٢"], {}, "--timeout: not a duration: '١٢' has digits other than"),
    (["wait", "--for", "exit"], {}, "--for: invalid choice 'exit'"),
    # Named as typed, matched in any case: 'drainn' and 'amazon' were words nobody typed.
    (["wait", "--for", "DRAINN"], {}, "--for: invalid choice 'DRAINN' (did you mean 'drain'?)"),
    (["agent", "--provider", "local AWZ"], {}, "invalid choice 'AWZ' (did you mean 'aws'?)"),
    (["status", "--events", "tcp://10.0.0.1:5555"], {}, "not a loopback address"),
    (["watch", "--events", "ipc://@"], {}, "watch: --events 'ipc://@': ipc:// needs a path"),
    # "expected tcp://HOST:PORT" named no fault in the endpoint.
    (
        ["status", "--control", "tcp://127.0.0.1:99999"],
        {},
        "status: --control 'tcp://127.0.0.1:99999': port 99999 is not 1-65535",
    ),
    (
        ["agent", "--events", "ipc://{file}.sock", "--control", "ipc://{file}.sock"],
        {},
        "events and control are the same endpoint",
    ),
    (["status", "--events", "ipc://@x", "--control", "ipc://@x"], {}, "--events and --control"),
    (["status", "--control", "ipc:///" + "a" * 120], {}, "Linux allows at most 107"),
    (["agent", "--events", "ipc:///tmp/" + "b" * 110], {}, "Linux allows at most 107"),
    (["agent", "--set", "exit_margin=5x"], {}, "--set exit_margin: config key exit_margin: not"),
    # Written as in TOML: the key was `exit_margin ` and the error "config key exit_margin :
    # unknown key (did you mean exit_margin?)".
    (["agent", "--set", "exit_margin = 5x"], {}, "config key exit_margin: not a duration"),
    (["agent", "--set", " aws . spot_interval = 5x"], {}, "--set aws.spot_interval: config key"),
    # Blank once the space a ConfigMap block leaves is gone: an empty pattern matched every
    # mail's From, an empty host ran the agent with the mailbox unwatched.
    (["agent", "--heartbeat-interval", "0"], {}, "heartbeat_interval"),
    # Clients call an agent dead after 3 s without a heartbeat: a longer interval made them
    # flap, and `forewarn wait` exit 3 beside a healthy agent.
    (["agent", "--heartbeat-interval", "8s"], {}, "heartbeat_interval: Input should be less"),
    # Named by the flag typed, not only by the config key it sets.
    (["agent", "--heartbeat-interval", "8s"], {}, "--heartbeat-interval: config key heartbeat"),
    (["agent", "--metrics-address", "foo"], {}, "--metrics-address: config key metrics_addr"),
    (["agent", "--metrics-address", "127.0.0.1:99999"], {}, "port 99999 is not 0-65535"),
    # Hundreds of digits are infinity as a float: the refusal said "got inf".
    (["agent", "--set", "exit_margin=" + "9" * 400 + "s"], {}, "too large a duration: '999"),
    (["agent"], {"FOREWARN_NOTICE_GRACE": "9" * 400}, "notice_grace: too large a duration"),
    # "not a duration (use e.g. 90s ...)" and "unknown unit 'e'" did not say what was refused.
    # A flag reads a bare number as a config key does (TOML's: `1e3`, `1_000`), so `-5` is
    # refused as negative and `1e400` as too large, not for its sign or exponent.
    (["wait", "--exit-margin", "-5"], {}, "wait: --exit-margin: not a duration: '-5' is negative"),
    (["ack", "--flush-seconds", "1e400"], {}, "too large a duration: '1e400'"),
    (["notify", "clear", "--deadline", "5m"], {}, "notify: --deadline: a clear has no deadline"),
    # Sent as a plain clear, the note and reason dropped without a word.
    (["notify", "clear", "--note", "false alarm"], {}, "notify: --note: a clear carries no note"),
    (["notify", "clear", "--reason", "drill"], {}, "notify: --reason: a clear has no reason"),
    (["watch", "--agent-timeout", "-1"], {}, "watch: --agent-timeout: not a duration"),
    (["wait", "--timeout", "-1s"], {}, "wait: --timeout: not a duration"),
    # Within the agent's heartbeat interval: exit 3, "no heartbeat within 1s", beside a live
    # agent at each late beat.
    (["wait", "--agent-timeout", "1s"], {}, "wait: --agent-timeout: '1s' is within the agent's"),
    (
        ["watch", "--agent-timeout", "1.5"],
        {},
        "so a live agent would count as gone: give more than 1.5s",
    ),
    (["wait", "--timeout", "0"], {}, "wait: --timeout: must be more than 0"),
    (["watch", "--timeout", "0s"], {}, "watch: --timeout: must be more than 0"),
    (["watch", "--timeout", "0s"], {}, "(leave --timeout out for no limit)"),
    # Their --timeout has a default: leaving it out is not "no limit".
    (["status", "--timeout", "0"], {}, "(leave --timeout out for the default 30s)"),
    (["notify", "drain", "--timeout", "0s"], {}, "(leave --timeout out for the default 30s)"),
    (["drill", "local", "--steps", "-1"], {}, "drill local: --steps: must be from 1 to 1000000"),
    # Accepted: the drain was due at step 2e19, and the drill ran on at 50 steps a second.
    (
        ["drill", "local", "--steps", "100000000000000000000"],
        {},
        "drill local: --steps: must be from 1 to 1000000, got 100000000000000000000",
    ),
    (["drill", "local", "--step-time", "1e300"], {}, "drill local: --step-time: must be from 0s"),
    (
        ["drill", "local", "--background", "--upload-delay", "1e9"],
        {},
        "drill local: --upload-delay: must be more than 0s and at most 1h, got '1e9'",
    ),
    (["drill", "local", "--background", "--deadline", "30d"], {}, "--deadline: must be more than"),
    (
        ["drill", "local", "--scenario", "cloud", "--lead", "1e300"],
        {},
        "drill local: --lead: must be more than 0s and at most 2h, got '1e300'",
    ),
    # -5 and 5 seeded the same moments.
    (["drill", "local", "--scenario", "cloud", "--seed", "-5"], {}, "--seed: must be from 0 to"),
    # Each within its range, together past the most steps: the periodic save every 7.2e6
    # steps.
    (
        ["drill", "local", "--background", "--upload-delay", "1h", "--step-time", "0"],
        {},
        "drill local: --steps: this drill needs at least",
    ),
    (["drill", "local", "--steps", "1"], {}, "drill local: --steps: at least 100"),
    (["drill", "local", "--background", "--steps", "150"], {}, "--steps: at least 287"),
    (["drill", "local", "--lead", "-3"], {}, "drill local: --lead: not a duration"),
    (["drill", "local", "--dir", "{file}/work"], {}, "drill local: --dir: cannot use"),
    # Under a file and too deep at once: the file is what is wrong (the order once hung on the
    # length of pytest's temporary directory).
    (["drill", "local", "--dir", "{file}/" + "d" * 120], {}, "drill local: --dir: cannot use"),
    (["drill", "local", "--background", "--provider", "aws"], {}, "drill local: --background"),
    (["drill", "local", "--background", "--upload-delay", "0"], {}, "--upload-delay: must be"),
    (["drill", "local", "--background", "--deadline", "0s"], {}, "drill local: --deadline: must"),
    # A lead of 0 s: every notice was refused (its deadline in the past) and the drill ran on.
    (["drill", "local", "--scenario", "cloud", "--lead", "0s"], {}, "drill local: --lead: must"),
    # No credentials: one line saying how to get them, not the SDK's dump (never the network:
    # the instance-metadata lookups are off, see _no_cloud_credentials).
    (["drill", "aws", *AWS_DRILL, "--yes"], {}, "drill aws: no AWS credentials found"),
    (["drill", "azure", *AZURE_DRILL, "--yes"], {}, "drill azure: no Azure credentials"),
    (["drill", "azure", *AZURE_DRILL, "--timeout", "0"], {}, "drill azure: --timeout: must be"),
    # Refused before any credential is fetched (an unset $PROJECT; httpx's UnsupportedProtocol).
    (["drill", "gcp", *GCP_DRILL, "--project", ""], {}, "drill gcp: --project: empty"),
    (["drill", "gcp", *GCP_DRILL, "--api", "ftp://x"], {}, "drill gcp: --api: must start with"),
    (["drill", "azure", *AZURE_DRILL, "--subscription", " "], {}, "--subscription: empty"),
    # Was "the following arguments are required: COMMAND".
    (["--verison"], {}, "unrecognized argument '--verison' (did you mean '--version'?)"),
    # Was "forewarn: unrecognized arguments: central1-a; see 'forewarn --help'".
    (
        ["drill", "gcp", *GCP_DRILL, "--zone", "us", "central1-a"],
        {},
        "drill gcp: unrecognized arguments: central1-a; see 'forewarn drill gcp --help'",
    ),
    (["drill", "azure", *AZURE_DRILL, "--resource-group", ""], {}, "--resource-group: empty"),
    # Every simulator face: `forewarn: simulate NAME: ...`.
    (["simulate", "aws", "--port", "99999"], {}, "simulate aws: --port: a port is 0-65535"),
    (["simulate", "aws", "--spot-after", "soon"], {}, "simulate aws: --spot-after: not a"),
    (["simulate", "gcp", "--host", "10.0.0.1"], {}, "simulate gcp: --host: 10.0.0.1 is not"),
    (["simulate", "azure", "--fault", "nope"], {}, "simulate azure: --fault:"),
    # Before: served a VM named " " (or a plain VM for an empty --vmss-name), and scripted
    # events naming no VM at all, which no agent ever reports.
    (["simulate", "azure", "--vm-name", " "], {}, "simulate azure: --vm-name is empty"),
    (["simulate", "azure", "--vmss-name", "", "--instance-id", "1"], {}, "--vmss-name is empty"),
    (["simulate", "azure", "--resources", " , ", "--preempt-after", "0"], {}, "--resources names"),
    # Past what a timer takes, its thread died: an approved event never started.
    (
        ["simulate", "azure", "--approval-start-after", "99999999999999"],
        {},
        "simulate azure: --approval-start-after must be from 0 up to 30d, got 99999999999999.0 s",
    ),
    (["simulate", "azure", "--removal-after", "400d"], {}, "simulate azure: --removal-after must"),
    (["simulate", "kubernetes", "--notice", "bogus"], {}, "simulate kubernetes: --notice 'bog"),
    (["simulate", "kubernetes", "--node", " "], {}, "simulate kubernetes: --node: empty"),
    (
        ["simulate", "digitalocean", "--ready-file", "{file}/ready"],
        {},
        "simulate digitalocean: --ready-file: cannot write",
    ),
    (["render", "cloud-init", "--source", "ftp://x"], {}, "render cloud-init: --source"),
    (["plan", "--interruptions-per-day", "-1"], {}, "plan: --interruptions-per-day"),
    # Infinity to float(): "must be zero or more (got '1e400')" named no fault in it.
    (["plan", "--spot-price", "1e400"], {}, "plan: --spot-price: not a finite number: '1e400'"),
    # argparse's own "invalid int value", unlike every other flag.
    (["drill", "local", "--seed", "x"], {}, "drill local: --seed: not a whole number: 'x'"),
    (["simulate", "digitalocean", "--droplet-id", "-5"], {}, "a droplet id is 1 or more, got -5"),
    (["simulate", "aws", "--notice", "spot,lead=1e400"], {}, "from 0 up to 3650d; got 1e400"),
    (["checkpoint", "ls", "ftp://bucket/x"], {}, "checkpoint: store URL scheme 'ftp'"),
    # A mistyped path is not an empty store that verifies.
    (["checkpoint", "verify", "{file}.typo"], {}, "checkpoint: {file}.typo: no such directory"),
    (["checkpoint", "ls", "{file}"], {}, "checkpoint: {file}: not a directory"),
    # "S3 options endpoint_url apply to s3:// stores only": a name no flag has.
    (
        ["checkpoint", "ls", "{file}", "--endpoint-url", "x", "--addressing-style", "path"],
        {},
        "checkpoint: --addressing-style, --endpoint-url: for s3:// stores only, not '{file}'",
    ),
]


def _no_cloud_credentials(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """No AWS or Azure credential anywhere, and no SDK looking for one off this machine."""
    clean = {k: v for k, v in env.items() if not k.startswith(("AWS_", "AZURE_"))}
    clean.update(
        AWS_EC2_METADATA_DISABLED="true",
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-aws-credentials"),
        AWS_CONFIG_FILE=str(tmp_path / "no-aws-config"),
        # Only the environment credential: no managed-identity probe of 169.254.169.254.
        AZURE_TOKEN_CREDENTIALS="EnvironmentCredential",
        AZURE_CONFIG_DIR=str(tmp_path / "no-azure-cli"),
    )
    return clean


def _command_of(argv: list[str]) -> tuple[str, ...]:
    """The command `argv` runs (`drill local`, ...): the longest path of COMMANDS it starts with."""
    return max((path for path in COMMANDS if tuple(argv[: len(path)]) == path), key=len)


# The first case of each command runs the command as its own fresh interpreter, as a user
# does; the others fork from a process that loaded forewarn's command line once (~0.02 CPU-s
# each instead of ~0.23: the cases were 96 such interpreters, 22 CPU-s of the suite).
FRESH = frozenset(
    {_command_of(argv): index for index, (argv, _, _) in reversed(list(enumerate(CASES)))}.values()
)


def test_each_command_s_first_bad_input_runs_a_fresh_interpreter() -> None:
    commands = [_command_of(CASES[index][0]) for index in FRESH]
    assert len(commands) == len(set(commands)) == len({_command_of(argv) for argv, _, _ in CASES})
    assert _command_of(["drill", "gcp", "--project", ""]) == ("drill", "gcp")
    assert _command_of(["--verison"]) == ()


@pytest.mark.parametrize(
    ("argv", "extra", "text", "fresh"),
    [
        pytest.param(*case, index in FRESH, id="-".join(str(part) for part in case))
        for index, case in enumerate(CASES)
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str],
    extra: dict[str, str],
    text: str,
    fresh: bool,
    tmp_path: Path,
    run_forewarn_forked: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    config = tmp_path / "forewarn.toml"
    config.write_text('provider = "local"\n[digitalocean]\npasword = "hunter2-secret"\n')
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    argv = [word.replace("{toml}", str(config)).replace("{file}", str(blocker)) for word in argv]
    env = _no_cloud_credentials(agent_env(tmp_path, **extra), tmp_path)
    result = (run_forewarn if fresh else run_forewarn_forked)(*argv, env=env)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("forewarn: "), result.stderr
    assert text.replace("{file}", str(blocker)).replace("{toml}", str(config)) in lines[0]
    assert "Traceback" not in result.stderr and "hunter2" not in result.stderr
    # Refused before anything was bound.
    assert not list((tmp_path / "run").iterdir())


@pytest.mark.parametrize(
    ("written", "text"),
    [
        ('sender = " \\n"', "config key digitalocean.sender: must not be empty"),
        ('imap_host = "\\t"', "config key digitalocean.imap_host: empty: leave it unset"),
    ],
)
def test_a_blank_text_in_the_file_is_one_line_and_exit_2(
    written: str, text: str, tmp_path: Path
) -> None:
    # Written blank in the file, where no empty value is meant; a blank variable or `--set`
    # sets nothing instead (test_config_blank_values.py).
    config = tmp_path / "forewarn.toml"
    config.write_text(f'providers = ["local"]\n[digitalocean]\n{written}\n')
    env = _no_cloud_credentials(agent_env(tmp_path), tmp_path)
    result = run_forewarn("agent", "--config", str(config), env=env)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and text in lines[0], result.stderr


@pytest.mark.parametrize(
    ("top", "section", "text"),
    [
        (
            "",
            "lead = 1e400",
            "config key digitalocean.lead: Input should be less than or equal "
            "to 2592000 (got 1e400)",
        ),
        (
            "exit_margin = -1_0e400",
            "",
            "config key exit_margin: Input should be greater than or equal to 0 (got -1_0e400)",
        ),
    ],
)
def test_a_toml_number_too_large_for_a_float_is_named_as_written(
    top: str,
    section: str,
    text: str,
    tmp_path: Path,
    run_forewarn_forked: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    # tomllib reads `1e400` as infinity: the refusal said "got inf", a value nobody wrote.
    config = tmp_path / "forewarn.toml"
    config.write_text(f'providers = ["local"]\n{top}\n[digitalocean]\n{section}\n')
    result = run_forewarn_forked("agent", "--config", str(config), env=agent_env(tmp_path))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert lines == [f"forewarn: config file {config}: {text}"], result.stderr


@pytest.mark.parametrize(
    ("written", "text"),
    [
        ("heartbeat_interval = nan", "config key heartbeat_interval: not a number (got nan)"),
        ("exit_margin = -nan", "config key exit_margin: not a number (got nan)"),
        ("[digitalocean]\nlead = nan", "config key digitalocean.lead: not a number (got nan)"),
        # Its own bound's reason ("a poll every nan s could see it with nan s left") too.
        ("[azure]\ninterval = nan", "config key azure.interval: not a number (got nan)"),
        # An infinity is out of the bound, as said.
        (
            "heartbeat_interval = inf",
            "config key heartbeat_interval: Input should be less than or equal to 1.5 (got inf)",
        ),
    ],
)
def test_a_toml_nan_is_said_to_be_no_number(
    written: str,
    text: str,
    tmp_path: Path,
    run_forewarn_forked: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    # pydantic compares NaN with the bound: "less than or equal to 1.5 (got nan)".
    config = tmp_path / "forewarn.toml"
    config.write_text(f'providers = ["local"]\n{written}\n')
    result = run_forewarn_forked("agent", "--config", str(config), env=agent_env(tmp_path))
    assert result.returncode == 2, result.stderr
    said = [f"forewarn: config file {config}: {text}"]
    assert result.stderr.strip().splitlines() == said, result.stderr


def _float_keys() -> list[tuple[str, ...]]:
    """Every setting that holds a float, as its path of keys."""

    def walk(model: type[BaseModel], path: tuple[str, ...]) -> list[tuple[str, ...]]:
        found = []
        for name, field in model.model_fields.items():
            kind = field.annotation
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                found += walk(kind, (*path, name))
            elif "float" in str(kind):
                found.append((*path, name))
        return found

    return walk(settings_model(), ())


@settings(max_examples=40, deadline=None)
@given(key=st.sampled_from(_float_keys()), written=st.sampled_from(["nan", "-nan", "+nan"]))
def test_every_float_key_says_a_nan_is_no_number(key: tuple[str, ...], written: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "forewarn.toml"
        line = f"{key[-1]} = {written}"
        config.write_text(
            f'providers = ["local"]\n{line}\n'
            if len(key) == 1
            else f'providers = ["local"]\n[{key[0]}]\n{line}\n'
        )
        with pytest.raises(ConfigError) as refused:
            load_settings(config)
    assert f"config key {'.'.join(key)}: not a number" in str(refused.value)


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = run_forewarn("--debug", "agent", "--set", "exit_margn=3", env=agent_env(tmp_path))
    assert result.returncode == 2 and "Traceback" in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("forewarn: --set exit_margn: config key exit_margn"), result.stderr


def test_drill_local_lead_is_a_duration_like_every_other() -> None:
    args = build_parser("drill").parse_args(["drill", "local", "--lead", "1.5m"])
    assert args.lead == 90


def test_provider_names_are_taken_in_any_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `forewarn drill local --provider AWS` was refused while the config file took any
    # spelling it was given to the registry; now every place reads `AWS` as `aws`.
    from forewarn.agent.config import load_settings

    agent = build_parser("agent").parse_args(["agent", "--provider", "AWS", "--provider", "Gcp"])
    assert agent.provider == ["aws", "gcp"]
    drill = build_parser("drill").parse_args(["drill", "local", "--provider", "AWS"])
    assert drill.source == "aws"
    # The provider of `simulate` and `drill` too: the error met next is the port's, not the name's.
    assert main(["simulate", "AWS", "--port", "99999"]) == 2
    assert "forewarn: simulate aws: --port:" in capsys.readouterr().err
    monkeypatch.delenv("FOREWARN_PROVIDERS", raising=False)
    config = tmp_path / "forewarn.toml"
    config.write_text('providers = ["AWS", "Local"]\n')
    assert load_settings(config).providers == ["aws", "local"]
    monkeypatch.setenv("FOREWARN_PROVIDERS", "GCP, local")
    config.write_text("")
    assert load_settings(config).providers == ["gcp", "local"]


def test_an_invalid_choice_without_a_near_one_lists_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["agent", "--provider", "amazon"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice 'amazon' (choose from auto, local, aws, gcp" in err


def test_path_flags_read_tilde_as_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `--dir=~/drill`, `-o ~/x` quoted: a directory named `~` in the working directory.
    monkeypatch.setenv("HOME", str(tmp_path))
    drill = build_parser("drill").parse_args(["drill", "local", "--dir=~/drill"])
    assert drill.dir == tmp_path / "drill"
    get = build_parser("checkpoint").parse_args(["checkpoint", "get", "/ckpt", "~/out"])
    assert get.destination == tmp_path / "out"
    render = build_parser("render").parse_args(
        ["render", "cloud-init", "--source", "https://example.invalid/f.whl", "-o", "~/u.yaml"]
    )
    assert render.output == tmp_path / "u.yaml"
    # `forewarn plan --telemetry=~/drill` said "no such file or directory: ~/drill".
    plan = build_parser("plan").parse_args(
        ["plan", "--telemetry=~/drill", "--plot", "~/overhead.png"]
    )
    assert plan.telemetry == [tmp_path / "drill"]
    assert plan.plot == tmp_path / "overhead.png"


def test_a_top_level_key_written_under_a_section_says_where_it_belongs(tmp_path: Path) -> None:
    # TOML puts every key after `[aws]` in that section: the margin appended at the end of
    # the file was "config key aws.exit_margin: unknown key", with no word of why.
    config = tmp_path / "forewarn.toml"
    config.write_text(
        'providers = ["local"]\n[aws]\nurl = "http://127.0.0.1:9"\nexit_margin = 60\n'
    )
    result = run_forewarn("agent", "--config", str(config), env=agent_env(tmp_path))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, lines
    assert (
        "config key aws.exit_margin: unknown key (exit_margin is a top-level key, not one of "
        "[aws]: in TOML every key after a [section] header is in that section; write it above "
        "the first one)"
    ) in lines[0]


UNQUOTED = [
    ("exit_margin = 30s", 'exit_margin = "30s"'),
    ("exit_margin = 1h30m  # an hour and a half", 'exit_margin = "1h30m"'),
    ("metrics_address = 127.0.0.1:9464", 'metrics_address = "127.0.0.1:9464"'),
    ("log_level = debug", 'log_level = "debug"'),
]


@pytest.mark.parametrize(("line", "hint"), UNQUOTED)
@pytest.mark.parametrize("command", ["agent", "status"])
def test_an_unquoted_text_in_the_file_says_to_quote_it(
    line: str,
    hint: str,
    command: str,
    tmp_path: Path,
    run_forewarn_forked: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    # tomllib's own words alone: "Expected newline or end of document after a statement (at
    # line 2, column 17)", nothing that says a duration is a string in TOML.
    config = tmp_path / "forewarn.toml"
    config.write_text(f'providers = ["local"]\n{line}\n')
    # Each command's first line as a fresh interpreter, the others forked (as CASES above).
    run = run_forewarn if line == UNQUOTED[0][0] else run_forewarn_forked
    result = run(command, "--config", str(config), env=agent_env(tmp_path))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and "not valid TOML" in lines[0], lines
    assert f"(a text is quoted in TOML: {hint})" in lines[0], lines


@settings(max_examples=50, deadline=None)
@given(
    written=st.text(min_size=1, max_size=20).filter(
        lambda text: text.strip() and "\x00" not in text
    )
)
def test_a_refused_variable_is_named_by_the_variable(written: str) -> None:
    """The operator set FOREWARN_EXIT_MARGIN, not "config key exit_margin": whatever its
    value, a refusal of it names the variable, and the file's value of the same key, which
    the variable overrides, is not blamed."""
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "forewarn.toml"
        config.write_text('exit_margin = "30s"\n')
        variables = {"FOREWARN_EXIT_MARGIN": written}
        with mock.patch.dict(os.environ, variables):
            try:
                load_settings(config)
            except ConfigError as error:
                said = str(error)
                assert said.startswith(
                    "environment FOREWARN_EXIT_MARGIN: config key exit_margin: "
                ), said


@settings(max_examples=50, deadline=None)
@given(word=st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-", min_size=1))
def test_a_refused_choice_is_named_as_typed(word: str) -> None:
    """A choice is read in any case, and one that is none of them is named as the user
    typed it, not lowered."""
    from forewarn.protocol.errors import UsageError

    if word.lower() in ("drain", "terminate"):
        return
    with pytest.raises(UsageError) as refused:
        build_parser().parse_args(["wait", "--for", word])
    assert f"--for: invalid choice {word!r}" in str(refused.value), refused.value
