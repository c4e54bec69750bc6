"""The cloud-init template: it renders, passes `cloud-init schema`, and carries the units."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from forewarn.agent.config import ConfigError, load_settings
from forewarn.agent.deploy.cloud_init import RenderError, render
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples, run_forewarn_here

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "packaging" / "systemd"
WHEEL_URL = "https://downloads.example.org/forewarn-0.1.0-py3-none-any.whl"
Tool = Callable[[str], str]


def run_render(
    *args: str, source: str | None = WHEEL_URL, process: bool = False
) -> subprocess.CompletedProcess[str]:
    """`forewarn render cloud-init ARGS`: through the command's `main` in this process (the
    renderer reads only its arguments), or with `process` as the installed command runs."""
    sourced = ("--source", source) if source is not None else ()
    if not process:
        return run_forewarn_here("render", "cloud-init", *sourced, *args)
    return subprocess.run(
        [sys.executable, "-m", "forewarn.agent.cli", "render", "cloud-init", *sourced, *args],
        capture_output=True,
        text=True,
        timeout=30,
    )


def schema(tool: Tool, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("cloud-init"), "schema", "--config-file", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


ARGS = (
    "--env",
    "FOREWARN_PROVIDERS=aws",
    "--env",
    'FOREWARN_DIGITALOCEAN_SUBJECT=json "quoted" \\ value',
    "--training-env",
    "CHECKPOINT_URL=s3://bucket/run-7",
    "--training-user",
    "ml",
    "--training-dir",
    "/srv/run7",
    "--training-command",
    "/srv/run7/.venv/bin/torchrun --nproc-per-node 8 train.py",
)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The document the schema and systemd checks read comes from the command as installed.
    result = run_render(*ARGS, process=True)
    assert result.returncode == 0, result.stderr
    path = tmp_path_factory.mktemp("cloud-init") / "user-data.yaml"
    path.write_text(result.stdout)
    return path


def test_rendered_user_data_passes_cloud_init_schema(rendered: Path, tool: Tool):
    result = schema(tool, rendered)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Valid cloud-config" in result.stdout


def test_defaults_pass_cloud_init_schema(tmp_path: Path, tool: Tool):
    result = run_render("-o", str(tmp_path / "user-data.yaml"))
    assert result.returncode == 0, result.stderr
    checked = schema(tool, tmp_path / "user-data.yaml")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_schema_check_catches_a_broken_config(tmp_path: Path, tool: Tool):
    broken = tmp_path / "user-data.yaml"
    broken.write_text("#cloud-config\nruncmd: 5\nwrite_files: [{content: x}]\n")
    assert schema(tool, broken).returncode != 0


def files(config: dict[str, Any]) -> dict[str, str]:
    return {entry["path"]: entry["content"] for entry in config["write_files"]}


def test_user_data_installs_writes_and_starts_everything(rendered: Path):
    text = rendered.read_text()
    assert text.startswith("#cloud-config\n")
    assert "@@" not in text and "${" not in text and "##" not in text
    config = yaml.safe_load(text)
    written = files(config)
    assert (
        written["/etc/systemd/system/forewarn-agent.service"]
        == (SYSTEMD / "forewarn-agent.service").read_text()
    )
    assert written["/etc/forewarn/forewarn.env"] == (
        'FOREWARN_PROVIDERS="aws"\nFOREWARN_DIGITALOCEAN_SUBJECT="json \\"quoted\\" \\\\ value"\n'
    )
    assert written["/etc/forewarn/training.env"] == 'CHECKPOINT_URL="s3://bucket/run-7"\n'
    training = written["/etc/systemd/system/training.service"]
    assert "\nUser=ml\n" in training and "\nGroup=ml\n" in training
    assert "\nWorkingDirectory=/srv/run7\n" in training
    assert "\nExecStart=/srv/run7/.venv/bin/torchrun --nproc-per-node 8 train.py\n" in training
    assert "\nAfter=forewarn-agent.service" in training

    users = {user["name"]: user for user in config["users"] if isinstance(user, dict)}
    assert users["ml"]["groups"] == ["forewarn"]
    assert users["forewarn"]["system"] is True
    runcmd = config["runcmd"]
    assert [
        "/opt/forewarn/venv/bin/pip",
        "install",
        "--no-cache-dir",
        f"forewarn[metrics] @ {WHEEL_URL}",
    ] in runcmd
    starts = [cmd for cmd in runcmd if cmd[:3] == ["systemctl", "enable", "--now"]]
    assert starts == [
        ["systemctl", "enable", "--now", "forewarn-agent.service"],
        ["systemctl", "enable", "--now", "training.service"],
    ]
    install = runcmd.index(
        ["ln", "-sf", "/opt/forewarn/venv/bin/forewarn", "/usr/local/bin/forewarn"]
    )
    assert install < runcmd.index(starts[0])


def test_a_training_user_the_image_already_has_joins_forewarn_before_the_job_starts(
    rendered: Path,
):
    """cloud-init skips a user that exists ("User ml already exists, skipping"), groups and
    all: on an image with the training user built in, the job ran outside `forewarn` and
    could not open the agent's sockets. runcmd adds the membership itself."""
    runcmd = yaml.safe_load(rendered.read_text())["runcmd"]
    join = runcmd.index(["usermod", "-aG", "forewarn", "ml"])
    assert join < runcmd.index(["systemctl", "enable", "--now", "training.service"])


