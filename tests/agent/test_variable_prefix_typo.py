"""A setting's variable with its `FOREWARN_` prefix misspelt is refused, naming the variable
meant: `FORWARN_EXIT_MARGIN=5` (or `FOREWAR_`, `FOREWARNS_`, `FORE_WARN_`) was read by no one,
and the agent started with the margin at its default in silence, while a typo in the rest of
the name (`FOREWARN_EXIT_MARGN`) was refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from forewarn.agent.config import ConfigError, load_settings, settings_model, variable_problem
from forewarn.agent.configdoc import settings_keys
from hypothesis import given, settings
from hypothesis import strategies as st
from support import agent_env, examples, run_forewarn

# Each setting's variable, less the prefix (`EXIT_MARGIN`, `AWS_URL`), and FOREWARN_CONFIG's.
NAMES = sorted({env.removeprefix("FOREWARN_") for _, env, _, _ in settings_keys()} | {"CONFIG"})
PREFIX = "FOREWARN"


def _prefix_typos() -> st.SearchStrategy[str]:
    """`FOREWARN` with one letter dropped, doubled, swapped with the next or replaced, or an
    underscore put inside it."""
    at = st.integers(0, len(PREFIX) - 1)
    return st.one_of(
        at.map(lambda i: PREFIX[:i] + PREFIX[i + 1 :]),
        at.map(lambda i: PREFIX[:i] + PREFIX[i] + PREFIX[i:]),
        st.integers(0, len(PREFIX) - 2).map(
            lambda i: PREFIX[:i] + PREFIX[i + 1] + PREFIX[i] + PREFIX[i + 2 :]
        ),
        st.tuples(at, st.sampled_from("AEIOSX")).map(
            lambda pair: PREFIX[: pair[0]] + pair[1] + PREFIX[pair[0] + 1 :]
        ),
        st.integers(1, len(PREFIX) - 1).map(lambda i: PREFIX[:i] + "_" + PREFIX[i:]),
        st.just(PREFIX + "S"),
    )


@settings(max_examples=examples(150), deadline=None)
@given(
    name=st.sampled_from(NAMES),
    prefix=_prefix_typos(),
    separator=st.sampled_from(["_", ""]),
    lower=st.booleans(),
)
def test_a_setting_s_variable_with_its_prefix_misspelt_is_named_not_ignored(
    name: str, prefix: str, separator: str, lower: bool
) -> None:
    variable = prefix + separator + name
    if variable.upper() == f"FOREWARN_{name}" or variable.upper().startswith("FOREWARN_"):
        return  # no typo at all (`FOREWARN` + `_`), or one the prefix's own check names
    variable = variable.lower() if lower else variable
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("FOREWARN_CONFIG", raising=False)
        patch.setenv(variable, "5")
        with pytest.raises(ConfigError) as caught:
            load_settings()
    assert str(caught.value) == (
        f"environment {variable}: not read, the agent reads FOREWARN_ variables "
        f"(did you mean FOREWARN_{name}?)"
    )


@pytest.mark.parametrize(
    "variable",
    [
        "XDG_RUNTIME_DIR",  # another program's setting of the same name
        "FOREMAN_EVENTS",
        "FORWARD_CONTROL",
        "EXIT_MARGIN",
        "FW_EXIT_MARGIN",
        "FOREWARNING_LOG_LEVEL",
        "FORWARN_SOMETHING_ELSE",  # near the prefix, but no setting's name after it
        "CHECKPOINT_URL",
    ],
)
def test_a_variable_far_from_the_prefix_or_from_every_setting_is_not_refused(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FOREWARN_CONFIG", raising=False)
    monkeypatch.setenv(variable, "5")
    assert load_settings().exit_margin == 30
    assert variable_problem(variable, settings_model()) is None


def test_the_agent_exits_2_naming_the_variable_before_it_binds(tmp_path: Path) -> None:
    env = agent_env(tmp_path, FORWARN_EXIT_MARGIN="90s")
    result = run_forewarn("agent", "--provider", "local", env=env)
    assert result.returncode == 2, result.stderr
    assert "FORWARN_EXIT_MARGIN" in result.stderr
    assert "did you mean FOREWARN_EXIT_MARGIN?" in result.stderr
    runtime = Path(env["FOREWARN_RUNTIME_DIR"])
    assert not (runtime.exists() and any(runtime.iterdir())), list(runtime.iterdir())
