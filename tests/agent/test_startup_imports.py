"""What `forewarn agent --provider local` imports before it serves: nothing it does not run.

Start-up to ready is what every forewarn.testing fixture pays (bench/testing_startup.py); these
modules were once loaded on that path through package exports and the drill's arguments."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import agent_env, eventually

NOT_FOR_A_LOCAL_AGENT = (
    "forewarn.providers.aws.imds",
    "forewarn.providers.azure.events",
    "forewarn.providers.digitalocean.mail",
    "forewarn.providers.digitalocean.message",
    "forewarn.providers.digitalocean.written",
    "forewarn.agent.drill_local",
    "forewarn.agent.drill_reclaim",
    "ctypes",
    "httpx",
)


def test_a_local_agent_loads_no_other_providers_parsers_nor_the_drill() -> None:
    code = (
        "import json, sys\n"
        "from forewarn.agent.cli import build_parser\n"
        "build_parser('agent').parse_args(['agent', '--provider', 'local'])\n"
        "from forewarn.agent.config import load_settings\n"
        "import forewarn.agent.runner\n"
        "load_settings(providers=['local'])\n"
        f"print(json.dumps([m for m in {NOT_FOR_A_LOCAL_AGENT!r} if m in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_the_lazy_exports_still_resolve() -> None:
    from forewarn.providers import aws, azure, digitalocean

    assert callable(aws.parse_instance_action) and callable(azure.parse_document)
    assert callable(digitalocean.reclaim_verdict)


def test_building_every_drill_s_arguments_loads_no_mail_parser() -> None:
    # Each drill's arguments are on the parser of every `forewarn drill ...` and of `--help`;
    # the mail modules compile hundreds of patterns (about 0.3 s) that only the digitalocean
    # drill and watcher use.
    code = (
        "import json, sys\n"
        "from forewarn.agent.cli import build_parser\n"
        "from forewarn.providers.registry import REGISTRY\n"
        "build_parser('drill', REGISTRY).parse_args(['drill', 'digitalocean', '--yes'])\n"
        "build_parser(None, REGISTRY)\n"
        "print(json.dumps([m for m in sys.modules if m.startswith("
        "'forewarn.providers.digitalocean.') and m.rpartition('.')[2] in"
        " ('mail', 'message', 'written', 'deadline', 'cancel', 'watch')]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_building_the_digitalocean_watcher_loads_no_mail_parser() -> None:
    # An agent of `--provider auto` builds every detectable watcher to probe it, on any
    # cloud: the digitalocean watcher's module brought the mail patterns, 0.57 CPU-s of
    # compiling on the loop (found at a load of 6), for a DigitalOcean that is not there.
    code = (
        "import json, sys\n"
        "import forewarn.providers.digitalocean.watch\n"
        "print(json.dumps([m for m in ('forewarn.providers.digitalocean.mail',"
        " 'forewarn.providers.digitalocean.written') if m in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_an_agent_that_speaks_http_loads_httpx_without_its_command_line() -> None:
    # httpx imports its own command line (click, rich, pygments) whenever those are installed,
    # as they are beside most training stacks: about 60 ms of CPU, a third of the start of an
    # agent whose provider speaks HTTP, for a `httpx` command the agent never runs.
    extras = ("click", "rich", "pygments")
    missing = [name for name in extras if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"not installed here, so httpx cannot load them: {missing}")
    code = (
        "import json, sys\n"
        "import forewarn.agent.cli\n"
        "from forewarn.agent.config import load_settings\n"
        "load_settings(providers=['aws'])\n"
        "import forewarn.providers.aws.watch\n"
        "import httpx\n"
        "assert callable(httpx.Client) and callable(httpx.main)\n"
        f"print(json.dumps([m for m in {extras!r} if m in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


@pytest.mark.parametrize("words", [["--version"], ["--help"], ["-h"], []])
def test_the_top_level_help_and_version_load_no_provider(words: list[str]) -> None:
    # They show the commands and the version only: building every command's arguments for
    # them imported each provider's settings, pydantic and the simulators, 0.43 CPU-s for
    # `forewarn --version` against 0.08 for `forewarn status`.
    code = (
        "import contextlib, io, json, sys\n"
        "from forewarn.agent.cli import build_parser, main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
        f"    main({words!r})\n"
        "loaded = [m for m in ('pydantic', 'forewarn.providers.registry') if m in sys.modules]\n"
        "print(json.dumps([loaded, out.getvalue()]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    loaded, shown = json.loads(done.stdout)
    assert loaded == []
    from forewarn.agent.cli import _version, build_parser

    # What the whole parser shows.
    assert shown == (
        f"forewarn {_version()}\n" if words == ["--version"] else build_parser().format_help()
    )


@pytest.mark.parametrize("words", [["status"], ["ack", "--outcome", "saved"], ["wait"]])
def test_a_command_other_than_version_loads_no_package_metadata(words: list[str]) -> None:
    # Building the parser read the installed version for `--version` on every command:
    # importlib.metadata (with email, zipfile and csv) and a search of the package metadata,
    # about 0.035 of the 0.17 CPU-s of a `forewarn status` or `forewarn ack`, for a string
    # only `--version` shows. An agent imports it anyway (pydantic's plugin loader does).
    code = (
        "import json, sys\n"
        "from forewarn.agent.cli import build_parser\n"
        f"build_parser({words[0]!r}).parse_args({words!r})\n"
        "print(json.dumps('importlib.metadata' in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) is False


@pytest.mark.parametrize("words", [["status"], ["ack", "--outcome", "saved"]])
def test_a_command_that_finds_no_agent_loads_no_pydantic(words: list[str], tmp_path: Path) -> None:
    # Without an agent the command names the lock's holder (forewarn.agent.rundir), whose
    # helper module under forewarn.providers loaded that package's exports: the provider
    # settings, the report model and pydantic, about 0.1 CPU-s, to say "no agent runs".
    code = (
        "import contextlib, io, json, sys\n"
        "from forewarn.agent.cli import main\n"
        "err = io.StringIO()\n"
        "with contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):\n"
        f"    main({words!r})\n"
        "print(json.dumps([err.getvalue(), 'pydantic' in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=agent_env(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    said, loaded = json.loads(done.stdout)
    assert "no agent runs" in said
    assert loaded is False


@pytest.mark.parametrize(
    "words", [["simulate", "aws", "--help"], ["simulate", "AWS", "--help"], ["drill", "aws", "-h"]]
)
def test_a_provider_s_command_loads_no_other_provider_s_face(words: list[str]) -> None:
    # `forewarn simulate aws` built every provider's simulator (and `drill aws` every drill)
    # to add its arguments, though only the named one's parser is ever read: the others'
    # modules, 0.02 of the 0.55 CPU-s of `simulate aws --help` (which every test with a
    # simulated provider pays) and 0.07 of the 0.71 of `drill aws --help` (median of 10).
    code = (
        "import contextlib, io, json, sys\n"
        "from forewarn.agent.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
        f"    main({words!r})\n"
        "faces = [m for m in sys.modules if m.startswith('forewarn.providers.')"
        f" and m.rpartition('.')[2] == {words[0]!r}]\n"
        "print(json.dumps([faces, out.getvalue()]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    faces, shown = json.loads(done.stdout)
    assert faces == [f"forewarn.providers.aws.{words[0]}"]
    assert shown.startswith(f"usage: forewarn {words[0]} aws ")


# Neither a simulator nor a drill's arguments validate a configuration: pydantic (the
# settings models, the report model) and every provider's settings cost `simulate aws` about
# 0.3 CPU-s of its start, which each test with a simulated provider pays.
NOT_FOR_A_PROVIDER_S_COMMAND = ("pydantic", "pydantic_settings", "pydantic_core")


def _provider_command_loads(words: list[str]) -> tuple[list[str], str]:
    code = (
        "import contextlib, io, json, sys\n"
        "from forewarn.agent.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
        f"    main({words!r})\n"
        f"heavy = [m for m in {NOT_FOR_A_PROVIDER_S_COMMAND!r} if m in sys.modules]\n"
        "heavy += sorted(m for m in sys.modules if m.startswith('forewarn.providers.')"
        " and m.endswith('.settings'))\n"
        "print(json.dumps([heavy, out.getvalue()]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    heavy, shown = json.loads(done.stdout)
    return heavy, shown


@pytest.mark.parametrize("provider", ["aws", "gcp", "azure", "digitalocean"])
def test_a_simulator_s_command_loads_no_settings_nor_pydantic(provider: str) -> None:
    heavy, shown = _provider_command_loads(["simulate", provider, "--help"])
    assert heavy == []
    assert shown.startswith(f"usage: forewarn simulate {provider} ")


@pytest.mark.parametrize("provider", ["aws", "gcp", "azure", "digitalocean", "kubernetes"])
def test_a_drill_s_help_loads_no_settings_nor_pydantic(provider: str) -> None:
    heavy, shown = _provider_command_loads(["drill", provider, "--help"])
    assert heavy == []
    assert shown.startswith(f"usage: forewarn drill {provider} ")


@pytest.mark.parametrize("provider", ["aws", "gcp", "azure", "digitalocean"])
def test_a_running_simulator_loaded_no_settings_nor_pydantic(provider: str, tmp_path: Path) -> None:
    # What the simulator's process imported up to listening, by its own `-X importtime`
    # (one line per module on stderr): serving requests needs no settings model either.
    ready = tmp_path / "ready"
    argv = [sys.executable, "-X", "importtime", "-m", "forewarn.agent.cli", "simulate"]
    argv += [provider, "--port", "0", "--ready-file", str(ready)]
    with subprocess.Popen(
        argv, env=agent_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as sim:
        try:
            eventually(lambda: ready.exists() and ready.read_text(), what="the simulator listening")
        finally:
            sim.terminate()
            _, imported = sim.communicate(timeout=30)
    modules = {line.rpartition("|")[2].strip() for line in imported.splitlines()}
    assert "forewarn.providers.simulator" in modules  # the lines are read right
    heavy = sorted(
        name
        for name in modules
        if name in NOT_FOR_A_PROVIDER_S_COMMAND
        or (name.startswith("forewarn.providers.") and name.endswith(".settings"))
    )
    assert heavy == []