def test_rendered_units_pass_systemd_analyze_verify(rendered: Path, tmp_path: Path, tool: Tool):
    analyze = tool("systemd-analyze")
    stand_in = tmp_path / "program"
    stand_in.write_text("#!/bin/sh\n")
    stand_in.chmod(0o755)
    units = []
    for path, content in files(yaml.safe_load(rendered.read_text())).items():
        if path.endswith(".service"):
            for program in ("/usr/local/bin/forewarn", "/srv/run7/.venv/bin/torchrun"):
                content = content.replace(program, str(stand_in))
            unit = tmp_path / Path(path).name
            unit.write_text(content)
            units.append(str(unit))
    assert len(units) == 2
    result = subprocess.run([analyze, "verify", *units], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert str(tmp_path) not in result.stdout + result.stderr


def test_the_default_command_runs_the_script_of_the_training_dir_given():
    """The default command named /srv/training/train.py: with --training-dir /srv/run7 alone
    the job ran a script in a directory nothing had created, not the one in its own."""
    result = run_render("--training-dir", "/srv/run7")
    assert result.returncode == 0, result.stderr
    unit = files(yaml.safe_load(result.stdout))["/etc/systemd/system/training.service"]
    assert "\nWorkingDirectory=/srv/run7\n" in unit
    assert "\nExecStart=/opt/forewarn/venv/bin/python train.py\n" in unit


def test_a_percent_sign_reaches_the_job_as_written(tmp_path: Path, tool: Tool):
    """systemd reads `%` in ExecStart= and WorkingDirectory= as a specifier: unescaped, `%z`
    failed the unit and `%a`, `%Y`, `%m` or `%d` were silently replaced."""
    command = "/srv/run%a/.venv/bin/torchrun train.py --name run-%Y%m%d --val-split 5%z"
    result = run_render("--training-dir", "/srv/run%a", "--training-command", command)
    assert result.returncode == 0, result.stderr
    content = files(yaml.safe_load(result.stdout))["/etc/systemd/system/training.service"]
    assert "\nWorkingDirectory=/srv/run%%a\n" in content
    assert "\nExecStart=/srv/run%%a/.venv/bin/torchrun train.py --name run-%%Y%%m%%d" in content
    stand_in = tmp_path / "run%a" / "torchrun"
    stand_in.parent.mkdir()
    stand_in.write_text("#!/bin/sh\n")
    stand_in.chmod(0o755)
    unit = tmp_path / "training.service"
    unit.write_text(
        content.replace("/srv/run%%a/.venv/bin/torchrun", str(stand_in).replace("%", "%%"))
    )
    verified = subprocess.run(
        [tool("systemd-analyze"), "verify", str(unit)], capture_output=True, text=True
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.parametrize("unit", ["train@run-7.service", "a:b.service", "x.y.service"])
def test_every_accepted_unit_name_is_written_and_started_as_given(
    unit: str, tmp_path: Path, tool: Tool
):
    """Written as a quoted scalar: bare, a name such as `@7.service` made the YAML unparsable."""
    path = tmp_path / "user-data.yaml"
    result = run_render("--training-unit", unit, "-o", str(path))
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(path.read_text())
    assert f"/etc/systemd/system/{unit}" in files(config)
    assert config["runcmd"][-2] == ["systemctl", "enable", "--now", unit]
    checked = schema(tool, path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_training_command_reaches_systemd_as_the_words_given(tmp_path: Path, tool: Tool):
    """Written as given, systemd split it its own way: `\\t` became a tab, `a\\ b` a warning,
    and a lone `;` a second ExecStart=, which a Type=exec unit refuses (the job never ran)."""
    program = tmp_path / "my venv" / "bin" / "python"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    argv = [str(program), "train.py", "--sep", "\\t", "--name", 'it\'s a "run"', ";x", "a\\ b", ""]
    result = run_render("--training-command", shlex.join(argv))
    assert result.returncode == 0, result.stderr
    content = files(yaml.safe_load(result.stdout))["/etc/systemd/system/training.service"]
    (line,) = [x for x in content.splitlines() if x.startswith("ExecStart=")]
    assert line == (
        f'ExecStart="{program}" train.py --sep "\\\\t" --name "it\'s a \\"run\\"" ";x" "a\\\\ b" ""'
    )
    assert systemd_words(line.removeprefix("ExecStart=")) == argv
    unit = tmp_path / "training.service"
    unit.write_text(content)
    verified = subprocess.run(
        [tool("systemd-analyze"), "verify", str(unit)], capture_output=True, text=True
    )
    # The program found under its quoted path, and no "Ignoring unknown escape sequences".
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "escape" not in verified.stdout + verified.stderr


@pytest.mark.parametrize("operator", [";", "&&", "|", ">"])
def test_a_shell_operator_in_the_training_command_is_refused(operator: str):
    """ExecStart= runs no shell: `train.py ; echo done` made a unit systemd refuses to load."""
    result = run_render("--training-command", f"/usr/bin/python train.py {operator} echo done")
    assert result.returncode == 2
    assert f"--training-command: {operator}: no shell runs it" in result.stderr
    assert "/bin/sh -c" in result.stderr


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (("--env", "NOEQUALS"), "--env 'NOEQUALS'"),
        (("--env", "1BAD=x"), "--env '1BAD=x'"),
        (("--env", "KEY\n=x"), "--env 'KEY\\n=x'"),
        (("--training-env", "A=line\nbreak"), "--training-env A: a value cannot span lines"),
        # Line breaks beyond \n: each split a unit or env line (U+2028 put `User=root` on a
        # line of its own in the training unit), and YAML refuses other control characters.
        (("--training-command", "/bin/x\nUser=root"), "--training-command: a value cannot span"),
        (("--training-command", "/bin/x\u2028User=root"), "--training-command: a value cannot"),
        (("--training-command", "/bin/x a\x01b"), "--training-command: a value cannot span"),
        (("--env", "A=x\x0cy"), "--env A: a value cannot span lines"),
        (("--training-env", "A=x\x85y"), "--training-env A: a value cannot span lines"),
        (("--env", "A=x\x7fy"), "--env A: a value cannot span lines"),
        (("--training-dir", "/srv/a\x01b"), "--training-dir: a value cannot span lines"),
        (("--package", "torch\x85"), "a value cannot span lines"),
        (("--training-user", "root"), "--training-user 'root'"),
        # cloud-init reads a user named `default` as the image's default user (ubuntu): the
        # unit's User=default and `install -o default` named a user that never existed.
        (("--training-user", "default"), "--training-user 'default': cloud-init reads it as"),
        (("--training-dir", "relative"), "--training-dir 'relative'"),
        # `install -d -o ml` would give these to the training user: the root file system,
        # every home, forewarn's own programs (run by root), /etc by way of `..`.
        (("--training-dir", "/"), "--training-dir '/': a directory of the system"),
        (("--training-dir", "/home"), "--training-dir '/home': a directory of the system"),
        (("--training-dir", "/opt/forewarn/venv"), "'/opt/forewarn/venv': a directory of the"),
        (("--training-dir", "/srv/../etc"), "--training-dir '/srv/../etc': write it plainly"),
        # `install -d -o ml -g ml` made these ml's, mode 0755: /var/tmp lost its sticky bit,
        # /var/lib and /var/log (what root trusts) went to the job's user, /var/run is /run,
        # and another user's home locked that user out of ssh (StrictModes).
        (("--training-dir", "/var/tmp"), "--training-dir '/var/tmp': a directory of the"),
        (("--training-dir", "/var/lib"), "--training-dir '/var/lib': a directory of the"),
        (("--training-dir", "/var/run/x"), "--training-dir '/var/run/x': a directory of the"),
        (("--training-dir", "/var/lock"), "--training-dir '/var/lock': a directory of the"),
        (("--training-dir", "/home/ubuntu"), "--training-dir '/home/ubuntu': the home of"),
        # Ubuntu's homes are 0750: the job could not enter its directory (200/CHDIR).
        (("--training-dir", "/home/ubuntu/run"), "'/home/ubuntu/run': inside the home of"),
        (("--training-command", "python train.py"), "--training-command: must start"),
        # As for the directory: the job could not run a program in a 0750 home (203/EXEC).
        (
            ("--training-command", "/home/ubuntu/venv/bin/python train.py"),
            "--training-command: /home/ubuntu/venv/bin/python is inside the home of user",
        ),
        (("--training-command", "/root/venv/bin/python"), "is inside the home of user 'root'"),
        (("--training-command", "/bin/x 'unclosed"), "--training-command:"),
        (("--training-unit", "training"), "--training-unit 'training'"),
        # No name before `@` (it broke the YAML too), a template without an instance (cannot be
        # started), a name systemctl reads as options, one longer than systemd allows.
        (("--training-unit", "@7.service"), "--training-unit '@7.service'"),
        (("--training-unit", "train@.service"), "--training-unit 'train@.service'"),
        (("--training-unit=-x.service",), "--training-unit '-x.service'"),
        (("--training-unit", "x" * 248 + ".service"), "--training-unit 'xxx"),
        (("--package", " "), "--package ' '"),
        # One word of pip's command line: pip refused it as a requirement, and with it the
        # whole install, forewarn's included (the machine came up with no agent).
        (
            ("--package", "torch --index-url https://download.pytorch.org/whl/cu121"),
            "--package 'torch --index-url https://download.pytorch.org/whl/cu121': pip reads",
        ),
        (("--package", "--pre torch"), "--package '--pre torch': pip reads"),
        (("--source", "forewarn"), "--source 'forewarn': the new machine cannot install"),
        (("--source", "./dist/forewarn.whl"), "--source './dist/forewarn.whl'"),
        (("--source", "file:///tmp/f.whl"), "--source 'file:///tmp/f.whl'"),
        (("--extra", "me trics"), "--extra 'me trics'"),
        # pip installs without an extra the project lacks, with a warning in a log no one
        # reads: `kubernetes` (the provider's name, the extra is k8s) left the drill's client out.
        (("--extra", "kubernetes"), "--extra 'kubernetes': forewarn has no such extra (its"),
        # pip refuses these: not a wheel's file name, and another project's wheel.
        (("--source", "https://h.example.org/forewarn.whl"), "pip cannot install 'forewarn.whl'"),
        (
            ("--source", "https://h.example.org/dl/other-0.1.0-py3-none-any.whl"),
            "pip cannot install 'other-0.1.0-py3-none-any.whl'",
        ),
        (("--source", "https://h.example.org/forewarn.tar.gz"), "pip cannot install"),
        (("--source", "https://h.example.org/dl?f=forewarn-0.1.0.tar.gz"), "cannot install"),
    ],
)
def test_bad_input_exits_2_naming_the_option(args: tuple[str, ...], complaint: str):
    # A --source given last wins over the default one.
    result = run_render(*args)
    assert result.returncode == 2
    assert complaint in result.stderr


@pytest.mark.parametrize(
    ("variable", "complaint"),
    [
        # The agent exits 2 at each start on the first (a typo of FOREWARN_PROVIDERS) and
        # ignores the second: either way the machine came up without what was asked for.
        (
            "FOREWARN_PROVIDER=aws",
            "--env FOREWARN_PROVIDER: not a setting (did you mean FOREWARN_PROVIDERS?)",
        ),
        ("forewarn_poll=5s", "--env forewarn_poll: not a setting"),
        ("FOREWARN_AWS_SPOT_INTERVALL=5s", "(did you mean FOREWARN_AWS_SPOT_INTERVAL?)"),
        # A key's name without the prefix, as the TOML file writes it: rendered, and ignored.
        (
            "exit_margin=30s",
            "--env exit_margin: not a setting (the agent reads FOREWARN_EXIT_MARGIN)",
        ),
        ("AWS_URL=http://127.0.0.1:9", "(the agent reads FOREWARN_AWS_URL)"),
        # The prefix misspelt: rendered, and on the machine the agent ignored it.
        (
            "FORWARN_EXIT_MARGIN=30s",
            "--env FORWARN_EXIT_MARGIN: not read, the agent reads FOREWARN_ variables "
            "(did you mean FOREWARN_EXIT_MARGIN?)",
        ),
    ],
)
def test_an_agent_variable_that_is_no_setting_exits_2(variable: str, complaint: str):
    result = run_render("--env", variable)
    assert result.returncode == 2, result.stderr
    assert complaint in result.stderr


@pytest.mark.parametrize(
    ("variables", "complaint"),
    [
        # Rendered without a word, and on the machine the agent exited 2 at each start: the
        # job ran with no agent to warn it.
        (
            ("FOREWARN_EXIT_MARGIN=30sek",),
            "--env FOREWARN_EXIT_MARGIN: config key exit_margin: not a duration: unknown unit",
        ),
        (("FOREWARN_PROVIDERS=amazon",), "--env FOREWARN_PROVIDERS: config key providers"),
        (("FOREWARN_TELEMETRY=maybe",), "--env FOREWARN_TELEMETRY: config key telemetry"),
        (("FOREWARN_AWS_TOKEN_TTL=1.5s",), "--env FOREWARN_AWS_TOKEN_TTL: config key aws.token"),
        (
            ("FOREWARN_ALLOW_REMOTE=false", "FOREWARN_METRICS_ADDRESS=0.0.0.0:9464"),
            "--env FOREWARN_METRICS_ADDRESS: config key metrics_address: 0.0.0.0 is not",
        ),
    ],
)
def test_an_agent_value_the_agent_would_refuse_exits_2(
    variables: tuple[str, ...], complaint: str
) -> None:
    result = run_render(*(arg for pair in variables for arg in ("--env", pair)))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and complaint in lines[0], result.stderr


def test_values_the_agent_takes_are_rendered() -> None:
    """Checked as the machine's agent reads them: after the unit's own Environment= lines
    (metrics on 127.0.0.1:9464), a later pair winning, a blank one setting nothing; a file a
    key reads at start (webhook.url_file, webhook.ca_file, webhook.headers_file) is there,
    not here; a variable checked with others (allow_remote beside a non-loopback metrics
    address)."""
    variables = [
        "FOREWARN_EXIT_MARGIN=30S",
        "FOREWARN_EXIT_MARGIN=1h 30m",
        "FOREWARN_HEARTBEAT_INTERVAL=",
        "forewarn_providers=aws,local",
        "FOREWARN_WEBHOOK_URL_FILE=/etc/forewarn/webhook-url",
        "FOREWARN_WEBHOOK_CA_FILE=/etc/forewarn/ca.pem",
        "FOREWARN_WEBHOOK_HEADERS_FILE=/etc/forewarn/webhook-headers",
        "FOREWARN_METRICS_ADDRESS=[::]:9464",
        "FOREWARN_ALLOW_REMOTE=true",
    ]
    result = run_render(*(arg for pair in variables for arg in ("--env", pair)))
    assert result.returncode == 0, result.stderr


def test_with_a_config_file_only_the_machine_can_tell_the_values() -> None:
    # The file, there and not here, may set the key a value needs (allow_remote).
    variables = ["FOREWARN_CONFIG=/etc/forewarn/site.toml", "FOREWARN_METRICS_ADDRESS=[::]:9464"]
    result = run_render(*(arg for pair in variables for arg in ("--env", pair)))
    assert result.returncode == 0, result.stderr


@settings(max_examples=examples(150), deadline=None)
@given(
    key=st.sampled_from(
        ["EXIT_MARGIN", "PROVIDERS", "TELEMETRY", "AWS_TOKEN_TTL", "LOG_LEVEL", "ALLOW_REMOTE"]
    ),
    value=st.sampled_from(["30s", "30S", "1h 30m", "5", "1.5", "", " ", "aws", "on", "Debug"])
    | st.text(max_size=6),
)
def test_render_refuses_a_value_exactly_when_the_agent_would(key: str, value: str) -> None:
    """What the machine's agent reads, after the unit's Environment= lines: refused there
    (it exits 2 at each start) is refused here, naming the variable; taken there, rendered."""
    variable = f"FOREWARN_{key}"
    if not value.isprintable():
        return  # a line break or a control character: refused by every value's own check
    with (
        tempfile.TemporaryDirectory() as directory,
        mock.patch.dict(
            os.environ,
            {"PATH": os.environ.get("PATH", ""), "FOREWARN_METRICS_ADDRESS": "127.0.0.1:9464"},
            clear=True,
        ),
    ):
        os.environ[variable] = value
        try:
            (Path(directory) / "forewarn.toml").write_text("")
            load_settings(Path(directory) / "forewarn.toml")
            refused = False
        except ConfigError:
            refused = True
    try:
        render(
            packages=[f"forewarn @ {WHEEL_URL}"],
            agent_env=[f"{variable}={value}"],
            training_env=[],
            training_user="ml",
            training_dir="/srv/run7",
            training_command="/opt/forewarn/venv/bin/python train.py",
            training_unit_name="training.service",
        )
    except RenderError as error:
        assert refused, str(error)
        assert str(error).startswith(f"--env {variable}: config key "), str(error)
        return
    assert not refused


def test_agent_settings_and_other_variables_are_written_as_given():
    env = ["FOREWARN_PROVIDERS=aws", "FOREWARN_AWS_SPOT_INTERVAL=5s", "forewarn_exit_margin=60"]
    env += ["FOREWARN_CONFIG=/etc/forewarn/site.toml", "HTTPS_PROXY=http://proxy:3128"]
    result = run_render(*(arg for pair in env for arg in ("--env", pair)))
    assert result.returncode == 0, result.stderr
    written = files(yaml.safe_load(result.stdout))["/etc/forewarn/forewarn.env"]
    assert [line.split("=", 1)[0] for line in written.splitlines()] == [
        pair.split("=", 1)[0] for pair in env
    ]


def test_runcmd_is_a_valid_shell_script_that_passes_every_word_whole(tool: Tool):
    """cloud-init turns runcmd into a /bin/sh script (its own shellify); with quotes, `$`,
    backquotes and spaces in the values, that script parses and each command gets exactly
    the words of its YAML list."""
    hostile = ("--package", "torch; python_version >= '3.10' $(id) `id`")
    source = "https://h.example.org/d/forewarn-0.1.0-py3-none-any.whl#sha256=\"'$HOME"
    result = run_render(*hostile, "--training-dir", "/srv/it's$x`id`", source=source)
    assert result.returncode == 0, result.stderr
    runcmd = yaml.safe_load(result.stdout)["runcmd"]
    shellify = (
        "import json, sys; from cloudinit import util; print(util.shellify(json.load(sys.stdin)))"
    )
    cloud_init_python = Path(tool("cloud-init")).read_text().splitlines()[0].removeprefix("#!")
    script = subprocess.run(
        [*cloud_init_python.split(), "-c", shellify],
        input=json.dumps(runcmd),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert subprocess.run([tool("bash"), "-n"], input=script, text=True).returncode == 0
    # Each command line with its program swapped for one that prints its words.
    printed = "".join(
        line.replace(line.split(" ", 1)[0], "printf '%s\\0' _", 1) + "\n"
        for line in script.splitlines()[1:]
        if line
    )
    out = subprocess.run(["/bin/sh", "-c", printed], capture_output=True, check=True).stdout
    words = out.decode().split("\0")[:-1]
    assert [w for w in words if w != "_"] == [w for cmd in runcmd for w in cmd[1:]]


@pytest.mark.parametrize("where", ["missing/user-data.yaml", "."])
def test_an_output_it_cannot_write_exits_2_naming_it(where: str, tmp_path: Path):
    """A missing directory or a directory as --output ended in "unexpected FileNotFoundError
    ... please report it" and exit 1."""
    output = tmp_path / where
    result = run_render("-o", str(output))
    assert result.returncode == 2, result.stderr
    assert f"--output {output}: cannot write it" in result.stderr
    assert "unexpected" not in result.stderr


def test_without_a_source_nothing_is_rendered():
    result = run_render(source=None)
    assert result.returncode == 2 and result.stdout == ""
    assert "--source" in result.stderr


@pytest.mark.parametrize("extras", [(), ("aws",), ("aws", "metrics"), ("all",)])
def test_the_metrics_extra_the_agent_unit_needs_is_always_installed(extras: tuple[str, ...]):
    """The agent unit sets FOREWARN_METRICS_ADDRESS, and an agent without prometheus-client
    exits 2: `--extra aws` replaced `metrics` and left a machine whose agent never started."""
    result = run_render(*(arg for extra in extras for arg in ("--extra", extra)))
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    unit = files(config)["/etc/systemd/system/forewarn-agent.service"]
    assert "\nEnvironment=FOREWARN_METRICS_ADDRESS=127.0.0.1:9464\n" in unit
    pip = next(cmd for cmd in config["runcmd"] if cmd[0].endswith("/pip"))
    named = pip[3].split(" @ ")[0]
    wanted = ["metrics", *(extra for extra in extras if extra != "metrics")]
    assert named == f"forewarn[{','.join(wanted)}]"


def installed_extras(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The extras of the rendered `pip install` of forewarn, in order."""
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    pip = next(cmd for cmd in config["runcmd"] if cmd[0].endswith("/pip"))
    named = pip[3].split(" @ ")[0]
    assert named.startswith("forewarn[") and named.endswith("]"), named
    return named.removeprefix("forewarn[").removesuffix("]").split(",")


@pytest.mark.parametrize(
    "env",
    [
        ("FOREWARN_PROVIDERS=local,kubernetes", "FOREWARN_KUBERNETES_KUBECONFIG=/etc/forewarn/kc"),
        # Outside a pod the agent reads $KUBECONFIG, as kubectl does, when no url is set.
        ("FOREWARN_PROVIDERS=local,kubernetes", "KUBECONFIG=/etc/forewarn/kc"),
        ("FOREWARN_KUBERNETES_KUBECONFIG=/etc/forewarn/kc", "FOREWARN_KUBERNETES_EVENTS=true"),
    ],
)
def test_a_kubeconfig_given_to_the_agent_installs_the_library_that_reads_it(
    env: tuple[str, ...],
):
    """An agent reads a kubeconfig through the Kubernetes client library (the `k8s` extra).
    Rendered with `--env FOREWARN_KUBERNETES_KUBECONFIG=...` and no `--extra k8s`, the
    machine installed `forewarn[metrics]`: its agent ran, but its Kubernetes watcher only
    logged "install the Kubernetes client library" once a minute, and no notice ever came."""
    result = run_render(*(arg for pair in env for arg in ("--env", pair)), process=True)
    assert installed_extras(result) == ["metrics", "k8s"]


@pytest.mark.parametrize("providers", ["kubernetes", "local,kubernetes,aws"])
def test_a_kubernetes_watch_with_no_api_server_to_reach_exits_2(providers: str):
    """The machine's agent runs under systemd, not in a pod (no KUBERNETES_SERVICE_HOST),
    and the unit hides the homes (ProtectHome=), so no ~/.kube/config either: rendered with
    the kubernetes provider and no URL or kubeconfig, the machine's Kubernetes watcher said
    "not in a pod ... set kubernetes.kubeconfig or kubernetes.url" once a minute and never
    watched the node, while the job trained on."""
    result = run_render("--env", f"FOREWARN_PROVIDERS={providers}", process=True)
    assert result.returncode == 2, result.stdout[-500:]
    assert result.stdout == ""
    error = result.stderr
    assert error.startswith("forewarn: render cloud-init: --env FOREWARN_PROVIDERS: "), error
    assert "FOREWARN_KUBERNETES_KUBECONFIG" in error and "FOREWARN_KUBERNETES_URL" in error


@pytest.mark.parametrize(
    "env",
    [
        ("FOREWARN_KUBERNETES_URL=https://10.0.0.1:6443",),
        ("FOREWARN_KUBERNETES_KUBECONFIG=/etc/forewarn/kubeconfig",),
        ("KUBECONFIG=/etc/forewarn/kubeconfig",),
        ("KUBERNETES_SERVICE_HOST=10.0.0.1",),
        # The file is only on the machine: it may name either.
        ("FOREWARN_CONFIG=/etc/forewarn/forewarn.toml",),
    ],
)
def test_a_kubernetes_watch_with_an_api_server_to_reach_is_rendered(env: tuple[str, ...]):
    pairs = ("FOREWARN_PROVIDERS=local,kubernetes", *env)
    result = run_render(*(arg for pair in pairs for arg in ("--env", pair)))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "args, extras",
    [
        # An API server named by URL (a token file, `kubectl proxy`) needs no kubeconfig.
        (
            (
                "--env",
                "FOREWARN_PROVIDERS=local,kubernetes",
                "--env",
                "FOREWARN_KUBERNETES_URL=https://10.0.0.1",
            ),
            ["metrics"],
        ),
        # A blank value is unset, to the agent.
        (("--env", "FOREWARN_KUBERNETES_KUBECONFIG="), ["metrics"]),
        (
            ("--env", "KUBECONFIG=/etc/forewarn/kc", "--env", "FOREWARN_KUBERNETES_URL=https://h"),
            ["metrics"],
        ),
        # Asked for already: named once.
        (("--extra", "k8s", "--env", "FOREWARN_KUBERNETES_KUBECONFIG=/k"), ["metrics", "k8s"]),
        (("--extra", "all", "--env", "FOREWARN_KUBERNETES_KUBECONFIG=/k"), ["metrics", "all"]),
    ],
)
def test_the_kubernetes_library_is_added_only_where_a_kubeconfig_is_read(
    args: tuple[str, ...], extras: list[str]
):
    assert installed_extras(run_render(*args)) == extras


@pytest.mark.parametrize(
    "source",
    [
        "https://example.org/dist/forewarn-0.1.0.tar.gz",
        "https://example.org/releases/download/v0.1.0/forewarn-0.1.0-py3-none-any.whl#sha256=00",
        # pip takes the file name from the path and fetches the URL whole; refused, as one
        # the machine "cannot install from".
        "https://gitlab.example.org/g/fw/-/jobs/artifacts/main/raw/dist/"
        "forewarn-0.1.0-py3-none-any.whl?job=build",
        "git+https://github.com/example/forewarn.git@v0.1.0",
        "git+ssh://git@example.org/forewarn.git",
    ],
)
def test_every_installable_source_becomes_one_pip_requirement(source: str, tmp_path: Path):
    result = run_render("--extra", "metrics", "--extra", "aws", "--package", "torch", source=source)
    assert result.returncode == 0, result.stderr
    runcmd = yaml.safe_load(result.stdout)["runcmd"]
    pip = next(cmd for cmd in runcmd if cmd[0].endswith("/pip"))
    assert pip[3:] == [f"forewarn[metrics,aws] @ {source}", "torch"]
    # pip runs git for a git URL; Debian's cloud images have none until it is installed.
    packages = yaml.safe_load(result.stdout)["packages"]
    assert packages == (["python3-venv", "git"] if "git+" in source else ["python3-venv"])


@pytest.mark.parametrize(
    "package", ["torch >= 2.1; python_version >= '3.10'", "--extra-index-url=https://h.example/x"]
)
def test_a_requirement_with_spaces_or_an_option_in_one_word_reaches_pip_whole(package: str):
    result = run_render(f"--package={package}")
    assert result.returncode == 0, result.stderr
    pip = next(cmd for cmd in yaml.safe_load(result.stdout)["runcmd"] if cmd[0].endswith("/pip"))
    assert pip[-1] == package


EXAMPLE_UNIT = (SYSTEMD / "example-training.service").read_text()


def env_value(line: str, key: str) -> str:
    """The value of a `KEY="..."` EnvironmentFile line, unescaped as systemd reads it."""
    assert line.startswith(f'{key}="') and line.endswith('"'), line
    return re.sub(r"\\(.)", r"\1", line[len(key) + 2 : -1])


def systemd_words(line: str) -> list[str]:
    """The words systemd makes of an ExecStart= value (systemd.syntax(7), systemd.service(5)),
    for the forms that mean one thing only: plain words, and double-quoted words whose only
    escapes are \\\\ and \\". Anything systemd would read otherwise (another escape, which it
    C-unescapes; a single quote; a lone `;`, its command separator; a lone `%`, a specifier)
    fails the assertion."""
    words: list[str] = []
    rest = line
    while rest:
        assert not rest.startswith(" "), line
        if rest.startswith('"'):
            match = re.match(r'"((?:[^"\\]|\\[\\"])*)"(?: |$)', rest)
            assert match, f"not one quoted word: {rest!r}"
            word = re.sub(r"\\(.)", r"\1", match.group(1))
        else:
            match = re.match(r"([^ ]+)(?: |$)", rest)
            assert match, rest
            word = match.group(1)
            assert not re.search(r"[\"'\\]", word) and word != ";", f"ambiguous: {word!r}"
        assert re.fullmatch(r"(?:[^%]|%%)*", word), f"a specifier in {word!r}"
        words.append(word.replace("%%", "%"))
        rest = rest[match.end() :]
    return words


# Any character, the ones that mean something to YAML, a shell, systemd or an env file often.
HOSTILE = st.text(
    st.characters() | st.sampled_from("%$`\"'\\ #:@-\n\r\t\x0b\x85\u2028"), max_size=30
)


@given(command=HOSTILE, directory=HOSTILE, value=HOSTILE)
def test_no_value_breaks_the_document_or_adds_a_line(command: str, directory: str, value: str):
    """Whatever the values hold, either the renderer refuses them or each lands, whole, on its
    own line: the document parses, the units and env files have exactly their lines."""
    command = "/bin/train " + command
    directory = "/srv/" + directory
    try:
        text = render(
            packages=[f"forewarn @ {WHEEL_URL}"],
            agent_env=[f"A={value}"],
            training_env=[f"B={value}"],
            training_user="ml",
            training_dir=directory,
            training_command=command,
            training_unit_name="training.service",
        )
    except RenderError:
        return
    config = yaml.safe_load(text)
    assert ["install", "-d", "-o", "ml", "-g", "ml", directory] in config["runcmd"]
    written = files(config)
    unit = written["/etc/systemd/system/training.service"].split("\n")
    assert len(unit) == len(EXAMPLE_UNIT.split("\n"))
    assert [line for line in unit if line.startswith("User=")] == ["User=ml"]
    (exec_start,) = [line for line in unit if line.startswith("ExecStart=")]
    assert systemd_words(exec_start.removeprefix("ExecStart=")) == shlex.split(command)
    assert f"WorkingDirectory={directory.replace('%', '%%')}" in unit
    agent_env = written["/etc/forewarn/forewarn.env"].split("\n")
    training_env = written["/etc/forewarn/training.env"].split("\n")
    assert agent_env[1:] == [""] and training_env[1:] == [""]
    assert env_value(agent_env[0], "A") == value and env_value(training_env[0], "B") == value


def systemd_environment(unit: str, env_file: str) -> dict[str, str]:
    """A unit's environment as systemd gives it: its Environment= lines (a system unit's
    specifiers), then its EnvironmentFile (the rendered `KEY="value"` lines), which wins."""
    found: dict[str, str] = {}
    for line in unit.splitlines():
        if line.startswith("Environment="):
            key, _, value = line.removeprefix("Environment=").partition("=")
            found[key] = value.replace("%t", "/run").replace("%S", "/var/lib")
    for line in env_file.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            assert value.startswith('"') and value.endswith('"'), line
            found[key] = re.sub(r"\\(.)", r"\1", value[1:-1])
    return found


@pytest.mark.parametrize(
    "agent_env",
    [
        ("FOREWARN_RUNTIME_DIR=/run/forewarn/agent",),
        ("FOREWARN_EVENTS=tcp://127.0.0.1:5556", "FOREWARN_CONTROL=tcp://127.0.0.1:5557"),
        ("forewarn_events=ipc:///run/forewarn/ev", "FOREWARN_PROVIDERS=aws"),
    ],
)
def test_the_training_job_looks_where_the_rendered_agent_listens(
    agent_env: tuple[str, ...], tmp_path: Path
) -> None:
    """An --env that moves the agent's sockets (its runtime directory, an endpoint) moved
    only the agent: the training unit kept FOREWARN_RUNTIME_DIR=/run/forewarn and its client
    the default endpoints, so the job trained on the machine without hearing any notice."""
    from forewarn.protocol.wire import default_endpoints

    result = run_render(*(arg for pair in agent_env for arg in ("--env", pair)))
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    written = files(config)
    agent = systemd_environment(
        written["/etc/systemd/system/forewarn-agent.service"],
        written["/etc/forewarn/forewarn.env"],
    )
    job = systemd_environment(
        written["/etc/systemd/system/training.service"], written["/etc/forewarn/training.env"]
    )
    empty = tmp_path / "forewarn.toml"
    empty.write_text("")
    path = {"PATH": os.environ.get("PATH", "")}
    with mock.patch.dict(os.environ, {**path, **agent}, clear=True):
        listens = load_settings(empty).resolved_endpoints()
    with mock.patch.dict(os.environ, {**path, **job, "FOREWARN_CONFIG": str(empty)}, clear=True):
        looks = default_endpoints()
    assert looks == listens, (agent, job)


@pytest.mark.parametrize("text", ["run-😀", "données-\U0001d465", "実験-𠮷", "plain"])
def test_every_runcmd_value_reads_back_as_written(text: str) -> None:
    """The runcmd values were JSON strings, which escape a character beyond U+FFFF as a
    surrogate pair (`\\ud83d\\ude00`); YAML reads each `\\u` escape alone, so cloud-init got
    two lone surrogates: a training directory or a requirement with such a character (an
    emoji, a math letter, a rare CJK one) came back other than written, and the script made
    of runcmd could not even be written as UTF-8."""
    directory = f"/srv/{text}"
    package = f"mylib @ https://h.example.org/{text}/mylib-1.0-py3-none-any.whl"
    config = yaml.safe_load(
        render(
            packages=[f"forewarn @ {WHEEL_URL}", package],
            agent_env=[],
            training_env=[],
            training_user="ml",
            training_dir=directory,
            training_command="/opt/forewarn/venv/bin/python train.py",
            training_unit_name="training.service",
        )
    )
    commands = config["runcmd"]
    assert ["install", "-d", "-o", "ml", "-g", "ml", directory] in commands
    pip = next(c for c in commands if c[0].endswith("/pip"))
    assert pip[-1] == package
    for command in commands:
        for word in command:
            str(word).encode("utf-8")  # no lone surrogate
    unit = files(config)["/etc/systemd/system/training.service"]
    assert f"WorkingDirectory={directory}\n" in unit


@pytest.mark.parametrize(
    ("pair", "complaint"),
    [
        ("FOREWARN_STATE_DIR=/mnt/data/forewarn", "/mnt/data/forewarn"),
        ("FOREWARN_RUNTIME_DIR=/run/other", "/run/other"),
        ("FOREWARN_STATE_DIR=/var/lib/forewarn-state", "/var/lib/forewarn-state"),
        ("FOREWARN_RUNTIME_DIR=/tmp/forewarn", "/tmp/forewarn"),
        ("FOREWARN_EVENTS=ipc:///srv/forewarn/events", "/srv/forewarn/events"),
    ],
)
def test_a_directory_the_agent_unit_cannot_write_is_refused(pair: str, complaint: str) -> None:
    """The agent unit runs under ProtectSystem=strict: it writes only its RuntimeDirectory
    (/run/forewarn) and StateDirectory (/var/lib/forewarn), and its /tmp is its own
    (PrivateTmp=). A runtime or state directory (or socket) elsewhere rendered without a word;
    on the machine the agent exited 2 at each start ("cannot create it (Read-only file
    system)") until systemd gave up, and the job trained with no agent."""
    result = run_render("--env", pair)
    assert result.returncode == 2, result.stdout[-300:]
    key = pair.partition("=")[0]
    assert result.stderr.startswith(f"forewarn: render cloud-init: --env {key}: "), result.stderr
    assert complaint in result.stderr and "ProtectSystem=strict" in result.stderr, result.stderr


def test_a_relative_socket_path_is_refused_as_the_agent_refuses_it() -> None:
    """`FOREWARN_CONTROL=ipc://control` was bound in the unit's working directory, `/`, which
    ProtectSystem=strict keeps read-only; the agent refuses a relative ipc:// path anywhere
    now, and render says so as the agent would."""
    result = run_render("--env", "forewarn_control=ipc://control")
    assert result.returncode == 2, result.stdout[-300:]
    assert result.stderr.startswith("forewarn: render cloud-init: --env forewarn_control: ")
    assert "relative ipc:// path" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "pair",
    [
        "FOREWARN_RUNTIME_DIR=/run/forewarn/agent",
        "FOREWARN_STATE_DIR=/var/lib/forewarn/node-a",
        "FOREWARN_STATE_DIR=/run/forewarn",
        "FOREWARN_EVENTS=tcp://127.0.0.1:5556",
        "FOREWARN_CONTROL=ipc:///run/forewarn/ctl",
        "FOREWARN_EVENTS=ipc://@forewarn-events",
    ],
)
def test_directories_the_agent_unit_writes_are_rendered(pair: str) -> None:
    result = run_render("--env", pair)
    assert result.returncode == 0, result.stderr


