"""What a rank's exception inside a DCP save or load hands to DCP crosses ranks (crossing.py):
over generated exception classes (required `__init__` arguments, a lock or a large body held,
classes not importable by name, broken `__str__`), what is sent pickles, rebuilds, stays small,
and names the rank, the class and the message; an exception that crosses as it is is sent
unchanged. The ranks themselves: test_dcp_odd_errors.py."""

from __future__ import annotations

import pickle
import sys
import threading
import types
from pathlib import Path
from typing import Any

import odd_errors
import pytest
from forewarn.clients.checkpoint import CheckpointError, CheckpointStore, RankError
from forewarn.clients.checkpoint.crossing import MAX_PICKLE_BYTES, MAX_TEXT, Crossing, crossable
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples, requires

_made = 0


def _error_class(base: type[Exception], required: int, importable: bool, broken_str: bool) -> type:
    """A class deriving from `base` whose `__init__` takes `required` arguments more than
    its message (so its unpickle fails when `required` > 0)."""
    global _made
    _made += 1

    def __init__(self: Any, text: str, *more: Any) -> None:
        if len(more) != required:
            raise TypeError(f"takes {required} arguments besides the message, got {len(more)}")
        base.__init__(self, text)

    namespace: dict[str, Any] = {"__init__": __init__}
    if broken_str:
        namespace["__str__"] = lambda self: 1 / 0
    cls = type(f"Generated{_made}", (base,), namespace)
    if importable:
        cls.__module__ = __name__
        setattr(sys.modules[__name__], cls.__name__, cls)
    return cls


_HOLDS = st.sampled_from(["nothing", "lock", "socketpair", "small body", "large body"])


@settings(max_examples=examples(100), deadline=None)
@given(
    base=st.sampled_from([Exception, OSError, ValueError, RuntimeError, KeyError, TimeoutError]),
    required=st.integers(0, 2),
    importable=st.booleans(),
    broken_str=st.booleans(),
    holds=_HOLDS,
    text=st.text(max_size=6000),
    rank=st.integers(0, 4095),
)
def test_what_is_sent_crosses_ranks_and_names_the_original(
    base: type[Exception],
    required: int,
    importable: bool,
    broken_str: bool,
    holds: str,
    text: str,
    rank: int,
) -> None:
    cls = _error_class(base, required, importable, broken_str)
    exc = cls(text, *range(required))
    if holds == "lock":
        exc.held = threading.Lock()
    elif holds == "socketpair":
        import socket

        exc.held = socket.socketpair()
    elif holds != "nothing":
        exc.held = bytes(MAX_PICKLE_BYTES + 1 if holds == "large body" else 1000)
    try:
        sent = crossable(exc, rank)
    finally:
        if holds == "socketpair":
            for end in exc.held:
                end.close()
    data = pickle.dumps(sent)  # DCP pickles it on this rank ...
    copy = pickle.loads(data)  # ... and rebuilds it on rank 0 (then on every rank)
    assert len(data) <= MAX_PICKLE_BYTES
    assert type(copy) is type(sent)
    crosses = importable and required == 0 and holds in ("nothing", "small body")
    if crosses:
        assert sent is exc
        return
    assert isinstance(sent, RankError) and isinstance(sent, CheckpointError)
    assert sent.__cause__ is exc  # on this rank, the original and its traceback
    assert (copy.rank, copy.kind) == (rank, f"{__name__}.{cls.__qualname__}")
    assert str(copy).startswith(f"rank {rank}: {__name__}.{cls.__qualname__}: ")
    if broken_str:
        assert "its message could not be made: ZeroDivisionError" in copy.text
    elif len(str(exc)) <= MAX_TEXT:
        assert copy.text == str(exc)
    else:
        assert copy.text.startswith(str(exc)[:MAX_TEXT]) and len(copy.text) < MAX_TEXT + 40


@pytest.mark.parametrize("kind", ["unpickle", "lock", "huge"])
def test_a_guarded_call_raises_what_crosses_and_remembers_the_original(kind: str) -> None:
    crossing = Crossing(lambda: 3)
    original = odd_errors.make(kind, "a.distcp")
    if kind == "huge":
        original.args = (original.args[0], bytes(MAX_PICKLE_BYTES + 1))

    def failing() -> None:
        raise original

    with pytest.raises(RankError) as raised:
        crossing._guarded(failing)()
    assert raised.value.rank == 3 and raised.value.__cause__ is original
    assert raised.value.kind == f"odd_errors.{type(original).__name__}"
    assert crossing.replaced == [original]
    # The CheckpointException DCP raises on this rank gets the original as its cause.
    later = BaseException("CheckpointException ranks:dict_keys([3])")
    crossing.blame(later)
    assert later.__cause__ is original


