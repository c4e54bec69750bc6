"""What a provider is, as one typed object: `ProviderSpec`.

Each provider package exports one `SPEC`; `providers/registry.py` lists them, and the
runner, the command line, the configuration and the generated docs iterate over that list.
The spec names its faces through small functions that import on call, so the agent loads
only the watchers it runs and never a simulator or a drill it does not.
"""

from __future__ import annotations

import argparse
import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from forewarn.protocol.fields import Reason

if TYPE_CHECKING:
    # Types only: the settings models (pydantic, pydantic-settings) and the watcher base (the
    # report model) load with the settings class, not with the registry that
    # `forewarn simulate` and `drill <name> --help` read for the names.
    from .base import Watcher, WatcherContext
    from .settings import ProviderSettings
    from .simulator import Simulator

S = TypeVar("S", bound="ProviderSettings")


class CommandFace(Protocol):
    """A provider's subcommand (`forewarn drill <name>`): its flags and what it does.

    `run` returns the exit code; bad input raises `forewarn.protocol.UsageError` (or returns
    2 after one `forewarn:` line), a failure `DrillError`. The command line puts
    `args.load_settings(config_file)` in the namespace: it returns the provider's section of
    the agent's configuration, validated (a provider never imports the agent's config).
    """

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


class SimulateFace(CommandFace, Protocol):
    """`forewarn simulate <name>`, plus what tests and `forewarn drill local` need: a
    simulator built in process, and the two notices a local drill raises in it (None when
    the contract has nothing a simulator can raise): `{"drain": (kind, fields), "terminate":
    (kind, fields), "env": {VAR: value}, "files": {VAR: (name, text)}}`, where each of
    `files` is written into the drill machine's own directory and VAR set to its path."""

    def make_simulator(self, *args: Any, **options: Any) -> Simulator: ...

    def drill_script(self) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class ProviderSpec(Generic[S]):
    """One notice contract.

    - `name`: the `provider` field of its notices, its config section and its CLI name;
    - `summary`: one line for `--help` and the docs;
    - `settings_class`: loads the `[<name>]` config section's model, which validates every
      key when config loads; `settings` is that class, loaded on first use (a simulator or a
      drill's `--help` never validates a configuration, and the models cost pydantic and
      pydantic-settings, ~0.3 CPU-s of `forewarn simulate aws`'s start);
    - `watcher`: builds the watcher from its settings and the agent's context (the one
      constructor shape every provider has);
    - `simulate`, `drill`: load the provider's simulator and drill faces, or None;
    - `detect`: whether `--provider auto` probes it (`local` always runs instead);
    - `reasons`: every reason its watcher puts on a notice. The metrics start each
      (provider, reason) series at 0, since `increase()` misses an event whose series is
      created by it, and a spot VM's first terminate is mostly its only one;
    - `approves`: its watcher asks the provider to go ahead with an event (Azure's
      StartRequests) and counts each outcome with `PollHealth.approval`; the metrics start
      its `forewarn_approvals_total` series at 0.
    """

    name: str
    summary: str
    settings_class: Callable[[], type[S]]
    watcher: Callable[[S, WatcherContext], Watcher]
    simulate: Callable[[], SimulateFace] | None = None
    drill: Callable[[], CommandFace] | None = None
    detect: bool = True
    reasons: tuple[Reason, ...] = ()
    approves: bool = False

    @classmethod
    def of_package(
        cls,
        package: str,
        *,
        name: str,
        summary: str,
        simulate: bool = True,
        drill: bool = True,
        detect: bool = True,
        reasons: tuple[Reason, ...] = (),
        approves: bool = False,
    ) -> ProviderSpec[S]:
        """The spec of a provider package laid out as docs/contributing.md says:
        `settings.py` with `Settings`, `watch.py` with `build(settings, context)`, and
        `simulate.py` / `drill.py` when it has them.

        Each face is imported on first use, so the agent loads httpx or a cloud SDK only for
        a provider it runs; the wheel test imports every face of every provider.
        """

        def watcher(chosen: S, context: WatcherContext) -> Watcher:
            build: Callable[[S, WatcherContext], Watcher] = importlib.import_module(
                f"{package}.watch"
            ).build
            return build(chosen, context)

        def face(module: str) -> Callable[[], Any]:
            return lambda: importlib.import_module(f"{package}.{module}")

        def settings_class() -> type[S]:
            found: type[S] = importlib.import_module(f"{package}.settings").Settings
            return found

        return cls(
            name=name,
            summary=summary,
            settings_class=settings_class,
            watcher=watcher,
            simulate=face("simulate") if simulate else None,
            drill=face("drill") if drill else None,
            detect=detect,
            reasons=reasons,
            approves=approves,
        )

    @functools.cached_property
    def settings(self) -> type[S]:
        """The `[<name>]` section's model (`settings_class()`, loaded once)."""
        return self.settings_class()

    @property
    def env_prefix(self) -> str:
        """The environment prefix of its settings, e.g. `FOREWARN_AWS_`."""
        return f"FOREWARN_{self.name.upper()}_"


__all__ = ["CommandFace", "ProviderSpec", "SimulateFace"]
