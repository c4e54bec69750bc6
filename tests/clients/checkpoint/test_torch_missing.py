"""The torch helpers without torch: one error naming the helper and the pip command that adds
the `torch` extra, as an s3:// store without boto3 names `aws`, not a bare
`ModuleNotFoundError: No module named 'torch'`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients import CheckpointGuard
from forewarn.clients.checkpoint import (
    CheckpointError,
    CheckpointStore,
    ExtraMissingError,
    load_dcp,
    load_state,
    load_training_state,
    save_dcp,
    save_training_state,
)
from forewarn.protocol.install import extra_hint


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """`import torch` (and any torch submodule) fails here as where torch is not installed."""
    for name in [name for name in sys.modules if name == "torch" or name.startswith("torch.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "torch", None)


def _committed(tmp_path: Path) -> Any:
    store = CheckpointStore(tmp_path / "store")
    with store.save(3) as gen:
        gen.write_bytes("x", b"x")
    return store


CALLS: dict[str, Callable[[Any], Any]] = {
    "save_training_state": lambda store: save_training_state(store.save(4), model=None),
    "load_training_state": lambda store: load_training_state(store.latest()),
    "load_state": lambda store: load_state(store.latest()),
    "save_dcp": lambda store: save_dcp(store, 4, {}),
    "load_dcp": lambda store: load_dcp(store.latest(), {}),
}


@pytest.mark.usefixtures("no_torch")
@pytest.mark.parametrize("helper", sorted(CALLS))
def test_a_torch_helper_without_torch_names_the_extra(tmp_path: Path, helper: str) -> None:
    store = _committed(tmp_path)
    with pytest.raises(ExtraMissingError) as raised:
        CALLS[helper](store)
    message = str(raised.value)
    assert message.startswith(f"{helper} needs torch: "), message
    assert extra_hint("torch") in message
    # Code that catches what it caught before still catches it.
    assert isinstance(raised.value, ModuleNotFoundError)
    assert isinstance(raised.value, CheckpointError)
    assert raised.value.name == "torch"


@pytest.mark.usefixtures("no_torch")
def test_save_state_without_torch_names_the_extra(tmp_path: Path) -> None:
    guard = CheckpointGuard(
        notices=False, handle_signals=False, flag_file=None, store=CheckpointStore(tmp_path)
    )
    try:
        with pytest.raises(ExtraMissingError, match=r"^save_state needs torch: .*\[torch\]"):
            guard.save_state(1, {"w": [1.0]})
    finally:
        guard.close()


def test_a_module_the_package_imports_that_is_missing_keeps_its_own_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the package itself missing is the extra's business: a module missing inside its
    own imports (a broken install) keeps its error and its name."""
    from forewarn.clients.checkpoint.needs import needs

    (tmp_path / "broken_package_h32").mkdir()
    (tmp_path / "broken_package_h32" / "__init__.py").write_text("import absent_dependency_h32\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as raised:
        needs("broken_package_h32", "helper")
    assert not isinstance(raised.value, ExtraMissingError)
    assert raised.value.name == "absent_dependency_h32"
