"""The README stays true: its commands exist, and every command and option of the CLI is
documented in the README or in a page under docs/."""

from __future__ import annotations

import argparse
import ast
import inspect
import os
import re
import textwrap
import time
import types
from pathlib import Path
from typing import Any

import pytest
from forewarn.agent.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = README + "".join(page.read_text() for page in sorted((ROOT / "docs").glob("*.md")))


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), None
                yield from _walk(sub, (*path, name))
        elif action.option_strings and "--help" not in action.option_strings:
            yield path, max(action.option_strings, key=len)


def test_every_command_and_option_is_documented() -> None:
    missing = []
    for path, option in _walk(build_parser()):
        if option is None:
            if f"forewarn {' '.join(path)}" not in DOCS and path[-1] not in DOCS:
                missing.append(" ".join(path))
        elif option not in DOCS:
            missing.append(f"{' '.join(path)} {option}")
    assert not missing, f"undocumented: {missing}"


def _commands_finding_an_agent() -> set[str]:
    """The commands that take `--events` to find an agent elsewhere (not the agent, which
    binds it)."""
    return {
        path[0]
        for path, option in _walk(build_parser())
        if option == "--events" and len(path) == 1 and path[0] != "agent"
    }


def _commands_named_before(text: str, words: str) -> set[str]:
    """The backticked command names in the list that ends right before `words`
    (`` `notify`, `watch` and `status` take``)."""
    flat = " ".join(text.split())
    found = re.search(r"((?:`[a-z]+`(?:, | and )?)+)\)? " + re.escape(words), flat)
    assert found, f"no list of commands before {words!r}"
    return set(re.findall(r"`([a-z]+)`", found.group(1)))


def test_the_commands_that_find_an_agent_are_the_ones_the_docs_list() -> None:
    """found: `forewarn ack` takes --events, --control, --runtime-dir, --config and
    --allow-remote as `notify` does, but the README's sentence on them named `notify`, `watch`,
    `wait` and `status` only, so its five options were documented nowhere for it."""
    commands = _commands_finding_an_agent()
    assert "ack" in commands
    assert _commands_named_before(README, "take `--events EP`") == commands
    operations = (ROOT / "docs" / "operations.md").read_text()
    named = _commands_named_before(operations, "follow the same rule")
    assert named == commands


def test_every_option_has_a_help_line() -> None:
    """`forewarn agent --help` listed --log-level and --log-format, `status --help` --json,
    with no word on what they do or their default."""
    parser = build_parser()
    bare = []
    for path, option in _walk(parser):
        if option is None:
            continue
        sub = parser
        for name in path:
            (choices,) = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
            sub = choices.choices[name]
        (action,) = [a for a in sub._actions if option in a.option_strings]
        if not action.help and option != "--version":
            bare.append(f"{' '.join(path)} {option}")
    assert not bare, f"no help line: {bare}"


def test_the_readme_names_every_command_as_typed() -> None:
    """Every command and subcommand is in the README as it is typed, alone or in an
    alternation (`forewarn drill aws|gcp`): the check above let `forewarn drill digitalocean`
    pass on the bare word "digitalocean", and the README's table of commands left it out."""
    text = README.replace("\\|", "|")
    missing = []
    for path, option in _walk(build_parser()):
        if option is not None:
            continue
        *parent, name = path
        alternation = rf"(?:[\w-]+\|)*{re.escape(name)}(?![\w-])"
        if not re.search(rf"forewarn {re.escape(' '.join(parent))} ?{alternation}", text):
            missing.append(" ".join(path))
    assert not missing, f"not in the README as typed: {missing}"


def test_the_two_setup_commands_are_there_and_ci_runs_the_test_one() -> None:
    for marker in ("drill-command", "test-command"):
        block = re.search(rf"<!-- {marker} -->\n```\n(.+)\n```\n<!-- /{marker} -->", README)
        assert block, marker
        assert block.group(1).startswith("python3 -m venv .venv && ")
    assert "test-command" in (ROOT / ".ci" / "run").read_text()


def _run_training_loop(monkeypatch, made: list[Any], loop: dict[str, Any]) -> Any:  # type: ignore[no-untyped-def]
    """Run the loop of "Add it to a training loop" as written, in the namespace `loop` (resume,
    train_one_step, save, total_steps; the loop's own names land there too), with the README's
    guard without an agent, a flag file or signal handlers; each guard made goes into `made`.
    Returns the loop's exit code."""
    import forewarn.clients
    from forewarn.clients import CheckpointGuard

    section = README.split("## Add it to a training loop", 1)[1]
    code = re.search(r"```python\n(.+?)```", section, re.S)
    assert code

    class Quiet(CheckpointGuard):
        def __init__(self, *args: object, **options: object) -> None:
            options.update(notices=False, flag_file=None, handle_signals=False)
            super().__init__(*args, **options)  # type: ignore[arg-type]
            made.append(self)

    monkeypatch.setattr(forewarn.clients, "CheckpointGuard", Quiet)
    try:
        with pytest.raises(SystemExit) as exited:
            exec(code.group(1), loop)
    finally:
        for guard in made:
            guard.close()
    return exited.value.code