def _runcmd(rendered: Path) -> list[list[str]]:
    runcmd: list[list[str]] = yaml.safe_load(rendered.read_text())["runcmd"]
    return runcmd


@pytest.mark.parametrize("version", [(3, 8, 10), (3, 9, 16)])
def test_a_python_older_than_3_10_is_named_before_the_install(
    rendered: Path, version: tuple[int, int, int]
) -> None:
    """On Ubuntu 20.04, Debian 11, RHEL 9 or Amazon Linux 2023 (`python3` 3.8 or 3.9) the
    install failed deep in pip ('requires a different Python' for a wheel, 'No matching
    distribution' for an index), and nothing said which image to use. The first step names
    the Python found and what is needed, and fails."""
    first = _runcmd(rendered)[0]
    assert first[:2] == ["python3", "-c"], first
    pretend = f"import sys; sys.version_info = {(*version, 'final', 0)!r}; exec({first[2]!r})"
    old = subprocess.run([sys.executable, "-c", pretend], capture_output=True, text=True)
    shown = ".".join(map(str, version))
    assert old.returncode == 1, old
    assert old.stderr.startswith(f"forewarn needs Python 3.10 or newer; python3 here is {shown}")
    assert "Ubuntu 22.04" in old.stderr and "Debian 12" in old.stderr, old.stderr
    new = subprocess.run([sys.executable, "-c", first[2]], capture_output=True, text=True)
    assert (new.returncode, new.stderr) == (0, "")


