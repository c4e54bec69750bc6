"""A claim PUT that went through but whose answer was lost (a reset connection): botocore
retries it, the service answers the retry 412 (the claim exists: this process's own), and
the claim then named this very process as "another process" saving the step. A loopback
proxy in front of moto loses the answers."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options, s3claim
from hypothesis import example, given, settings
from hypothesis import strategies as st
from s3_proxy import Reply, Request, S3Proxy
from support import examples

CLAIM = ".step-000000000100.claim"


class LostClaimAnswers(S3Proxy):
    """Forwards every request; the answers to the first `lose` claim writes are lost
    (a retry's 412 included)."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.lose = 0
        self.lost = 0

    def forwarded(self, request: Request, reply: Reply) -> Reply | None:
        claim = request.command == "PUT" and request.path.split("?")[0].endswith(CLAIM)
        if claim and self.lost < self.lose:
            self.lost += 1
            return None
        return reply


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[LostClaimAnswers]:
    with LostClaimAnswers(moto_endpoint) as server:
        yield server


def save(store: CheckpointStore) -> None:
    with store.save(100) as gen:
        gen.write_bytes("model.bin", b"weights" * 1000)


def claims(store: CheckpointStore) -> list[str]:
    import boto3

    bucket, prefix = store.url[len("s3://") :].split("/", 1)
    listed = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/.")
    return [item["Key"] for item in listed.get("Contents", []) if item["Key"].endswith(".claim")]


def test_a_claim_whose_answer_was_lost_does_not_refuse_its_own_save(
    proxy: LostClaimAnswers, bucket: str
) -> None:
    store = CheckpointStore(f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url))
    proxy.lose = 1
    save(store)
    assert proxy.lost == 1, "the claim's answer was lost once"
    assert store.get(100, verify="checksums").read_bytes("model.bin") == b"weights" * 1000
    assert claims(store) == [], "the save let go of its claim"


def test_a_claim_left_by_a_failed_save_of_this_process_does_not_refuse_its_next_save(
    proxy: LostClaimAnswers, bucket: str
) -> None:
    """Every answer lost: the save fails, with the claim created. The same process saving
    the step again (a retry) is its only writer: its own leftover claim must not refuse it."""
    store = CheckpointStore(f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url))
    proxy.lose = 1000
    with pytest.raises(Exception):  # noqa: B017 - whatever botocore raises once it gives up
        save(store)
    assert claims(store), "the claim was written, its answers lost"
    proxy.lose = 0
    save(store)
    assert store.get(100, verify="checksums").read_bytes("model.bin") == b"weights" * 1000
    assert claims(store) == []


claim_fields = st.fixed_dictionaries(
    {},
    optional={
        "holder": st.one_of(st.text(), st.integers(), st.none()),
        "pid": st.one_of(st.integers(), st.text(), st.none(), st.lists(st.integers())),
        "pid_started": st.one_of(st.integers(), st.text(), st.none()),
        "boot": st.one_of(st.text(), st.integers(), st.none()),
        "pid_namespace": st.one_of(st.integers(), st.text(), st.none()),
        "token": st.text(),
    },
)
claim_bodies = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda found: json.dumps(found).encode(), claim_fields),
    st.builds(lambda found: json.dumps([found]).encode(), claim_fields),
)


@settings(max_examples=examples(200), deadline=None)
@given(raw=claim_bodies)
# Nested a few thousand deep, json.loads raises RecursionError, not ValueError: it escaped the
# claim's readers, and a save meeting such an object in a shared bucket failed with it.
@example(raw=b"[" * 100_000 + b"]" * 100_000)
@example(raw=b'{"pid": ' + b"[" * 100_000)
def test_a_claim_body_of_any_shape_is_read_without_raising(raw: bytes) -> None:
    """A claim is read back from storage: anything found there is another writer's (or
    garbage), never this process's unless it names it exactly."""
    assert isinstance(s3claim._holder(raw), str)
    assert isinstance(s3claim._gone_from_here(raw), bool)
    here = s3claim._this_process()
    named = json.loads(raw) if _is_json_object(raw) else None
    expected = (
        bool(here)
        and isinstance(named, dict)
        and all(key in named and named[key] == value for key, value in here.items())
    )
    assert s3claim._left_by_this_process(raw) is expected


def _is_json_object(raw: bytes) -> bool:
    try:
        return isinstance(json.loads(raw), dict)
    except (ValueError, RecursionError):
        return False


def test_a_claim_of_this_process_is_told_apart_from_one_of_its_parent() -> None:
    here = s3claim._this_process()
    if not here:
        pytest.skip("no /proc here: claims name no process")
    assert s3claim._left_by_this_process(json.dumps(here).encode())
    parent = s3claim._this_process(os.getppid())
    assert parent and not s3claim._left_by_this_process(json.dumps(parent).encode())


def test_a_commit_lists_the_claims_in_the_root_not_every_generation(bucket: str) -> None:
    """The sweep of killed writers' claims listed the whole root at every commit: one
    prefix per generation kept, thousands with retention off."""
    store = CheckpointStore(f"s3://{bucket}/run")
    for step in (1, 2, 3):
        store.flush(step, lambda gen: gen.write_bytes("model.bin", b"m"))
    # A store's commits look once per lease: the first one of a new store does.
    store = CheckpointStore(f"s3://{bucket}/run")
    client = store.backend.client
    listed: list[dict[str, object]] = []
    real = client.get_paginator

    def paginator(name: str) -> object:
        inner = real(name)

        class Spy:
            def paginate(self, **kwargs: object) -> object:
                pages = list(inner.paginate(**kwargs))
                listed.extend(pages)
                return pages

        return Spy()

    client.get_paginator = paginator
    store.flush(4, lambda gen: gen.write_bytes("model.bin", b"m"))
    assert any(page.get("Prefix") == "run/." for page in listed), "it looked for stale claims"
    assert all(not page.get("CommonPrefixes") for page in listed), listed