def test_the_training_loop_lines_run_as_pasted(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The loop of "Add it to a training loop", run as written after a resume at step 1234:
    periodic saves count from the resume point. Without `guard.resumed(step)` the first step
    after every restart saved again (1235), and the saves after it left the every-600 grid."""
    saves: list[int] = []
    code = _run_training_loop(
        monkeypatch,
        [],
        {
            "resume": lambda: 1234,
            "train_one_step": lambda: None,
            "save": lambda step: saves.append(step) or 0.01,
            "total_steps": 2500,
        },
    )
    assert saves == [1834, 2434]
    assert code == 0, "training finished"


def test_the_training_loop_exits_143_after_a_terminate_save(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The same loop, with an exit asked for (as a terminate or SIGTERM does) at step 1300:
    it saves, leaves the loop and ends the process with 143. It ended with 0 (the loop only
    broke out), which marks a reclaimed Kubernetes Job complete: it never resumed."""
    made: list[Any] = []
    saves: list[int] = []

    def train_one_step() -> None:
        if loop["step"] == 1299:
            made[0].request("terminate", exit=True)

    loop: dict[str, Any] = {
        "resume": lambda: 1234,
        "train_one_step": train_one_step,
        "save": lambda step: saves.append(step) or 0.01,
        "total_steps": 2500,
    }
    code = _run_training_loop(monkeypatch, made, loop)
    assert saves == [1300]
    assert code == 143


def test_the_training_loop_exits_at_once_on_an_exit_pending_at_resume(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The same loop, with an exit asked for (a terminate or SIGTERM) while the job restored
    its state: the resume point is durable, so it exits with 143 before training a step and
    writes nothing, as "A notice during the first step" says. The pasted lines had no
    `due(step)` after `resumed(step)`: they trained the first step (compile, warm-up) and saved
    again at 1235, so a lead shorter than that step plus a flush lost the save mid-write."""
    made: list[Any] = []
    saves: list[int] = []
    trained: list[None] = []

    def resume() -> int:
        made[0].request("terminate", exit=True)
        return 1234

    code = _run_training_loop(
        monkeypatch,
        made,
        {
            "resume": resume,
            "train_one_step": lambda: trained.append(None),
            "save": lambda step: saves.append(step) or 0.01,
            "total_steps": 2500,
        },
    )
    assert (len(trained), saves) == (0, [])
    assert code == 143


def _documented_api() -> dict[str, Any]:
    """What the docs call `name(...)` in their text, as the code has it. The framework
    callbacks are left out: importing them imports Lightning and transformers."""
    import forewarn.clients.checkpoint as checkpoint
    import forewarn.testing as testing
    from forewarn.clients import CheckpointGuard, Notices
    from forewarn.clients.adaptive import AdaptiveInterval
    from forewarn.testing import providers

    api: dict[str, Any] = {
        "CheckpointGuard": CheckpointGuard,
        "guard": CheckpointGuard,
        "Notices": Notices,
        "AdaptiveInterval": AdaptiveInterval,
        "auto": AdaptiveInterval,
        "CheckpointStore": checkpoint.CheckpointStore,
        "store": checkpoint.CheckpointStore,
        "Generation": checkpoint.Generation,
        "gen": checkpoint.Generation,
        "GenerationWriter": checkpoint.GenerationWriter,
        "S3Options": checkpoint.S3Options,
        "BackgroundSaver": checkpoint.BackgroundSaver,
        "saver": checkpoint.BackgroundSaver,
        "BatchProgress": checkpoint.BatchProgress,
        "RunningAgent": testing.RunningAgent,
        "agent": testing.RunningAgent,
        "agent.aws": providers.AwsNotices,
        "agent.gcp": providers.GcpNotices,
        "agent.azure": providers.AzureNotices,
        "agent.digitalocean": providers.DigitalOceanNotices,
        "agent.kubernetes": providers.KubernetesNotices,
        "agent.<provider>": providers.ProviderNotices,
    }
    for name in ("start_agent", "eventually", "free_port", "SimControl"):
        api[name] = getattr(testing, name)
    for name in ("save_training_state", "load_training_state", "load_state"):
        api[name] = getattr(checkpoint, name)
    for name in ("save_dcp", "async_save_dcp", "load_dcp"):
        api[name] = getattr(checkpoint, name)
    # The README lists the guard's methods by their bare names.
    for name in ("due", "saved", "save", "resumed", "request", "due_in_eval", "save_state"):
        api[name] = getattr(CheckpointGuard, name)
    return api


_CALL = re.compile(r"`((?:[\w<>]+\.)*[\w<>]+)\(([^`()]*)\)(?: -> [\w.]+)?`")


def _signature_problems(target: Any, params: str) -> list[str]:
    """How `name(params)` as the docs write it differs from `target`'s signature. Names a
    caller can pass by keyword must exist; a signature (it shows `=None`, `*` or `**`) must
    also give the code's defaults and put keyword-only parameters after `*`."""
    try:
        doc = ast.parse(f"def f({params}): pass").body[0].args  # type: ignore[attr-defined]
    except SyntaxError:
        return []  # a call with values (`fault("status", status=500)`), not a signature
    signature_like = (
        "=None" in params or "**" in params or bool(re.search(r"(^|,)\s*\*\s*,", params))
    )
    real = [p for p in inspect.signature(target).parameters.values() if p.name != "self"]
    by_name = {p.name: p for p in real}
    takes_any_keyword = any(p.kind is p.VAR_KEYWORD for p in real)
    by_position = [p for p in real if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_any_position = any(p.kind is p.VAR_POSITIONAL for p in real)
    positional = doc.posonlyargs + doc.args
    defaults = [None] * (len(positional) - len(doc.defaults)) + list(doc.defaults)
    entries = [
        (a.arg, d, False, i) for i, (a, d) in enumerate(zip(positional, defaults, strict=True))
    ]
    entries += [(a.arg, d, True, -1) for a, d in zip(doc.kwonlyargs, doc.kw_defaults, strict=True)]
    problems = []
    for name, default, keyword_only, index in entries:
        if default is None and not keyword_only:
            if index >= len(by_position) and not takes_any_position:
                problems.append(f"`{name}` cannot be passed by position")
            continue
        if name not in by_name:
            if not takes_any_keyword:
                problems.append(f"`{name}` is not a parameter ({', '.join(by_name)})")
            continue
        param = by_name[name]
        if not signature_like:
            continue
        if param.kind is param.KEYWORD_ONLY and not keyword_only:
            problems.append(f"`{name}` is keyword-only: it goes after `*`")
        if default is not None:
            try:
                value = ast.literal_eval(default)
            except ValueError:
                continue
            if value is not Ellipsis and value != param.default:
                problems.append(f"`{name}` defaults to {param.default!r}, not {value!r}")
    return problems


def test_the_python_api_the_docs_name_takes_those_arguments() -> None:
    """Every `name(...)` of the Python API in the text of the README and docs/*.md matches
    the code: testing.md had `agent.clear(id=None)` and `agent.end_fault(id=None)` (both
    TypeErrors: the parameters are notice_id and fault_id), and keyword-only parameters
    (`where=`, `progress=`, `keep_step=`) shown as positional ones."""
    api = _documented_api()
    pages = {"README.md": README} | {
        page.name: page.read_text() for page in sorted((ROOT / "docs").glob("*.md"))
    }
    found, wrong = 0, []
    for page, text in pages.items():
        # Code spans wrap across the lines of a paragraph.
        for match in _CALL.finditer(re.sub(r"(?<!\n)\n(?!\n)", " ", text)):
            dotted, params = match.groups()
            owner, _, attribute = dotted.rpartition(".")
            if dotted in api:
                target = api[dotted]
            elif owner in api:
                target = getattr(api[owner], attribute, None)
                if target is None:
                    wrong.append(f"{page}: {match.group(0)}: no {attribute} on {owner}")
                    continue
            else:
                continue
            found += 1
            wrong += [f"{page}: {match.group(0)}: {p}" for p in _signature_problems(target, params)]
    assert found >= 40, found
    assert not wrong, "\n".join(wrong)


def test_the_store_loop_runs_as_pasted_and_resumes_on_the_grid(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The loop of "Checkpoints that verify before resume", run as written on a local store,
    then again as the restarted job. Without `guard.resumed(step)` the restarted job saved
    at once (step 1201, right after resuming from 1200) and left the every-600 grid."""
    import pickle

    import forewarn.clients
    from forewarn.clients import CheckpointGuard

    section = README.split("## Checkpoints that verify before resume", 1)[1]
    code = re.search(r"```python\n(.+?)```", section, re.S)
    assert code and '"s3://my-bucket/runs/7b"' in code.group(1)
    made: list[CheckpointGuard] = []

    class Quiet(CheckpointGuard):
        """The README's guard, without an agent, a flag file or signal handlers."""

        def __init__(self, *args: object, **options: object) -> None:
            options.update(notices=False, flag_file=None, handle_signals=False)
            super().__init__(*args, **options)  # type: ignore[arg-type]
            made.append(self)

    monkeypatch.setattr(forewarn.clients, "CheckpointGuard", Quiet)
    source = code.group(1).replace('"s3://my-bucket/runs/7b"', repr(str(tmp_path / "store")))
    saved: list[int] = []
    try:
        for total_steps in (1300, 2500):  # the first job, then its replacement
            loop = {
                "resume_from": lambda generation: generation.step,
                "train_one_step": lambda: None,
                "serialize": lambda model: pickle.dumps(model),
                "model": {"weights": 1},
                "total_steps": total_steps,
            }
            with pytest.raises(SystemExit) as exited:
                exec(source, loop)
            assert exited.value.code == 0
            saved = [generation.step for generation in loop["store"].generations()]
    finally:
        for guard in made:
            guard.close()
    assert saved == [1200, 1800, 2400]  # keep=3


def _python_blocks() -> list[tuple[str, str]]:
    """Each Python block of the README and docs/*.md, with its page's name."""
    pages = {"README.md": README} | {
        page.name: page.read_text() for page in sorted((ROOT / "docs").glob("*.md"))
    }
    return [
        (page, block)
        for page, text in pages.items()
        for block in re.findall(r"```python\n(.+?)```", text, re.S)
    ]


def test_every_loop_with_a_periodic_guard_reports_its_resume() -> None:
    """A Python block of the README or docs/*.md whose loop starts from a resumed step and
    checkpoints every N steps tells the guard where it resumed: without `guard.resumed(step)`
    periodic saves count from 0, so the first step after a restart saves again (the README's
    store loop and docs/checkpoint.md's background loop both did)."""
    checked, missing = 0, []
    for page, block in _python_blocks():
        if "CheckpointGuard(every_steps=" not in block or "while step <" not in block:
            continue
        checked += 1
        if "guard.resumed(step)" not in block.split("while step <", 1)[0]:
            missing.append(f"{page}: {block.splitlines()[0]}")
    assert checked >= 3, checked
    assert not missing, missing


def test_every_loop_with_a_guard_checks_due_right_after_its_resume() -> None:
    """A Python block of the README or docs/*.md that reports its resume calls `due(step)`
    right after, as "A notice during the first step" says: a terminate or SIGTERM that came
    while the job restored its state is then answered before a first step that may outlast
    the lead, with nothing written. The store loop and docs/checkpoint.md's background loop
    trained that step first and saved again."""
    checked, missing = 0, []
    for page, block in _python_blocks():
        if "guard.resumed(step)" not in block or "while step <" not in block:
            continue
        checked += 1
        after = block.split("guard.resumed(step)", 1)[1].split("while step <", 1)[0]
        if "guard.due(step)" not in after:
            missing.append(f"{page}: {block.splitlines()[0]}")
    assert checked >= 3, checked
    assert not missing, missing


def _toml_blocks() -> list[tuple[str, str]]:
    """Each TOML block of the README and docs/*.md, with its page's name and line."""
    pages = {"README.md": README} | {
        page.name: page.read_text() for page in sorted((ROOT / "docs").glob("*.md"))
    }
    # A block in a list item is indented with its fence (docs/digitalocean.md's setup steps).
    return [
        (
            f"{page}:{text.count(chr(10), 0, found.start()) + 1}",
            textwrap.dedent(found.group(2)),
        )
        for page, text in pages.items()
        for found in re.finditer(r"^( *)```toml\n(.+?)^\1```$", text, re.S | re.M)
    ]


TOML_BLOCKS = _toml_blocks()


@pytest.mark.parametrize(("page", "block"), TOML_BLOCKS, ids=[page for page, _ in TOML_BLOCKS])
def test_every_config_sample_loads_with_the_values_it_shows(
    page: str, block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ```toml block is a config file a user copies to /etc/forewarn/forewarn.toml: the real
    loader takes it, and every value it shows is the one the agent then runs with (a key in
    the wrong section, or a value the loader reads otherwise, fails here). A file the sample
    names under /etc/forewarn (the webhook's URL, the mailbox login) is made in a temporary
    directory. A block indented in a list item counts too."""
    from forewarn.agent.config import load_settings

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    for variable in list(os.environ):
        if variable.upper().startswith("FOREWARN_"):
            monkeypatch.delenv(variable)
    for path in set(re.findall(r'"(/etc/forewarn/[^"]+)"', block)):
        local = tmp_path / Path(path).name
        if local.suffix == ".env":  # the mailbox login
            local.write_text("FOREWARN_IMAP_USER=u@example.com\nFOREWARN_IMAP_PASSWORD=p\n")
        else:  # the webhook's URL
            local.write_text("https://hooks.example.org/forewarn\n")
        local.chmod(0o600)
        block = block.replace(f'"{path}"', f'"{local}"')
    config = tmp_path / "forewarn.toml"
    config.write_text(block)
    settings = load_settings(config)
    written = tomllib.loads(block)
    assert written, f"{page}: an empty sample"

    def read(value: Any) -> Any:
        return [str(item) for item in value] if isinstance(value, list) else value

    for key, value in written.items():
        if isinstance(value, dict):
            section = getattr(settings, key)
            for leaf, leaf_value in value.items():
                loaded = getattr(section, leaf)
                assert read(loaded) == leaf_value or str(loaded) == str(leaf_value), (
                    f"{page}: [{key}] {leaf} = {leaf_value!r} loads as {loaded!r}"
                )
        else:
            loaded = getattr(settings, key)
            assert read(loaded) == value or str(loaded) == str(value), (
                f"{page}: {key} = {value!r} loads as {loaded!r}"
            )


# The names the README's loop leaves to the user, for a job process: each save is a line in
# the file named by argv[1], and each step a little work, so a notice lands mid-run.
_JOB_PRELUDE = """
import pathlib, sys, time
log = pathlib.Path(sys.argv[1])
total_steps = 100_000

running = log.with_name("running")

def resume():
    return 0

def train_one_step():
    time.sleep(0.01)  # the every-600 save is 6 s away: the notices come long before
    running.touch()

def save(step):
    with log.open("a") as saves:
        saves.write(f"{step}\\n")
    return 0.01
"""


def test_the_training_loop_acts_on_a_real_agent_s_drain_and_terminate(tmp_path: Path) -> None:
    """The README's loop, pasted into a job of its own that finds a real agent by the
    environment alone: a drain while it trains makes it save and go on, a terminate then
    makes it save and exit 143, and the agent has both acks with the steps saved."""
    import subprocess
    import sys

    from support import AgentProcess, agent_env, eventually

    section = README.split("## Add it to a training loop", 1)[1]
    code = re.search(r"```python\n(.+?)```", section, re.S)
    assert code
    job_file = tmp_path / "job.py"
    job_file.write_text(_JOB_PRELUDE + code.group(1))
    saves = tmp_path / "saves"
    env = agent_env(tmp_path)
    telemetry = Path(env["FOREWARN_STATE_DIR"]) / "telemetry.jsonl"
    with AgentProcess(tmp_path, env=env) as agent:
        job = subprocess.Popen(
            [sys.executable, str(job_file), str(saves)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            eventually(lambda: (tmp_path / "running").exists(), what="the first step")
            drain = agent.control({"op": "notify", "action": "drain"})["notice"]["id"]
            eventually(lambda: _acks(telemetry).get(drain) is not None, what="the drain's ack")
            deadline = time.time() + 120
            terminate = agent.control(
                {"op": "notify", "action": "terminate", "deadline": _rfc3339(deadline)}
            )["notice"]["id"]
            _, err = job.communicate(timeout=30)
        finally:
            job.kill()
        eventually(lambda: terminate in _acks(telemetry), what="the terminate's ack")
    assert job.returncode == 143, err
    steps = [int(line) for line in saves.read_text().split()]
    acked = _acks(telemetry)
    assert set(acked) == {drain, terminate}, acked
    # A periodic save may come between them on a loaded machine; each notice has its own.
    assert acked[drain] in steps and acked[drain] < acked[terminate] == steps[-1], (acked, steps)


def _acks(telemetry: Path) -> dict[str, int]:
    """The step each notice was acked at, by the agent's telemetry (none before it exists)."""
    import json

    if not telemetry.exists():
        return {}
    records = [json.loads(line) for line in telemetry.read_text().splitlines() if line]
    return {r["notice_id"]: r["step"] for r in records if r["kind"] == "ack" and r["notice_id"]}


def _rfc3339(moment: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(moment, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_the_background_loop_of_the_checkpoint_page_runs_as_pasted(tmp_path: Path) -> None:
    """docs/checkpoint.md's `CheckpointGuard(background=True)` loop, run as written with the
    installed CPU torch on a local store: a terminate mid-run saves that step and exits 143,
    and the job started again resumes from it (`load_state(latest)`) and finishes with 0."""
    import sys

    torch = pytest.importorskip("torch")
    import forewarn.clients.checkpoint as checkpoint
    from forewarn.clients import CheckpointGuard

    page = (ROOT / "docs" / "checkpoint.md").read_text()
    section = page.split("### Through `CheckpointGuard`", 1)[1]
    code = re.search(r"```python\n(.+?)```", section, re.S)
    assert code and "background=True" in code.group(1)
    made: list[CheckpointGuard] = []

    class Quiet(CheckpointGuard):
        def __init__(self, *args: object, **options: object) -> None:
            options.update(notices=False, flag_file=None, handle_signals=False)
            super().__init__(*args, **options)  # type: ignore[arg-type]
            made.append(self)

    store = checkpoint.CheckpointStore(str(tmp_path / "store"))
    model = torch.nn.Linear(4, 2)
    # A stand-in optimizer: importing torch.optim loads TorchDynamo, seconds of CPU.
    opt = types.SimpleNamespace(state_dict=lambda: {"lr": torch.tensor(0.1)})
    resumed_at: list[int] = []

    def run_job(terminate_at: int | None) -> object:
        """The page's lines as one job runs them; its exit code."""
        loop: dict[str, Any] = {
            "CheckpointGuard": Quiet,
            "store": store,
            "model": model,
            "opt": opt,
            "sys": sys,
            "total_steps": 1300,
        }

        def train_one_step() -> None:
            if len(resumed_at) < len(codes) + 1:
                resumed_at.append(loop["step"])
            if loop["step"] + 1 == terminate_at:
                made[-1].request("terminate", exit=True)

        loop["train_one_step"] = train_one_step
        with pytest.raises(SystemExit) as exited:
            exec(code.group(1), loop)
        return exited.value.code

    codes: list[object] = []
    try:
        for terminate_at in (700, None):  # the first job, then its replacement
            codes.append(run_job(terminate_at))
    finally:
        for guard in made:
            guard.close()
    assert codes == [143, 0]
    assert resumed_at == [0, 700]
    latest = store.latest()
    assert latest is not None and latest.step == 1300
    assert set(checkpoint.load_state(latest)) == {"model", "optim"}


# FOREWARN_ names the docs give as what not to write (a typo the agent refuses) or that are
# not the agent's (the image's build argument).
NOT_VARIABLES = {
    "FOREWARN_EXIT_MARGN": "typo",
    "FOREWARN_DIGITAL_OCEAN_IMAP_HOST": "typo",
    "FOREWARN_PROVIDER": "typo",
    "FOREWARN_CONFIG_FILE": "typo",
    "FOREWARN_EXTRAS": "the Dockerfile's build argument",
}


def test_every_forewarn_variable_the_docs_name_is_read() -> None:
    """A FOREWARN_ name in the README or docs/*.md is a setting's variable, FOREWARN_CONFIG,
    or one of the store's and the mailbox's own (FOREWARN_CHECKPOINT_*, FOREWARN_IMAP_*),
    spelt as the code reads it: a name the docs got wrong would be set by users and ignored.
    The typos the docs show as refused stay refused."""
    from forewarn.agent.config import settings_model, variable_problem
    from forewarn.clients.checkpoint import store
    from forewarn.providers.digitalocean import imap

    model = settings_model()
    named = set(re.findall(r"FOREWARN_[A-Z0-9_]*[A-Z0-9]", DOCS))
    assert len(named) > 40, named
    others = re.findall(r'"(FOREWARN_(?:CHECKPOINT|IMAP)_\w+)"', inspect.getsource(store))
    others += re.findall(r'"(FOREWARN_IMAP_\w+)"', inspect.getsource(imap))
    wrong = []
    for name in sorted(named):
        if name in NOT_VARIABLES:
            if NOT_VARIABLES[name] == "typo":
                assert variable_problem(name, model, strict=True), name
            continue
        prefix_of_others = name.startswith(("FOREWARN_CHECKPOINT_", "FOREWARN_IMAP_"))
        if prefix_of_others and name not in others:
            wrong.append(f"{name}: the code reads {sorted(set(others))}")
        elif variable_problem(name, model, strict=True):
            wrong.append(f"{name}: {variable_problem(name, model, strict=True)}")
    assert not wrong, wrong


def _command_lines(text: str) -> list[str]:
    """Each `forewarn ...` command the text writes: in a code span, or a line of a code block
    (joined across `\\` continuations and the indented `[--flag]` lines of a synopsis)."""
    found = re.findall(r"`(forewarn [^`]+)`", text)
    for block in re.findall(r"^ *```[a-z]*\n(.*?)^ *```", text, re.S | re.M):
        current = None
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            stripped = line.strip()
            start = re.search(r"(?:^|[\s/$(;&|])(forewarn [^#]*)", stripped)
            if start:
                current = len(found)
                found.append(start.group(1))
            elif current is not None and stripped.startswith("["):
                found[current] += " " + stripped
            else:
                current = None
    return found


def test_every_option_the_docs_give_a_command_is_one_of_its_own() -> None:
    """`forewarn drill gcp --project P ... --poll-interval 2s`: each flag a command line or
    synopsis of the README or docs/*.md writes after `forewarn <command>` is an option of
    that command (subcommands of subcommands included), not one of another's. The check
    above only asks that a flag exist somewhere."""
    parsers = {path: parser for path, parser in _parsers(build_parser())}
    options = {
        path: {name for action in parser._actions for name in action.option_strings}
        for path, parser in parsers.items()
    }
    checked, wrong = 0, []
    for line in _command_lines(DOCS.replace("\\|", "|")):
        # A quoted argument is another program's command line (`--training-command '...'`).
        words = re.sub(r"'[^']*'|\"[^\"]*\"", "''", line).split()[1:]
        paths: list[tuple[str, ...]] = [()]
        for word in words:
            nexts = [(*p, w) for p in paths for w in word.split("|") if (*p, w) in parsers]
            if not nexts and word.isupper():  # `forewarn simulate PROVIDER`: each of them
                nexts = [q for q in parsers for p in paths if len(q) == len(p) + 1 and q[:-1] == p]
            if not nexts:
                break
            paths = nexts
        flags = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", " ".join(words)))
        for path in paths:
            if path:
                checked += 1
                wrong += [f"{line}: {flag}" for flag in flags - options[path] - {"--debug"}]
    assert checked > 150, checked
    assert not wrong, wrong


PROVIDER_PAGES = ("aws", "azure", "gcp", "digitalocean", "kubernetes")


@pytest.mark.parametrize("provider", PROVIDER_PAGES)
def test_each_provider_page_s_synopses_list_every_option_of_their_command(provider: str) -> None:
    """docs/gcp.md's `forewarn simulate gcp` synopsis left out `--ready-file`, `--fault`,
    `--notice` and `--date-ahead`, which its table and `--help` have: a reader who copies the
    synopsis never learns the options the rest of the page's examples use. Each provider
    page has a synopsis block for `forewarn simulate <provider>` and `forewarn drill
    <provider>`, and each names every option of that command's `--help`."""
    parsers = {path: parser for path, parser in _parsers(build_parser())}
    page = (ROOT / "docs" / f"{provider}.md").read_text()
    seen, wrong = set(), []
    for block in re.findall(r"^ *```[a-z]*\n(.*?)^ *```", page, re.S | re.M):
        match = re.match(rf"forewarn (simulate|drill) {provider} ", block)
        if not match or not re.search(r"[\[(]--", block):  # an example, not a synopsis
            continue
        path = (match.group(1), provider)
        seen.add(path)
        written = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", block))
        options = {
            name
            for action in parsers[path]._actions
            for name in action.option_strings
            if name.startswith("--") and name != "--help"
        }
        wrong += [f"forewarn {' '.join(path)}: {flag}" for flag in sorted(options - written)]
    assert seen == {("simulate", provider), ("drill", provider)}, seen
    assert not wrong, wrong


def test_no_help_gives_a_default_as_a_bare_value_in_parentheses() -> None:
    """`forewarn simulate gcp --help` said of --upcoming-after "it starts --upcoming-in after
    that (7d)", where every other help says "(default 7d)": a bare value in parentheses reads
    as a fixed 7 days, not a default --upcoming-in changes."""
    bare = [
        f"forewarn {' '.join(path)} {'/'.join(action.option_strings)}: {found.group()}"
        for path, parser in _parsers(build_parser())
        for action in parser._actions
        for found in re.finditer(r"\([0-9][0-9.]*[a-z]*\)", action.help or "")
    ]
    assert bare == []


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_no_page_says_a_paragraph_twice() -> None:
    """docs/operations.md's webhook section gave its paragraph on the notifier metrics twice
    in a row (a merge of two edits): a reader following the page took the second for a
    further step. Paragraphs of prose are compared, code blocks left out."""
    repeated = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        prose = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        seen: set[str] = set()
        for paragraph in re.split(r"\n\s*\n", prose):
            words = " ".join(paragraph.split())
            if len(words.split()) > 8 and words in seen:
                repeated.append(f"{page.name}: {words[:80]}")
            seen.add(words)
    assert repeated == []


def test_the_readme_s_way_with_an_emptydir_is_the_sidecar_overlay_s(tmp_path: Path) -> None:
    """The README told a pod spec of one's own to `chmod o-w` the shared emptyDir "(or mount
    it with an fsGroup)" and use it as the runtime directory. The kubelet makes an emptyDir
    root's and writable by all, 2777 with an fsGroup: the agent refuses it (another uid's,
    and writable by others), so a pod written from the README ran its job with no agent, and
    a cloud reclaim (no SIGTERM) lost the work since the last periodic save. The sidecar
    overlay has the agent make a directory of its own inside; the README now says that."""
    import yaml
    from forewarn.agent.rundir import RunDirError, check_private_dir

    volume = tmp_path / "emptydir"
    volume.mkdir()
    volume.chmod(0o2777)  # an emptyDir with fsGroup, as tests/packaging/test_shared_sockets.py
    with pytest.raises(RunDirError, match="writable by every user"):
        check_private_dir(volume, "runtime directory")
    overlay = ROOT / "packaging" / "kubernetes" / "overlays" / "sidecar-job"
    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    (literals,) = [g["literals"] for g in kustomization["configMapGenerator"]]
    (runtime,) = [line.split("=", 1)[1] for line in literals if "FOREWARN_RUNTIME_DIR=" in line]
    bullet = README.split("- **The runtime directory**", 1)[1].split("\n- **", 1)[0]
    said = " ".join(bullet.split())
    assert "fsGroup`) before" not in said, said
    assert f"FOREWARN_RUNTIME_DIR={runtime}" in said, said


def test_every_forewarn_unit_the_docs_name_is_one_the_project_ships() -> None:
    """docs/gcp.md told the boot script that raises the max-run-duration notice to be "a
    systemd unit ordered After=forewarn.service": the agent's unit is forewarn-agent.service.
    systemd takes an After= on a unit that does not exist without a word, so the script ran
    before the agent was up, its `notify` found no agent (exit 1), and the notice that saves
    the job before its planned end was never raised."""
    shipped = {unit.name for unit in (ROOT / "packaging").rglob("*.service")}
    assert "forewarn-agent.service" in shipped, shipped
    packaging = "".join(
        path.read_text() for path in sorted((ROOT / "packaging").rglob("*")) if path.is_file()
    )
    named = set(re.findall(r"(?<![\w@-])(forewarn[\w@-]*\.service)\b", DOCS + packaging))
    assert "forewarn-agent.service" in named, named
    assert sorted(named - shipped) == []


def _exit_code_words() -> dict[str, str]:
    """The README's `Exit codes:` list: each code's words."""
    listing = README[README.index("Exit codes:") :]
    listing = listing[: listing.index("Durations read")]
    parts = re.split(r"\*\*(\d+)\*\*", listing)
    return {code: words for code, words in zip(parts[1::2], parts[2::2], strict=True)}


def test_the_exit_codes_the_readme_lists_are_the_checkpoint_command_s_too() -> None:
    """`forewarn checkpoint get` exits 3 on an unreadable store, and `verify` 1 on a corrupt
    generation; the README's list said 3 was only "no agent is heard (`wait`, `watch`)"."""
    from forewarn.agent import checkpoint_cli
    from forewarn.agent.cli import NO_AGENT_EXIT

    words = _exit_code_words()
    assert "`wait`, `watch`" in words[str(NO_AGENT_EXIT)]
    assert "`checkpoint`" in words[str(checkpoint_cli.EXIT_UNREADABLE)]
    assert "could not be read" in words[str(checkpoint_cli.EXIT_UNREADABLE)]
    assert "`checkpoint verify`" in words[str(checkpoint_cli.EXIT_CORRUPT)]
    assert "`ack`" in words["1"]


def test_the_agent_s_help_gives_the_defaults_its_readme_table_gives() -> None:
    """`forewarn agent --help` said `--runtime-dir`: "directory of the sockets and flag file"
    and `--state-dir`: "directory of the state file", with no default, where the README's
    table gives both (and the state directory holds telemetry and the watchers' files too):
    an operator asking the agent where its state goes was not told. Found comparing the
    README's agent table with `--help`."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args(["agent", "--help"])
    flat = " ".join(out.getvalue().split())
    assert "/run/forewarn" in flat and "$XDG_RUNTIME_DIR/forewarn" in flat, flat
    assert "/tmp/forewarn-<uid>" in flat, flat
    assert "/var/lib/forewarn" in flat and "~/.local/state/forewarn" in flat, flat
    assert "telemetry" in flat, flat


def test_the_store_loop_as_pasted_resumes_past_a_newest_generation_that_does_not_load(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The same loop, with a byte flipped in the newest generation's model.pt after the
    first job (sizes right, so `latest()` returns it): its `resume_from` read the file
    (checksum-checked) and raised CorruptGenerationError, at every restart, though the
    generation before was sound."""
    import pickle

    import forewarn.clients
    from forewarn.clients import CheckpointGuard

    section = README.split("## Checkpoints that verify before resume", 1)[1]
    code = re.search(r"```python\n(.+?)```", section, re.S)
    assert code and '"s3://my-bucket/runs/7b"' in code.group(1)
    made: list[CheckpointGuard] = []

    class Quiet(CheckpointGuard):
        def __init__(self, *args: object, **options: object) -> None:
            options.update(notices=False, flag_file=None, handle_signals=False)
            super().__init__(*args, **options)  # type: ignore[arg-type]
            made.append(self)

    monkeypatch.setattr(forewarn.clients, "CheckpointGuard", Quiet)
    store_path = tmp_path / "store"
    source = code.group(1).replace('"s3://my-bucket/runs/7b"', repr(str(store_path)))
    resumed: list[int] = []

    def resume_from(generation: Any) -> int:
        pickle.loads(generation.read_bytes("model.pt"))
        resumed.append(generation.step)
        return int(generation.step)

    try:
        for total_steps in (1300, 2500):  # the first job, then its replacement
            loop = {
                "resume_from": resume_from,
                "train_one_step": lambda: None,
                "serialize": lambda model: pickle.dumps(model),
                "model": {"weights": 1},
                "total_steps": total_steps,
            }
            with pytest.raises(SystemExit) as exited:
                exec(source, loop)
            assert exited.value.code == 0
            if total_steps == 1300:
                model = store_path / "step-000000001200" / "model.pt"
                data = bytearray(model.read_bytes())
                data[-1] ^= 0xFF
                model.write_bytes(bytes(data))
    finally:
        for guard in made:
            guard.close()
    assert resumed == [600]


def test_every_option_with_a_default_says_it_in_its_help() -> None:
    """`forewarn simulate gcp --help` said `--project`: "project/project-id" and `simulate
    digitalocean --help` `--region`: "the region served", with no word of the `forewarn-sim`
    and `nyc2` they serve when not given (the provider pages' tables had them): a user
    pointing the agent's `gcp.project` or a check at the simulator from `--help` alone could
    not tell what it answers. Found comparing each command's `--help` with the docs' tables;
    `render cloud-init --training-dir` said nothing of `/srv/training` either."""
    parser = build_parser()
    silent = []
    for path, option in _walk(parser):
        if option is None:
            continue
        sub = parser
        for name in path:
            (choices,) = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
            sub = choices.choices[name]
        (action,) = [a for a in sub._actions if option in a.option_strings]
        if action.default in (None, False, [], "", argparse.SUPPRESS):
            continue
        if "default" not in (action.help or "") or str(action.default) not in _help_of(sub, action):
            silent.append(f"{' '.join(path)} {option} ({action.default!r})")
    assert not silent, f"a default --help does not give: {silent}"


def _help_of(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help line as `--help` prints it (with `%(default)s` filled in), or, for a
    duration or a share, its default written as the help writes one (`30s` for 30.0, `10%`
    for 0.1)."""
    text = parser._get_formatter()._expand_help(action)
    if isinstance(action.default, float):
        number = f"{action.default:g}"
        if re.search(rf"(?<![\d.]){re.escape(number)}(?:s|m|h|d)?(?![\d.])", text):
            return text + str(action.default)
        minutes = action.default / 60
        if minutes == int(minutes) and f"{int(minutes)}m" in text:
            return text + str(action.default)
        if f"{action.default * 100:g}%" in text:  # a share: `--warn-tax` (default 10%)
            return text + str(action.default)
    return text


# The option tables of the docs, each by the page, the first cell of its first row and the
# command whose options it lists.
_OPTION_TABLES = [
    ("README.md", "`--provider NAME`", ("agent",)),
    *[("README.md", "`--host H`", ("simulate", name)) for name in ("aws", "gcp", "azure")],
    ("README.md", "`--host H`", ("simulate", "kubernetes")),
    ("docs/gcp.md", "`--project`, `--zone`, `--instance-name`", ("simulate", "gcp")),
    ("docs/kubernetes.md", "`--node`", ("simulate", "kubernetes")),
    ("docs/operations.md", "`--source URL`", ("render", "cloud-init")),
    ("docs/plan.md", "`--telemetry PATH`", ("plan",)),
]


def _table_rows(page: str, first: str) -> list[list[str]]:
    lines = (ROOT / page).read_text().splitlines()
    (start,) = [i for i, line in enumerate(lines) if line.startswith(f"| {first} |")]
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def _seconds(text: str) -> float | None:
    found = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(s|m|h|d)?", text)
    if not found:
        return None
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}[found.group(2) or "s"]
    return float(found.group(1)) * unit


def test_the_defaults_the_docs_tables_give_are_the_commands_own() -> None:
    """Each option table of the README and docs/*.md gives a default per option: the one
    the option takes when not given (argparse's, or the one its `--help` names when that is
    resolved later: `agent --exit-margin`, `30s`). The check that every option is documented
    found the option's name anywhere; a table's default drifting from the code's passed."""
    parsers = dict(_parsers(build_parser()))
    checked, wrong = 0, []
    for page, first, path in _OPTION_TABLES:
        parser = parsers[path]
        for cells in _table_rows(page, first):
            names = re.findall(r"`(--[a-z0-9-]+)", cells[0])
            if len(names) != 1 or len(cells) < 3:
                continue
            (action,) = [a for a in parser._actions if names[0] in a.option_strings]
            said = re.sub(r"\s*\(.*", "", cells[1]).strip()
            default = action.default
            shown = parser._get_formatter()._expand_help(action) if action.help else ""
            given = re.search(r"(?:\(|; )default:? ([^;)]*)", shown)
            stated = given.group(1).strip() if given else None
            literal = said.strip("`")
            if said in ("off", "none", "unset"):
                ok = default in (None, False, []) and stated in (None, "none", "off")
            elif said == "required":
                ok = action.required
            elif _seconds(literal) is not None:
                value = default if default is not None else stated and _seconds(stated)
                ok = value is not None and float(value) == _seconds(literal)
            elif said.startswith("`") and said.endswith("`") and "`" not in literal:
                ok = literal in (str(default), stated)
            else:
                continue  # prose: `see [Sockets](#sockets)`, `size over --bandwidth, ...`
            checked += 1
            if not ok:
                wrong.append(f"{page} {' '.join(path)} {names[0]}: {said!r}, code {default!r}")
    assert checked > 30, checked
    assert not wrong, wrong


def _subcommand_help(command: str, name: str) -> str:
    """The line `forewarn COMMAND --help` gives subcommand NAME (`forewarn --help`'s: "")."""
    parser = dict(_parsers(build_parser()))[(command,) if command else ()]
    (choices,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    (line,) = [a.help for a in choices._choices_actions if a.dest == name]
    return str(line)


def test_the_digitalocean_lines_of_simulate_and_drill_help_say_what_the_docs_say() -> None:
    """`forewarn simulate --help` called the DigitalOcean simulator "a faithful simulator of
    DigitalOcean Spot reclaim email over IMAP, with droplet metadata", and `forewarn drill
    --help` its drill "trigger digitalocean's real test path". The README and
    docs/digitalocean.md say the simulator serves only droplet metadata (the mailbox is a
    real IMAP server) and that DigitalOcean has no test path: its drill files a test reclaim
    mail. A user reading `--help` looked for an IMAP port on the simulator."""
    assert "serves only droplet metadata" in " ".join(README.split())
    simulator = _subcommand_help("simulate", "digitalocean")
    assert "droplet metadata" in simulator and "over IMAP" not in simulator, simulator
    drill = _subcommand_help("drill", "digitalocean")
    assert "real test path" not in drill and "mail" in drill, drill
    for name in ("aws", "gcp", "azure", "kubernetes"):
        assert _subcommand_help("drill", name) == f"trigger {name}'s real test path"


def test_forewarn_help_s_exit_codes_name_the_commands_the_readme_s_list_names() -> None:
    """`forewarn --help` ended "1 failed (notify and status: also no agent, or no answer),
    2 bad input, 3 no agent heard (wait, watch)": the README's list has `ack` among the
    commands exiting 1 for no agent, `checkpoint verify` 1 on a corrupt generation and
    `checkpoint` 3 on a store it could not read. A restart script reading `--help` took a
    `checkpoint get` exit 3 for "no agent"."""
    epilog = " ".join((build_parser().epilog or "").split())
    commands = {path[0] for path, option in _walk(build_parser()) if option is None}
    clauses = dict(re.findall(r"(?<![\w-])(\d+) (.*?)(?=, \d+ |\. |$)", epilog))
    missing = []
    for code, words in _exit_code_words().items():
        named = set(re.findall(r"`([a-z]+)", words)) & commands
        missing += [f"{code}: {name}" for name in sorted(named) if name not in clauses[code]]
    assert not missing, (missing, epilog)


def test_forewarn_help_s_checkpoint_line_names_every_action_its_own_help_gives() -> None:
    """`forewarn --help` said `checkpoint`: "list, verify and prune checkpoint stores", and
    a user looking there for how to copy a generation out for a restart (`checkpoint get`,
    the README's restart-script command) or to read a manifest (`show`) was not told."""
    described = " ".join((dict(_parsers(build_parser()))[("checkpoint",)].description).split())
    line = _subcommand_help("", "checkpoint")
    for action in ("list", "inspect", "verify", "copy out", "prune"):
        assert action in described.lower(), described
        assert action in line, line


def test_drill_local_s_help_gives_each_default_it_fills_in() -> None:
    """`forewarn drill local --help` said `--provider`: "notice source: local (control
    socket) or a provider simulator (aws, ...)" with no default, where the README's commands
    table says `local`: the parser's default is None (an option a drill does not use is
    refused), and the drill fills in its own, which the check on parser defaults misses."""
    from forewarn.agent import cli

    parser = dict(_parsers(build_parser()))[("drill", "local")]
    silent = []
    for table in (cli._QUICK_OPTIONS, cli._BACKGROUND_OPTIONS, cli._SCENARIO_OPTIONS):
        for flag, (_dest, default) in table.items():
            if default is None:
                continue
            (action,) = [a for a in parser._actions if flag in a.option_strings]
            text = " ".join(parser._get_formatter()._expand_help(action).split())
            number = f"{default:g}" if isinstance(default, float) else str(default)
            if not re.search(
                rf"default:? {re.escape(number)}|{re.escape(number)}s? \(default", text
            ):
                silent.append(f"{flag} ({default!r}): {text}")
    assert not silent, silent


def test_docs_gcp_s_simulator_table_lists_every_option_of_simulate_gcp() -> None:
    """docs/gcp.md's simulator table gave the options "shared by every simulator" as
    `--host`, `--port`, `--ready-file`, `--fault`, `--notice`: `--date-ahead`, shared by every
    simulator too (the README's table), was missing from the page's list."""
    parser = dict(_parsers(build_parser()))[("simulate", "gcp")]
    own = {max(a.option_strings, key=len) for a in parser._actions if a.option_strings}
    first = "`--host`, `--port`, `--ready-file`, `--fault`, `--notice`, `--date-ahead`"
    rows = _table_rows("docs/gcp.md", first)
    listed = {name for cells in rows for name in re.findall(r"`(--[a-z0-9-]+)", cells[0])}
    assert sorted(own - {"--help"} - listed) == []
    assert sorted(listed - own) == []


def test_the_test_command_says_where_pip_would_take_a_cuda_torch() -> None:
    """The test line's `[test]` extra pins torch==2.13.0, which this project's machines take
    from a local CPU wheel; elsewhere pip takes PyPI's Linux build and its CUDA libraries
    (several GB). pyproject.toml said so, the README did not: the note beside the line names
    the CPU index a user installs it from first."""
    after = README.split("<!-- /test-command -->", 1)[1]
    note = after.split("How the code is laid out", 1)[0]
    assert "CUDA" in note and "https://download.pytorch.org/whl/cpu" in note, note


def test_the_readme_gives_every_argument_of_the_c_subscriber() -> None:
    """The C subscriber's own usage line (its source's `Run:` comment, and what it prints on a
    bad argument) against the README's paragraph on it: the paragraph gave `--replays` and
    `--settle` but neither the ENDPOINT argument nor `--count N`, which ends it after N notices."""
    source = (ROOT / "clients" / "c" / "forewarn_sub.c").read_text()
    usage = re.search(r"\* Run:\s+\./forewarn_sub (.+)", source)
    assert usage
    arguments = re.findall(r"\[(--[\w-]+(?: [A-Z]+)?|[A-Z]+)\]", usage.group(1))
    assert len(arguments) == 4, usage.group(1)
    paragraph = README.split("From C: [`clients/c/forewarn_sub.c`]", 1)[1].split("\n\n", 1)[0]
    missing = [argument for argument in arguments if f"`{argument}" not in paragraph]
    assert not missing, f"the README's C paragraph leaves out {missing}"


def test_the_training_loop_says_to_import_forewarn_before_the_dataloader_starts() -> None:
    """The lines to add, pasted below a DataLoader that already started its workers (a
    `persistent_workers=True` loader iterated once, as a real torch loop run here did): the
    guard warned that those workers end on a job-wide SIGTERM and torch raises in the loop
    before its save. The section now says where the import goes, before the guard warns."""
    section = README.split("## Add it to a training loop", 1)[1].split("\n## ", 1)[0]
    prose = section.split("```python", 1)[0]
    assert "DataLoader" in prose and "import" in prose, prose