def test_cloud_init_reports_an_error_when_the_agent_did_not_start(
    rendered: Path, tmp_path: Path, tool: Tool
) -> None:
    """runcmd is a /bin/sh script without -e: it ends with the last command's status, so a
    failed pip install (an old Python, no network) left `cloud-init status` at done while the
    job trained with no agent to warn it. The last step looks whether the agent runs: its
    failure names the agent unit and makes the script, and so cloud-init, fail."""
    last = _runcmd(rendered)[-1]
    fake = tmp_path / "bin"
    fake.mkdir()
    for state, code in (("active", 0), ("activating", 3), ("inactive", 3)):
        systemctl = fake / "systemctl"
        systemctl.write_text(
            f'#!/bin/sh\n[ "$1 $2 $3" = "is-active --quiet forewarn-agent.service" ] '
            f"|| exit 9\nexit {code}\n"
        )
        systemctl.chmod(0o755)
        result = subprocess.run(
            last,
            capture_output=True,
            text=True,
            env={"PATH": f"{fake}:/usr/bin:/bin"},
        )
        if state == "active":
            assert (result.returncode, result.stderr) == (0, ""), state
        else:
            assert result.returncode == 1, (state, result)
            assert "forewarn-agent.service is not running" in result.stderr, result.stderr
            assert "/var/log/cloud-init-output.log" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("pairs", "complaint"),
    [
        (("FOREWARN_EVENTS=tcp://10.0.0.1:5555",), "events 'tcp://10.0.0.1:5555': 10.0.0.1 is not"),
        (("FOREWARN_EVENTS=ipc:///run/forewarn/ev/",), "the path names a directory"),
        (("FOREWARN_CONTROL=ipc:///run/forewarn/" + "c" * 100,), "Linux allows at most 107"),
        (("FOREWARN_CONTROL=ipc:///run/forewarn/events",), "are the same endpoint"),
    ],
)
def test_an_endpoint_the_agent_would_refuse_exits_2(pairs: tuple[str, ...], complaint: str) -> None:
    """found: `--env FOREWARN_EVENTS=tcp://10.0.0.1:5555` (without allow_remote), an ipc://
    path naming a directory or longer than Linux's 107 bytes, or a control endpoint on the
    events socket's path rendered with exit 0: the check read the settings but not their
    endpoints, which the agent checks at start, where it then exited 2 each time until
    systemd gave up, the job training with no agent."""
    result = run_render(*(arg for pair in pairs for arg in ("--env", pair)))
    assert result.returncode == 2, result.stdout[-300:]
    key = pairs[-1].partition("=")[0]
    assert result.stderr.startswith(f"forewarn: render cloud-init: --env {key}: "), result.stderr
    assert complaint in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr


def test_a_remote_endpoint_with_allow_remote_is_rendered() -> None:
    pairs = ("FOREWARN_EVENTS=tcp://10.0.0.1:5555", "FOREWARN_ALLOW_REMOTE=true")
    result = run_render(*(arg for pair in pairs for arg in ("--env", pair)))
    assert result.returncode == 0, result.stderr
