"""Exceptions a library or a user's code may raise inside a DCP save or load that do not cross
ranks as DCP sends them (pickled): imported by the rank workers (so every rank finds the class
by name) and by the tests.

- `ErrorWithRequiredArguments`: pickles, but its unpickle raises `TypeError` (an `__init__`
  with required arguments that `args` does not hold), as `StorageError` did before 66814a52;
- `ErrorHoldingALock`: its pickling raises `TypeError` (`cannot pickle '_thread.lock'`);
- `ErrorWithHugePickle`: pickles and unpickles, into `HUGE` bytes and more;
- `rank_only`'s class: pickles and unpickles on the rank that made it, and nowhere else.
"""

from __future__ import annotations

import threading

HUGE = 8 << 20


class ErrorWithRequiredArguments(OSError):
    def __init__(self, code: int, text: str) -> None:
        self.code = code
        super().__init__(f"[{code}] {text}")


class ErrorHoldingALock(RuntimeError):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.lock = threading.Lock()


class ErrorWithHugePickle(ValueError):
    def __init__(self, text: str, body: bytes = b"") -> None:
        super().__init__(text, body or bytes(HUGE))

    def __str__(self) -> str:
        return str(self.args[0])


def make(kind: str, where: str) -> BaseException:
    """An error of `kind` (unpickle, lock, huge, rankonly) whose message names `where`."""
    if kind == "unpickle":
        return ErrorWithRequiredArguments(5, f"the library failed writing {where}")
    if kind == "lock":
        return ErrorHoldingALock(f"the library failed writing {where}")
    if kind == "huge":
        return ErrorWithHugePickle(f"the library failed writing {where}")
    if kind == "rankonly":
        return rank_only(where)
    raise ValueError(kind)


def rank_only(where: str) -> BaseException:
    """An error whose class lives in a module this process alone has (made here, in
    `sys.modules` only): its pickle is made and rebuilt here, but on another rank the
    unpickle raises `ModuleNotFoundError` (a class from a module file on one machine only,
    a class a library makes at run time)."""
    import sys
    import types

    module = sys.modules.get("rank_only_errors")
    if module is None:
        module = types.ModuleType("rank_only_errors")
        code = "class ErrorOfThisRankOnly(RuntimeError):\n    pass\n"
        exec(compile(code, "<rank_only_errors>", "exec"), module.__dict__)
        sys.modules["rank_only_errors"] = module
    error: BaseException = module.ErrorOfThisRankOnly(f"the library failed writing {where}")
    return error