def test_an_exception_that_crosses_is_raised_unchanged() -> None:
    crossing = Crossing(lambda: 0)
    with pytest.raises(FileNotFoundError) as raised, crossing.crossing():
        raise FileNotFoundError(2, "No such file", "a.distcp")
    assert raised.value.__cause__ is None and crossing.replaced == []
    later = BaseException("CheckpointException")
    crossing.blame(later)
    assert later.__cause__ is None


@requires("torch")
def test_every_method_dcp_calls_on_our_writer_reader_and_planners_is_guarded(
    tmp_path: Path,
) -> None:
    """DCP calls these inside its collectives; one left unguarded (a method torch adds to
    the interface) would hand DCP its exception as it is."""
    from forewarn.clients.checkpoint.dcp import stable_planner, storage_writer
    from forewarn.clients.checkpoint.hashing import StableMemory
    from torch.distributed.checkpoint import (
        DefaultLoadPlanner,
        FileSystemReader,
        LoadPlanner,
        SavePlanner,
        StorageReader,
        StorageWriter,
    )

    crossing = Crossing(lambda: 0)
    gen = CheckpointStore(str(tmp_path / "store")).save(1)
    for target, base in [
        (storage_writer(gen, crossing=crossing), StorageWriter),
        (stable_planner(StableMemory(), crossing), SavePlanner),
        (crossing.guard(FileSystemReader("/nonexistent"), StorageReader), StorageReader),
        (crossing.guard(DefaultLoadPlanner(), LoadPlanner), LoadPlanner),
    ]:
        public = [n for n in dir(base) if not n.startswith("_") and callable(getattr(base, n))]
        assert public
        for name in public:
            assert hasattr(getattr(target, name), "__wrapped__"), (base.__name__, name)
    gen.abort("only looked at")


_RUNTIME_MODULE = types.ModuleType("forewarn_test_runtime_errors")  # in sys.modules only
sys.modules[_RUNTIME_MODULE.__name__] = _RUNTIME_MODULE


class _Held:
    """A value an exception keeps (a response, a request) of a class set below."""


@settings(max_examples=examples(60), deadline=None)
@given(
    base=st.sampled_from([Exception, OSError, ValueError, RuntimeError]),
    where=st.sampled_from(["runtime module", "__main__", "importable"]),
    held_where=st.sampled_from(["nothing", "runtime module", "__main__", "importable"]),
    text=st.text(max_size=200),
    rank=st.integers(0, 4095),
)
def test_a_class_only_this_process_can_find_is_sent_as_a_rank_error(
    base: type[Exception], where: str, held_where: str, text: str, rank: int
) -> None:
    """A class in a module made at run time (in `sys.modules` alone, no file: another rank's
    unpickle raises `ModuleNotFoundError`) or in `__main__` (another rank's script may not
    have it), as the exception's own class or a value it holds, rebuilds here but not on
    rank 0: rank 0 raised out of DCP's gather alone and the raising rank waited for good."""

    def place(cls: type, module_where: str) -> type:
        module = {
            "runtime module": _RUNTIME_MODULE,
            "__main__": sys.modules["__main__"],
            "importable": sys.modules[__name__],
        }[module_where]
        cls.__module__ = module.__name__
        setattr(module, cls.__name__, cls)
        return cls

    cls = place(_error_class(base, 0, True, False), where)
    exc = cls(text)
    if held_where != "nothing":
        holder = place(type(f"Held{cls.__name__}", (_Held,), {}), held_where)
        exc.held = holder()
    sent = crossable(exc, rank)
    copy = pickle.loads(pickle.dumps(sent))
    if where == "importable" and held_where in ("nothing", "importable"):
        assert sent is exc
        return
    assert isinstance(sent, RankError) and sent.__cause__ is exc
    assert (copy.rank, copy.kind) == (rank, f"{cls.__module__}.{cls.__qualname__}")
