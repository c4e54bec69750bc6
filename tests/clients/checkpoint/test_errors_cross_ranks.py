"""The store's errors cross process boundaries: DCP gathers each rank's exception to the
coordinator by pickling it, and an exception that cannot be rebuilt there raised out of DCP's
collective on rank 0 alone, which left the other rank waiting in it for good (an exit's DCP save
of two ranks on a stalled store hung past its deadline once `StorageError` replaced botocore's
errors: check 48a)."""

from __future__ import annotations

import pickle

from forewarn.clients.checkpoint import (
    BackgroundSaveError,
    CorruptGenerationError,
    StorageError,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

_TEXT = st.text(max_size=40)


def _same(error: BaseException) -> BaseException:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    return copy


@settings(max_examples=examples(60), deadline=None)
@given(
    store=_TEXT,
    what=_TEXT,
    detail=_TEXT,
    options=st.tuples(_TEXT) | st.just(()),
    also=_TEXT,
    response=st.none() | st.dictionaries(_TEXT, _TEXT, max_size=3),
)
def test_a_storage_error_is_rebuilt_from_its_pickle(
    store: str,
    what: str,
    detail: str,
    options: tuple[str, ...],
    also: str,
    response: dict[str, object] | None,
) -> None:
    error = StorageError(store, what, detail, options=options, also=also, response=response)
    copy = _same(error)
    assert isinstance(copy, StorageError) and isinstance(copy, OSError)
    assert (copy.store, copy.what, copy.detail, copy.options, copy.response) == (
        store,
        what,
        detail,
        options,
        response,
    )


def test_the_other_errors_with_fields_are_rebuilt_from_their_pickle() -> None:
    corrupt = _same(CorruptGenerationError("step-000000000007", ["a.bin: sha256 differs"]))
    assert isinstance(corrupt, CorruptGenerationError)
    assert (corrupt.name, corrupt.problems) == ("step-000000000007", ["a.bin: sha256 differs"])
    failed = _same(BackgroundSaveError(7, OSError(28, "No space left on device")))
    assert isinstance(failed, BackgroundSaveError) and failed.step == 7
    assert str(failed.cause) == "[Errno 28] No space left on device"
