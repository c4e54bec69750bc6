"""The Dockerfile read as a list of instructions, and its steps replayed without a container
runtime: each container path (/src, /dist, /opt/forewarn) is a directory under a scratch
`image` directory standing in for the image's filesystem."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from shell_blocks import run_script

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
# Container paths the install steps may use, each replayed under a scratch directory.
CONTAINER_PATHS = ("/src", "/dist", "/opt/forewarn")


@dataclass
class Instruction:
    keyword: str
    args: str
    stage: int
    workdir: str  # in effect for this instruction


@dataclass
class Dockerfile:
    instructions: list[Instruction] = field(default_factory=list)

    def of(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(path: Path) -> Dockerfile:
    parsed = Dockerfile()
    stage = -1
    workdir = "/"
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = pending + line
        pending = ""
        keyword, _, args = text.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
            workdir = "/"
        elif keyword == "WORKDIR":
            workdir = args.strip()
        parsed.instructions.append(Instruction(keyword, args.strip(), stage, workdir))
    return parsed


def final_stage(parsed: Dockerfile) -> int:
    return max(i.stage for i in parsed.instructions)


def pip_steps(parsed: Dockerfile) -> list[Instruction]:
    """The RUN instructions that build or install with pip, of every stage."""
    return [i for i in parsed.of("RUN") if "pip " in i.args]


def build_args(
    parsed: Dockerfile, stage: int, given: dict[str, str] | None = None
) -> dict[str, str]:
    """The ARGs a stage declares, with their defaults or the `--build-arg` values `given`:
    what its RUN steps see as environment variables."""
    found: dict[str, str] = {}
    for arg in parsed.of("ARG"):
        if arg.stage == stage:
            name, _, default = arg.args.partition("=")
            found[name] = (given or {}).get(name, default)
    return found


def base_image_env(scratch: Path) -> dict[str, str]:
    """This environment with `python` on PATH standing for the base image's interpreter."""
    bin_dir = scratch / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    if not (bin_dir / "python").exists():
        (bin_dir / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    return env


def run_step(step: Instruction, image: Path, env: dict[str, str]) -> None:
    """One RUN instruction, its container paths mapped under `image`."""
    command = step.args
    for path in CONTAINER_PATHS:
        command = command.replace(path, str(image) + path)
    cwd = image / step.workdir.lstrip("/")
    cwd.mkdir(parents=True, exist_ok=True)
    result = run_script(command, cwd=cwd, env=env, timeout=400)
    assert result.returncode == 0, f"{step.args}\n{result.stdout}\n{result.stderr}"


def replay_build_stage(image: Path, scratch: Path, pip_env: dict[str, str]) -> None:
    """The build stage(s): COPY the source tree as the image would hold it under /src, then
    run their pip steps (the wheel build, into /dist) with `pip_env` added to the environment.
    /src is removed afterwards: the final stage receives only what it copies `--from` the
    build stage."""
    parsed = parse_dockerfile(DOCKERFILE)
    final = final_stage(parsed)
    for copy in parsed.of("COPY"):
        # The final stage's own COPY (its config file) goes to the image, not to /src.
        if copy.args.startswith("--from") or copy.stage == final:
            continue
        *sources, _ = copy.args.split()
        for source in sources:
            target = image / "src" / source
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(ROOT / source, target)
    env = {**base_image_env(scratch), **pip_env}
    for step in pip_steps(parsed):
        if step.stage < final:
            run_step(step, image, {**env, **build_args(parsed, step.stage)})
    shutil.rmtree(image / "src")


def copy_from_build_stage(built: Path, image: Path) -> None:
    """The final stage's `COPY --from=...` instructions, from the replayed build stage."""
    for copy in parse_dockerfile(DOCKERFILE).of("COPY"):
        if copy.args.startswith("--from"):
            _, *sources, destination = copy.args.split()
            for source in sources:
                shutil.copytree(built / source.lstrip("/"), image / destination.lstrip("/"))


__all__ = [
    "CONTAINER_PATHS",
    "DOCKERFILE",
    "Dockerfile",
    "Instruction",
    "base_image_env",
    "build_args",
    "copy_from_build_stage",
    "final_stage",
    "parse_dockerfile",
    "pip_steps",
    "replay_build_stage",
    "run_step",
]
