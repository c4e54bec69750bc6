"""What a rank's exception inside a DCP save or load hands to DCP: one that crosses ranks.

DCP runs our storage writer's, reader's and planners' methods inside its collectives, catches
what they raise, and sends it to the other ranks pickled (gathered to rank 0, then the verdict
scattered or broadcast to all). An exception whose pickle cannot be made (it holds a lock, a
socket) raises in the sending rank, one whose unpickle raises (an `__init__` with required
arguments that `args` does not hold) raises in rank 0 alone: either raises outside DCP's
collective on one rank, and the others wait in it for good (gloo's timeout, 30 min by
default). Any library under the store (botocore, a user's fsspec, an `OSError` subclass) or a
user's own class can raise such an exception, so every exception leaving our methods is
checked, and one that does not cross as it is, or whose pickle is too large to gather, is
replaced by a `RankError` naming the rank, the class and the message.

"Crosses as it is" is judged by rebuilding the pickle here, which the other ranks would do
too, except that a class this process alone can find rebuilds here and nowhere else (rank 0
raised `ModuleNotFoundError` out of DCP's gather, and the raising rank waited for good): a
class (the exception's, or any value's it holds) in `__main__` (the other ranks' script may
not define it) or in a module that was made at run time (no spec, nothing another process
could import) counts as not crossing. A class in a module file that only this machine has
cannot be told from here.
"""

from __future__ import annotations

import functools
import io
import pickle
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .errors import RankError

# An exception's pickle larger than this is not sent: DCP gathers every rank's to rank 0 and
# sends rank 0's verdict (all of them) back to every rank, in memory, in one message each.
MAX_PICKLE_BYTES = 1 << 20
# The message a `RankError` keeps of the original (a message may hold a whole response body).
MAX_TEXT = 4000


def _text(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception as problem:  # a broken __str__ must not hide the original
        text = f"<its message could not be made: {type(problem).__name__}: {problem}>"
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"... ({len(text)} characters)"


class _Elsewhere(pickle.Unpickler):
    """Rebuilds a pickle as another rank would: refuses a class that only this process
    could find (see the module's words)."""

    def find_class(self, module: str, name: str) -> Any:
        loaded = sys.modules.get(module)
        # A module not loaded yet is imported by name, as another rank would.
        if module == "__main__" or (
            loaded is not None
            and getattr(getattr(loaded, "__spec__", None), "origin", None) is None
        ):
            raise pickle.UnpicklingError(f"{module}.{name} may exist in this process alone")
        return super().find_class(module, name)


def crossable(exc: BaseException, rank: int) -> BaseException:
    """`exc` itself if its pickle can be made, is at most `MAX_PICKLE_BYTES` and rebuilds it;
    else a `RankError` of `rank` naming it, with `exc` as its `__cause__`."""
    try:
        data = pickle.dumps(exc)
        if len(data) <= MAX_PICKLE_BYTES:
            _Elsewhere(io.BytesIO(data)).load()
            return exc
    except Exception:
        pass  # replaced below; the original stays its cause, with its traceback
    kind = type(exc)
    error = RankError(rank, f"{kind.__module__}.{kind.__qualname__}", _text(exc))
    error.__cause__ = exc
    return error


class Crossing:
    """Guards the methods DCP calls on our writer, reader and planners (`guard`): what they
    raise crosses ranks. Remembers the exceptions it replaced (`replaced`), so the rank that
    raised one can name it as the cause of the `CheckpointException` DCP raises for it (DCP's
    copy, rebuilt from rank 0's verdict, has none)."""

    def __init__(self, rank: Callable[[], int]) -> None:
        self._rank = rank
        self.replaced: list[BaseException] = []

    @contextmanager
    def crossing(self) -> Iterator[None]:
        try:
            yield
        except BaseException as exc:
            sent = crossable(exc, self._rank())
            if sent is exc:
                raise
            self.replaced.append(exc)
            raise sent from exc

    def guard(self, target: Any, base: type) -> Any:
        """`target` (an instance of `base`, a DCP interface: `StorageWriter`, `SavePlanner`,
        ...) with every public method of `base` guarded; a method torch adds to the interface
        later is guarded too."""
        for name in dir(base):
            if name.startswith("_") or not callable(getattr(base, name, None)):
                continue
            method = getattr(target, name)
            setattr(target, name, self._guarded(method))
        return target

    def _guarded(self, method: Callable[..., Any]) -> Callable[..., Any]:
        # functools.wraps keeps the signature DCP inspects (`storage_meta`, `**kwargs`).
        @functools.wraps(method)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            with self.crossing():
                return method(*args, **kwargs)

        return guarded

    def blame(self, exc: BaseException) -> None:
        """On the rank that raised a replaced exception: make the first one the cause of
        `exc` (DCP's `CheckpointException`), unless it has one."""
        if self.replaced and exc.__cause__ is None and exc not in self.replaced:
            exc.__cause__ = self.replaced[0]
