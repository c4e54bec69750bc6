"""An `ipc://` endpoint that names a directory (`ipc:///run/fw/events/`, a trailing slash, or
one ending in `/.` or `/..`) can never be a socket file. The agent took it, wrote
`agent.lock` and `seq` into its runtime directory and the state directory's lock, and only
then failed at the bind with zmq's words (`No such file or directory for ipc path ...`, or
"it is a directory"). It is refused where the configuration is read, naming the key, before
anything is written; an abstract name (`ipc://@fw/`) has no file and keeps its slash."""

from __future__ import annotations

import os
import string
from pathlib import Path

import pytest
from forewarn.agent.config import ConfigError, load_settings
from forewarn.protocol.wire import EndpointError, check_endpoint
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import agent_env, examples, run_agent_on

_PARTS = st.lists(
    st.text(alphabet=string.ascii_letters + string.digits + "-_.", min_size=1, max_size=12),
    min_size=0,
    max_size=4,
)


@settings(max_examples=examples(100), deadline=None)
@given(parts=_PARTS, end=st.sampled_from(["/", "/.", "/..", "//"]))
@example(parts=["run", "forewarn", "events"], end="/")
def test_an_ipc_path_naming_a_directory_is_refused_naming_the_key(
    parts: list[str], end: str
) -> None:
    endpoint = "ipc:///" + "/".join(parts) + end
    for key in ("events", "control"):
        with pytest.raises(ConfigError, match=f"^{key} .*directory") as caught:
            load_settings(**{key: endpoint}).resolved_endpoints()
        assert repr(endpoint) in str(caught.value)
    with pytest.raises(EndpointError, match="names a directory"):
        check_endpoint(endpoint, what="--events")


@settings(max_examples=examples(100), deadline=None)
@given(parts=_PARTS.filter(lambda parts: bool(parts) and parts[-1] not in (".", "..")))
def test_an_ipc_path_naming_a_file_or_an_abstract_name_is_taken(parts: list[str]) -> None:
    path = "/".join(parts)
    assert check_endpoint(f"ipc:///{path}") == f"ipc:///{path}"
    assert check_endpoint(f"ipc://@{path}/") == f"ipc://@{path}/"


@pytest.mark.parametrize("end", ["/", "/."])
def test_the_agent_exits_2_before_writing_anything(tmp_path: Path, end: str) -> None:
    env = agent_env(tmp_path)
    runtime, state = Path(env["FOREWARN_RUNTIME_DIR"]), Path(env["FOREWARN_STATE_DIR"])
    config = tmp_path / "forewarn.toml"
    config.write_text(f'events = "ipc://{runtime}/events{end}"\n')
    done = run_agent_on(config, env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"forewarn: events 'ipc://{runtime}/events{end}': ")
    assert "names a directory" in done.stderr and len(done.stderr.splitlines()) == 1
    assert list(runtime.iterdir()) == [] and list(state.iterdir()) == []


@pytest.mark.parametrize("key", ["events", "control"])
def test_an_ipc_path_in_a_missing_directory_exits_2_before_writing_anything(
    tmp_path: Path, key: str
) -> None:
    """found: `events = "ipc://DIR/nope/events"` wrote agent.lock, seq and the state lock,
    then exited 2 at the bind with zmq's words, naming no key."""
    env = agent_env(tmp_path)
    runtime, state = Path(env["FOREWARN_RUNTIME_DIR"]), Path(env["FOREWARN_STATE_DIR"])
    missing = tmp_path / "nope"
    config = tmp_path / "forewarn.toml"
    config.write_text(f'{key} = "ipc://{missing}/{key}"\n')
    done = run_agent_on(config, env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"forewarn: {key} 'ipc://{missing}/{key}': "), done.stderr
    assert f"directory {str(missing)!r} does not exist" in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert list(runtime.iterdir()) == [] and list(state.iterdir()) == []


@settings(max_examples=examples(50), deadline=None)
@given(parts=_PARTS.filter(lambda parts: bool(parts) and parts[-1] not in (".", "..")))
def test_an_ipc_path_is_refused_to_bind_only_when_its_directory_is_missing(
    tmp_path_factory: pytest.TempPathFactory, parts: list[str]
) -> None:
    base = tmp_path_factory.mktemp("bind")
    runtime = base / "runtime"  # not made: the agent makes its own runtime directory
    path = base.joinpath(*parts)
    endpoint = f"ipc://{path}"
    settings_ = load_settings(runtime_dir=runtime, events=endpoint)
    parent = os.path.dirname(str(path))
    if os.path.isdir(parent) or os.path.normpath(parent) == str(runtime):
        assert settings_.bind_endpoints()[0] == endpoint
    else:
        with pytest.raises(ConfigError, match=f"^events {endpoint!r}: .*does not exist"):
            settings_.bind_endpoints()
    # In the runtime directory, made by the agent itself: taken.
    inside = load_settings(runtime_dir=runtime, control=f"ipc://{runtime}/c")
    assert inside.bind_endpoints()[1] == f"ipc://{runtime}/c"
