"""The store on local disk and on a real S3-compatible server: commit, resume, verify,
fall back past broken generations, retention, and the errors users meet."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest
from forewarn.clients.checkpoint import (
    CheckpointError,
    CheckpointStore,
    CommitError,
    CorruptGenerationError,
    GenerationExistsError,
    GenerationNotFoundError,
    GenerationWriter,
    InvalidNameError,
    S3Options,
    StoreConfigError,
)
from forewarn.clients.checkpoint.hashing import digest_bytes
from forked_ranks import RankLauncher
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples, requires


def payload(step: int, size: int = 1000) -> bytes:
    return bytes((step * 7 + i) % 251 for i in range(size))


def save_step(store: CheckpointStore, step: int, size: int = 1000) -> None:
    with store.save(step, metadata={"loss": 1.0 / (step + 1)}) as gen:
        gen.write_bytes("model.bin", payload(step, size))
        with gen.open("shards/optimizer.bin") as stream:
            stream.write(b"opt-")
            stream.write(bytearray(payload(step + 1, size)))


def rewrite(store: CheckpointStore, key: str, change: Any) -> None:
    """Tamper with one stored object behind the store's back."""
    backend = store.backend
    with backend.open_read(key) as stream:
        data = stream.read()
    backend.put_small(key, change(data))


def recommit(store: CheckpointStore, step: int, change: Any) -> None:
    """Rewrite a generation's manifest behind the store's back, with a marker naming it: a
    whole manifest, as another writer (a newer version) could make one."""
    from forewarn.clients.checkpoint.manifest import CommitMarker, generation_name

    name = generation_name(step)
    raw = change(store.backend.get_small(f"{name}/MANIFEST.json") or b"")
    store.backend.put_small(f"{name}/MANIFEST.json", raw)
    store.backend.put_small(f"{name}/COMMIT", CommitMarker.for_manifest(step, raw).encode())


def test_commit_and_resume(make_store: Any) -> None:
    store = make_store()
    assert store.latest() is None
    save_step(store, 5)
    save_step(store, 10)

    resumed = make_store().latest(verify="checksums")
    assert resumed is not None
    assert resumed.step == 10
    assert resumed.name == "step-000000000010"
    assert resumed.metadata == {"loss": 1.0 / 11}
    assert resumed.world_size == 1
    assert set(resumed.files) == {"model.bin", "shards/optimizer.bin"}
    assert resumed.read_bytes("model.bin") == payload(10)
    with resumed.open("shards/optimizer.bin") as stream:
        assert stream.read() == b"opt-" + payload(11)
    assert store.latest_hint() == 10
    assert [g.step for g in store.generations()] == [5, 10]
    assert store.verify(5, checksums=True).ok


def test_large_file_streams_in_parts(make_store: Any, store_url: str, tmp_path: Path) -> None:
    # 13 MiB through 5 MiB parts on S3: a multipart upload with a short last part.
    store = make_store(
        **({"s3": S3Options(part_size=5 << 20)} if store_url.startswith("s3://") else {})
    )
    source = tmp_path / "big.bin"
    data = os.urandom(13 << 20)
    source.write_bytes(data)
    with store.save(1) as gen:
        entry = gen.put_file("big.bin", source)
        gen.write_bytes("empty", b"")
    assert entry.size == len(data)
    latest = store.latest(verify="checksums")
    assert latest is not None
    assert latest.read_bytes("empty") == b""
    copy = latest.get_file("big.bin", tmp_path / "copy.bin")
    assert copy.read_bytes() == data


def test_a_flipped_byte_is_detected_and_latest_falls_back(make_store: Any) -> None:
    store = make_store(verify="checksums")
    save_step(store, 1)
    save_step(store, 2)

    def flip(data: bytes) -> bytes:
        return data[:500] + bytes([data[500] ^ 0x01]) + data[501:]

    rewrite(store, "step-000000000002/model.bin", flip)
    check = store.verify(2, checksums=True)
    assert not check.ok
    assert check.problems == ("model.bin does not match its checksum",)
    assert store.verify(2, checksums=False).ok  # same size: only checksums catch it
    latest = store.latest()
    assert latest is not None and latest.step == 1
    assert store.latest(verify="sizes").step == 2  # type: ignore[union-attr]
    with pytest.raises(CorruptGenerationError, match="does not match its checksum"):
        store.get(2)
    with pytest.raises(CorruptGenerationError):
        store.latest(verify="sizes").read_bytes("model.bin")  # type: ignore[union-attr]


def test_a_missing_file_is_detected_and_latest_falls_back(make_store: Any) -> None:
    store = make_store()
    save_step(store, 1)
    save_step(store, 2)
    store.backend.delete("step-000000000002/shards/optimizer.bin")
    assert store.verify(2).problems == ("shards/optimizer.bin is missing",)
    assert store.latest().step == 1  # type: ignore[union-attr]


def test_a_truncated_file_is_detected_and_latest_falls_back(make_store: Any) -> None:
    store = make_store()
    save_step(store, 1)
    save_step(store, 2)
    rewrite(store, "step-000000000002/model.bin", lambda data: data[:-1])
    assert store.verify(2, checksums=False).problems == (
        "model.bin has 999 bytes, the manifest says 1000",
    )
    assert store.latest().step == 1  # type: ignore[union-attr]


def test_a_tampered_manifest_or_marker_is_detected(make_store: Any) -> None:
    store = make_store()
    for step in (1, 2, 3):
        save_step(store, step)
    rewrite(store, "step-000000000003/MANIFEST.json", lambda data: data.replace(b"1000", b"1001"))
    rewrite(store, "step-000000000002/COMMIT", lambda data: b"{not json")
    assert "manifest does not match" in store.verify(3).problems[0]
    assert "commit marker" in store.verify(2).problems[0]
    assert store.latest().step == 1  # type: ignore[union-attr]
    assert [g.step for g in store.generations()] == [1]


def test_a_marker_manifest_or_latest_nested_past_json_recursion_is_skipped_not_raised(
    make_store: Any,
) -> None:
    """json.loads raises RecursionError, not ValueError, for JSON nested a few thousand deep:
    a COMMIT, MANIFEST.json (committed to match) or LATEST of that shape made latest() raise,
    so a job crashed at every restart instead of resuming from the generation that verifies."""
    nested = b"[" * 100_000 + b"]" * 100_000
    store = make_store()
    for step in (1, 2, 3):
        save_step(store, step)
    rewrite(store, "step-000000000003/COMMIT", lambda data: nested)
    recommit(store, 2, lambda data: nested)
    rewrite(store, "LATEST", lambda data: nested)
    assert "commit marker" in store.verify(3).problems[0]
    assert "manifest" in store.verify(2).problems[0]
    assert store.latest().step == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        # The second `step` counted for Python's json, the first for many other readers.
        (lambda data: data.replace(b'"step": 2,', b'"step": 2, "step": 3,'), "appears twice"),
        # Python's own words: "...; use sys.set_int_max_str_digits() to increase the limit".
        (
            lambda data: data.replace(b'"step": 2,', b'"step": 2' + b"0" * 5000 + b","),
            "5001 digits",
        ),
        (lambda data: b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
def test_a_manifest_refused_says_why_in_words(make_store: Any, change: Any, said: str) -> None:
    """`forewarn checkpoint verify` of a committed manifest holding a key twice, a number past
    Python's digits or nesting past its recursion named Python's internals ("maximum
    recursion depth exceeded while decoding a JSON array from a unicode string") or took the
    last of two keys; each is now refused saying what it is, and skipped for the older one."""
    store = make_store()
    for step in (1, 2):
        save_step(store, step)
    recommit(store, 2, change)
    (problem,) = store.verify(2).problems
    assert "manifest" in problem and said in problem, problem
    assert "sys." not in problem and "recursion" not in problem, problem
    assert store.latest().step == 1  # type: ignore[union-attr]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=10,
)


@settings(max_examples=examples(200))
@given(
    raw=st.one_of(
        _JSON.map(lambda value: json.dumps(value).encode()),
        st.binary(max_size=40),
        st.integers(4290, 4400).map(lambda n: b'{"step": ' + b"7" * n + b"}"),
        st.sampled_from([b'{"step": 1, "step": 2}', b'{"a": {"b": 1, "b": 1}}']),
    )
)
def test_any_manifest_or_marker_is_read_or_refused_in_words(raw: bytes) -> None:
    """Whatever a manifest or commit marker holds, reading it gives the object or a ValueError
    naming what it is, never another error nor Python's advice about its own limits."""
    from forewarn.clients.checkpoint.manifest import CommitMarker, Manifest

    for decode in (Manifest.decode, CommitMarker.decode):
        try:
            decode(raw)
        except ValueError as error:
            assert str(error) and "sys." not in str(error), error


@pytest.mark.parametrize(("marker", "manifest"), [("sha257", "blake3"), ("shake_128", "shake_256")])
def test_a_checksum_scheme_this_version_does_not_know_is_skipped_not_raised(
    make_store: Any, marker: str, manifest: str
) -> None:
    """A marker or manifest naming an algorithm hashlib lacks (a flipped byte in the marker, a
    store a newer forewarn wrote) made latest() raise ValueError: a job crashed at every
    restart instead of resuming from the older generation that verifies. hashlib has the
    shake_* algorithms, but their digest takes a length: they raised TypeError the same way."""
    store = make_store()
    for step in (1, 2, 3):
        save_step(store, step)
    rewrite(
        store,
        "step-000000000003/COMMIT",
        lambda data: data.replace(b"sha256:", f"{marker}:".encode()),
    )
    # A manifest that is whole (its marker names its checksum), with a file of another scheme.
    recommit(
        store,
        2,
        lambda data: data.replace(b'"checksum": "sha256:', f'"checksum": "{manifest}:'.encode()),
    )
    for policy in ("sizes", "checksums"):
        latest = store.latest(verify=policy)
        assert latest is not None and latest.step == 1
    assert f"unknown checksum algorithm {marker!r}" in store.verify(3).problems[0]
    assert f"unknown checksum algorithm {manifest!r}" in store.verify(2).problems[0]
    with pytest.raises(CorruptGenerationError, match="unknown checksum algorithm"):
        store.get(2)
    assert [g.step for g in store.generations()] == [1]


@pytest.mark.parametrize("outside", ["relative", "absolute"])
def test_a_manifest_naming_a_file_outside_its_generation_does_not_verify(
    make_store: Any, tmp_path: Path, outside: str
) -> None:
    """Names are checked when written, not when a manifest is read: on S3 an object key may
    hold `..` or start with `/`, so a manifest naming one verified, and `get_dir`
    (`forewarn checkpoint get`) wrote that file outside its destination."""
    destination = tmp_path / "get" / "to" / "here"
    escaped = tmp_path / "get" / "escape.txt"
    name = "../../escape.txt" if outside == "relative" else str(escaped)
    store = make_store()
    save_step(store, 1)
    data = b"not yours\n"
    store.backend.put_small(f"step-000000000001/{name}", data)
    entry = {"name": name, "size": len(data), "rank": 0, "checksum": digest_bytes(data)}

    def add_entry(raw: bytes) -> bytes:
        manifest = json.loads(raw)
        manifest["files"].append(entry)
        return (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()

    recommit(store, 1, add_entry)
    problems = store.verify(1).problems
    assert len(problems) == 1 and problems[0].startswith(f"manifest: file name {name!r}")
    assert store.latest(verify="checksums") is None
    with pytest.raises(CorruptGenerationError):
        store.get(1).get_dir("", destination)
    assert not escaped.exists()


def test_an_uncommitted_generation_is_never_returned(make_store: Any) -> None:
    store = make_store()
    save_step(store, 1)
    gen = store.save(2)
    gen.write_bytes("model.bin", payload(2))
    # Files are in place, but no marker yet.
    assert store.latest().step == 1  # type: ignore[union-attr]
    assert store.steps() == [1, 2]
    with pytest.raises(GenerationNotFoundError):
        store.get(2)
    gen.commit()
    assert store.latest().step == 2  # type: ignore[union-attr]


def test_an_exception_in_the_block_commits_nothing(make_store: Any) -> None:
    store = make_store()
    save_step(store, 1)
    with pytest.raises(RuntimeError, match="boom"), store.save(2) as gen:
        gen.write_bytes("model.bin", payload(2))
        with gen.open("half.bin") as stream:
            stream.write(b"x" * 100)
            raise RuntimeError("boom")
    assert store.latest().step == 1  # type: ignore[union-attr]
    assert store.steps() == [1]


def test_a_dead_writers_leftover_is_replaced(make_store: Any) -> None:
    store = make_store()
    leftover = store.save(3)
    leftover.write_bytes("stale.bin", b"stale")
    # The writer dies here (in this process: its writer object goes, and with it its hold on
    # the step); a restarted job saves the same step again.
    del leftover
    gc.collect()
    save_step(make_store(), 3)
    latest = store.latest(verify="checksums")
    assert latest is not None and set(latest.files) == {"model.bin", "shards/optimizer.bin"}
    assert "stale.bin" not in store.backend.list_sizes("step-000000000003")


def test_generations_are_immutable(make_store: Any) -> None:
    store = make_store()
    save_step(store, 4)
    with pytest.raises(GenerationExistsError, match="step-000000000004"):
        store.save(4)
    with store.save(5) as gen:
        gen.write_bytes("a", b"1")
        with pytest.raises(CommitError, match="already written"):
            gen.open("a")


def test_a_save_committed_or_aborted_inside_its_block_ends_the_block_quietly(
    make_store: Any,
) -> None:
    """`gen.commit()` inside the block committed, then leaving the block raised CommitError
    ('already committed or aborted'): a durable generation reported as a failed save (through
    `store.flush`, what CheckpointGuard saves with, too)."""
    store = make_store()
    with store.save(5) as gen:
        gen.write_bytes("model.bin", b"weights")
        committed = gen.commit()
    assert gen.committed is committed and store.latest().step == 5  # type: ignore[union-attr]

    def write(gen: GenerationWriter) -> None:
        gen.write_bytes("model.bin", b"weights")
        gen.commit()

    assert store.flush(6, write).generation.step == 6
    with store.save(7) as gen:
        gen.write_bytes("model.bin", b"weights")
        gen.abort()
    assert store.verify(7).problems == ("not committed",)


def test_a_job_resumed_below_a_broken_generation_saves_its_step_again(make_store: Any) -> None:
    """latest() falls back past a committed generation that does not verify; the job resumed
    from the one before trains through that step again. Its save there raised
    GenerationExistsError, so a single-rank job crashed at that step at every restart."""
    store = make_store()
    save_step(store, 1)
    save_step(store, 2)
    rewrite(store, "step-000000000002/model.bin", lambda data: data[:-1])
    resumed = make_store()
    assert resumed.latest().step == 1  # type: ignore[union-attr]
    save_step(resumed, 2)
    latest = resumed.latest(verify="checksums")
    assert latest is not None and latest.step == 2
    assert latest.read_bytes("model.bin") == payload(2)
    with pytest.raises(GenerationExistsError, match="already committed"):
        resumed.save(2)  # a generation that verifies is still immutable
    rewrite(store, "step-000000000002/model.bin", lambda data: data[:-1])
    with pytest.raises(GenerationExistsError, match="does not verify"):
        resumed.save(2, rank=1, world_size=2)  # another rank may be writing into it


def test_retention_keeps_n_and_what_latest_names(make_store: Any) -> None:
    store = make_store(keep=2)
    for step in range(1, 6):
        save_step(store, step)
    assert store.steps() == [4, 5]
    # A broken newest generation does not count toward `keep`.
    store.backend.delete("step-000000000005/model.bin")
    save_step(store, 6)
    assert store.steps() == [4, 5, 6]
    save_step(store, 7)
    assert store.steps() == [6, 7]


def test_retention_spares_the_generation_latest_names(make_store: Any) -> None:
    store = make_store(keep=1)
    save_step(store, 10)
    # An older step saved later leaves LATEST on 10; pruning to keep=1 must spare 10... and
    # the newest verified one.
    save_step(store, 20)
    assert store.steps() == [20]
    store.backend.put_small("LATEST", json.dumps({"step": 20}).encode())
    gen = store.save(30)
    gen.write_bytes("model.bin", payload(30))
    # 30 is being written: pruning now must not touch it, and must keep 20.
    assert store.prune() == []
    assert store.steps() == [20, 30]
    gen.commit()
    assert store.steps() == [30]


def test_retention_never_deletes_the_generation_just_committed(make_store: Any) -> None:
    store = make_store(keep=1)
    save_step(store, 200)
    # A job restarted from an older checkpoint saves a lower step than the store's newest:
    # LATEST stays on 200, and the save it just made must survive its own retention pass.
    save_step(store, 100)
    assert store.steps() == [100, 200]
    assert store.get(100).read_bytes("model.bin") == payload(100)


def test_retention_counts_by_the_verify_policy(make_store: Any) -> None:
    store = make_store(verify="checksums")
    save_step(store, 1)
    save_step(store, 2)
    # A flipped byte in the newest: sizes still match, so only checksums catch it, and
    # resume (`latest()`, by checksums) falls back to 1; retention must keep 1 too.
    rewrite(store, "step-000000000002/model.bin", lambda data: bytes([data[0] ^ 1]) + data[1:])
    assert store.latest().step == 1  # type: ignore[union-attr]
    store.keep = 1
    assert store.prune() == []
    assert store.latest().step == 1  # type: ignore[union-attr]
    save_step(store, 3)
    assert store.steps() == [3]


def test_commit_refuses_a_generation_whose_files_are_gone(make_store: Any, store_url: str) -> None:
    second = make_store()
    gen = second.save(50)  # a second job on the same store, behind the first
    gen.write_bytes("model.bin", payload(50))
    # Another process deletes the unfinished, older generation under it (retention spares a
    # claimed one now; a delete by hand, or a save of several ranks, which holds no claim).
    first_job = (
        "import sys\n"
        "from forewarn.clients.checkpoint import CheckpointStore\n"
        "store = CheckpointStore(sys.argv[1], keep=1)\n"
        "for step in (100, 500):\n"
        "    with store.save(step) as gen:\n"
        "        gen.write_bytes('model.bin', b'w')\n"
        "store.delete(50)\n"
    )
    subprocess.run([sys.executable, "-c", first_job, store_url], check=True, timeout=120)
    assert second.steps() == [500]
    with pytest.raises(CommitError, match=r"step-000000000050.*model.bin is missing"):
        gen.commit()
    assert gen.committed is None
    assert 50 not in [generation.step for generation in second.generations()]


def test_retention_spares_a_save_another_store_object_of_this_process_is_writing(
    make_store: Any,
) -> None:
    """Retention spares "any generation this process is still writing", but knew only its
    own store object's saves: a second CheckpointStore on the same path (a BackgroundSaver's
    store beside the loop's, a framework callback's beside the script's) had its save in
    flight deleted under it, and that save failed (`model.bin is missing`), raised by a
    background saver at the loop's next save."""
    first, second = make_store(keep=1), make_store()
    save_step(first, 100)
    gen = second.save(50)
    gen.write_bytes("model.bin", payload(50))
    save_step(first, 500)
    assert first.steps() == [50, 500]
    assert gen.commit().step == 50
    assert second.get(50).read_bytes("model.bin") == payload(50)


@pytest.mark.parametrize("newer", ["in flight when listed", "not listed yet"])
@pytest.mark.parametrize("verify", ["sizes", "checksums"])
def test_latest_finds_the_generation_committed_while_it_checked_the_one_retention_removed(
    make_store: Any, newer: str, verify: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A job restarted while the old one still commits its final save (keep=1): latest()
    listed the store, and while it checked step 1 the old job committed step 2 and its
    retention removed step 1. latest() warned that step 1 "does not verify" and returned None,
    and the job trained again from step 0 with step 2 in the store."""
    import logging

    from forewarn.clients.checkpoint.testing import DelegatingBackend

    old_job = make_store(keep=1)
    save_step(old_job, 1)
    final = None
    if newer == "in flight when listed":
        final = old_job.save(2)
        final.write_bytes("model.bin", payload(2))

    class CommitsDuringTheCheck(DelegatingBackend):
        """The old job commits step 2 when the check of step 1 reads its marker (sizes), or
        when it starts hashing its bytes (checksums)."""

        fired = False

        def commit_now(self) -> None:
            self.fired = True
            if final is not None:
                final.commit()
            else:
                save_step(old_job, 2)
            assert old_job.steps() == [2]

        def get_small(self, key: str) -> bytes | None:
            if verify == "sizes" and key.startswith("step-000000000001/") and not self.fired:
                self.commit_now()
            return self.inner.get_small(key)

        def open_read(self, key: str) -> IO[bytes]:
            if key.startswith("step-000000000001/") and not self.fired:
                self.commit_now()
            return self.inner.open_read(key)

    reader = CheckpointStore(backend=CommitsDuringTheCheck(make_store().backend), verify=verify)
    caplog.set_level(logging.WARNING, logger="forewarn.checkpoint")
    found = reader.latest()
    assert found is not None and found.step == 2
    assert not [r for r in caplog.records if "does not verify" in r.getMessage()]


def test_retention_never_deletes_the_hinted_generation(make_store: Any) -> None:
    store = make_store()
    for step in (1, 2, 3):
        save_step(store, step)
    store.backend.put_small("LATEST", json.dumps({"step": 1}).encode())
    store.keep = 1
    assert store.prune() == [2]
    assert store.steps() == [1, 3]


def test_flush_hook_times_the_save(make_store: Any) -> None:
    store = make_store()
    result = store.flush(7, lambda gen: gen.write_bytes("m", b"weights"), metadata={"k": 1})
    assert result.seconds > 0
    assert result.generation.step == 7
    assert result.generation.metadata == {"k": 1}
    assert store.latest().read_bytes("m") == b"weights"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "name", ["", "/abs", "a/../b", "./a", "a//b", "MANIFEST.json", "COMMIT", "parts/x", "a\\b"]
)
def test_bad_file_names_are_refused(tmp_path: Path, name: str) -> None:
    gen = CheckpointStore(tmp_path).save(1)
    with pytest.raises(InvalidNameError):
        gen.open(name)


def test_a_generation_name_with_a_trailing_newline_is_not_a_generation() -> None:
    from forewarn.clients.checkpoint.manifest import parse_generation_name

    assert parse_generation_name("step-000000000007") == 7
    assert parse_generation_name("step-000000000007\n") is None


def test_bad_configuration_names_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(StoreConfigError, match="keep"):
        CheckpointStore(tmp_path, keep=0)
    with pytest.raises(StoreConfigError, match="verify"):
        CheckpointStore(tmp_path, verify="md5")  # type: ignore[arg-type]
    # Negative: a ValueError from time.sleep once a multi-rank save's files were written;
    # 0: rank 0 and the others polled the store in a tight loop for up to commit_timeout.
    for interval in (-1, 0):
        with pytest.raises(StoreConfigError, match="poll_interval must be positive"):
            CheckpointStore(tmp_path, poll_interval=interval)
    with pytest.raises(StoreConfigError, match="'gs' is not supported"):
        CheckpointStore("gs://bucket/x")
    with pytest.raises(StoreConfigError, match="endpoint_url apply to s3"):
        CheckpointStore(tmp_path, s3=S3Options(endpoint_url="http://127.0.0.1:1"))
    with pytest.raises(StoreConfigError, match="or a backend, not both"):
        CheckpointStore(tmp_path, backend=CheckpointStore(tmp_path).backend)
    with pytest.raises(StoreConfigError, match="needs a URL"):
        CheckpointStore()
    with pytest.raises(StoreConfigError, match="names no bucket"):
        CheckpointStore("s3:///prefix")
    with pytest.raises(ValueError, match="non-negative int"):
        CheckpointStore(tmp_path).save(-1)
    with pytest.raises(ValueError, match="JSON-serialisable"):
        CheckpointStore(tmp_path).save(1, metadata={"x": object()})


def test_file_urls_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = CheckpointStore(f"file://{tmp_path}/a")
    save_step(store, 1)
    monkeypatch.setenv("FOREWARN_CHECKPOINT_URL", str(tmp_path / "a"))
    monkeypatch.setenv("FOREWARN_CHECKPOINT_KEEP", "3")
    monkeypatch.setenv("FOREWARN_CHECKPOINT_VERIFY", "checksums")
    from_env = CheckpointStore.from_env()
    assert from_env.keep == 3 and from_env.verify_policy == "checksums"
    assert from_env.latest().path("model.bin").read_bytes() == payload(1)  # type: ignore[union-attr]
    monkeypatch.setenv("FOREWARN_CHECKPOINT_KEEP", "three")
    with pytest.raises(StoreConfigError, match="FOREWARN_CHECKPOINT_KEEP"):
        CheckpointStore.from_env()


@pytest.mark.parametrize(
    ("variable", "value"),
    [("KEEP", "0"), ("KEEP", "-1"), ("VERIFY", "checksum"), ("VERIFY", "md5")],
)
def test_a_bad_environment_value_is_named_by_its_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    """`FOREWARN_CHECKPOINT_KEEP=0` said 'keep must be a positive integer or None, got 0' and
    `FOREWARN_CHECKPOINT_VERIFY=checksum` 'verify must be ...': an argument nobody passed, in
    a pod whose manifest sets the variable."""
    monkeypatch.setenv("FOREWARN_CHECKPOINT_URL", str(tmp_path / "a"))
    monkeypatch.setenv(f"FOREWARN_CHECKPOINT_{variable}", value)
    with pytest.raises(StoreConfigError, match=f"^FOREWARN_CHECKPOINT_{variable}='{value}' "):
        CheckpointStore.from_env()


def test_environment_values_from_a_configmap_lose_their_trailing_newline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ConfigMap or Secret written as a YAML block (`url: |`) ends its value with a newline:
    the store saved into a new local directory named "a\\n", on the machine's own disk."""
    save_step(CheckpointStore(tmp_path / "a"), 1)
    monkeypatch.setenv("FOREWARN_CHECKPOINT_URL", f"{tmp_path / 'a'}\n")
    monkeypatch.setenv("FOREWARN_CHECKPOINT_VERIFY", "checksums\n")
    from_env = CheckpointStore.from_env()
    assert from_env.verify_policy == "checksums"
    assert from_env.latest().path("model.bin").read_bytes() == payload(1)  # type: ignore[union-attr]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_url_schemes_are_case_insensitive(bucket: str, tmp_path: Path) -> None:
    """`S3://bucket/prefix`, as people write it, is the same store as `s3://`."""
    save_step(CheckpointStore(f"S3://{bucket}/Run"), 1)
    assert CheckpointStore(f"s3://{bucket}/Run").get(1, verify="checksums").step == 1
    save_step(CheckpointStore(f"FILE://{tmp_path}/a"), 2)
    assert CheckpointStore(tmp_path / "a").get(2, verify="checksums").step == 2


@settings(max_examples=examples(60), deadline=None)
@given(
    scheme=st.sampled_from(["s3", "file", "gs"]).flatmap(
        lambda name: st.tuples(*(st.sampled_from([c.lower(), c.upper()]) for c in name))
    ),
    path=st.text(alphabet="abcXYZ019-_/", min_size=1, max_size=20).filter(
        lambda text: not text.startswith("/")
    ),
)
def test_any_case_of_a_scheme_opens_the_backend_of_its_lower_case(
    scheme: tuple[str, ...], path: str
) -> None:
    from forewarn.clients.checkpoint.local import LocalBackend
    from forewarn.clients.checkpoint.options import open_backend
    from forewarn.clients.checkpoint.s3 import S3Backend, parse_s3_url

    written = "".join(scheme)
    lower = written.lower()
    if lower == "gs":
        with pytest.raises(StoreConfigError, match=f"scheme {written!r} is not supported"):
            open_backend(f"{written}://{path}")
        return
    if lower == "file":
        backend = open_backend(f"{written}:///tmp/{path}")
        assert isinstance(backend, LocalBackend)
        assert backend.local_path("x") == open_backend(f"file:///tmp/{path}").local_path("x")
        return
    url = f"{written}://bucket/{path}"
    backend = open_backend(url)
    assert isinstance(backend, S3Backend)
    assert (backend.bucket, backend.prefix) == parse_s3_url(f"s3://bucket/{path}")
    # Its keys' spelling: no slash at either end of the prefix (see test_cli's slash test).
    assert backend.url == f"s3://bucket/{backend.prefix}".rstrip("/")


def test_s3_store_takes_endpoint_and_credentials_as_arguments(
    bucket: str, s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)
    options = S3Options(
        endpoint_url=s3_env["AWS_ENDPOINT_URL"],
        region="us-east-1",
        access_key_id="testing",
        secret_access_key="testing",
        addressing_style="path",
    )
    store = CheckpointStore(f"s3://{bucket}", s3=options)
    save_step(store, 1)
    assert store.latest(verify="checksums").step == 1  # type: ignore[union-attr]
    with pytest.raises(CheckpointError, match="not on local disk"):
        store.latest().path("model.bin")  # type: ignore[union-attr]


def test_s3_parts_grow_so_a_stream_of_unknown_size_fits_in_10000_parts(
    bucket: str, s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from forewarn.clients.checkpoint import s3

    # Doubling every 2 parts instead of every 1,000 shows the growth on a small file.
    monkeypatch.setattr(s3, "PARTS_PER_SIZE", 2)
    store = CheckpointStore(f"s3://{bucket}/grow", s3=S3Options(part_size=5 << 20, concurrency=2))
    sent: list[int] = []
    client = store.backend.client  # type: ignore[attr-defined]
    upload_part = client.upload_part

    def spy(**kwargs: Any) -> Any:
        sent.append(len(kwargs["Body"].getvalue()))  # a stream of the part's bytes
        return upload_part(**kwargs)

    monkeypatch.setattr(client, "upload_part", spy)
    data = os.urandom(32 << 20)
    with store.save(1) as gen, gen.open("big.bin") as stream:
        for start in range(0, len(data), 3 << 20):
            stream.write(data[start : start + (3 << 20)])
    mib = 1 << 20
    assert sorted(sent, reverse=True) == [10 * mib, 10 * mib, 5 * mib, 5 * mib, 2 * mib]
    assert store.latest(verify="checksums").read_bytes("big.bin") == data  # type: ignore[union-attr]


def test_directories_go_in_and_come_out(make_store: Any, tmp_path: Path) -> None:
    source = tmp_path / "pretrained"
    (source / "sub").mkdir(parents=True)
    (source / "config.json").write_text("{}")
    (source / "sub" / "weights.bin").write_bytes(payload(3, 5000))
    store = make_store()
    sent: list[tuple[int, int]] = []
    with store.save(1) as gen:
        gen.put_dir("hf", source, progress=lambda done, total: sent.append((done, total)))
        gen.write_bytes("other.bin", b"x")
    assert sent[-1] == (5002, 5002)
    latest = store.latest(verify="checksums")
    assert latest is not None
    assert sorted(latest.files) == ["hf/config.json", "hf/sub/weights.bin", "other.bin"]
    got: list[tuple[int, int]] = []
    copied = latest.get_dir("hf", tmp_path / "restored", progress=lambda d, t: got.append((d, t)))
    assert got[-1] == (5002, 5002)
    assert all(done <= total for done, total in got)
    assert len(copied) == 2
    assert (tmp_path / "restored" / "sub" / "weights.bin").read_bytes() == payload(3, 5000)
    with pytest.raises(FileNotFoundError, match="no files under"):
        latest.get_dir("nothing", tmp_path / "x")


def test_s3_upload_checksums_follow_boto3_else_on_for_aws_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REQUEST_CHECKSUM_CALCULATION"):
        monkeypatch.delenv(key, raising=False)
    # No request is made: the choice is read before any client exists.
    assert CheckpointStore("s3://b/p").backend.upload_checksums is True  # type: ignore[attr-defined]
    elsewhere = CheckpointStore("s3://b/p", s3=S3Options(endpoint_url="http://127.0.0.1:9"))
    assert elsewhere.backend.upload_checksums is False  # type: ignore[attr-defined]
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    assert CheckpointStore("s3://b/p").backend.upload_checksums is False  # type: ignore[attr-defined]
    forced = CheckpointStore("s3://b/p", s3=S3Options(upload_checksums=True))
    assert forced.backend.upload_checksums is True  # type: ignore[attr-defined]
    # boto3's own switch is honoured both ways; the argument still wins over it.
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "WHEN_SUPPORTED")
    assert CheckpointStore("s3://b/p").backend.upload_checksums is True  # type: ignore[attr-defined]
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
    assert CheckpointStore("s3://b/p").backend.upload_checksums is False  # type: ignore[attr-defined]
    forced = CheckpointStore("s3://b/p", s3=S3Options(upload_checksums=True))
    assert forced.backend.upload_checksums is True  # type: ignore[attr-defined]
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "sometimes")
    with pytest.raises(StoreConfigError, match="AWS_REQUEST_CHECKSUM_CALCULATION='sometimes'"):
        CheckpointStore("s3://b/p")


@pytest.mark.parametrize("checksums", [True, False])
def test_s3_parts_carry_their_crc32_only_with_upload_checksums(
    bucket: str, s3_env: dict[str, str], checksums: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zlib
    from base64 import b64encode

    import boto3

    def crc32(data: bytes) -> str:
        return b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()

    options = S3Options(part_size=5 << 20, concurrency=2, upload_checksums=checksums)
    store = CheckpointStore(f"s3://{bucket}/crc", s3=options)
    client = store.backend.client  # type: ignore[attr-defined]
    upload_part = client.upload_part
    sent: list[tuple[bytes, str | None]] = []

    def spy(**kwargs: Any) -> Any:
        sent.append((kwargs["Body"].getvalue(), kwargs.get("ChecksumCRC32")))
        return upload_part(**kwargs)

    monkeypatch.setattr(client, "upload_part", spy)
    data = os.urandom(12 << 20)
    with store.save(1) as gen, gen.open("big.bin") as stream:
        stream.write(data)
    assert store.latest(verify="checksums").read_bytes("big.bin") == data  # type: ignore[union-attr]
    key = f"crc/{store.latest().name}/big.bin"  # type: ignore[union-attr]
    head = boto3.client("s3").head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    parts = [data[start : start + (5 << 20)] for start in range(0, len(data), 5 << 20)]
    assert sorted(body for body, _ in sent) == sorted(parts)
    if checksums:
        # Each part's own CRC32 went as a header, and the upload declared CRC32: the server
        # keeps S3's composite checksum, the CRC32 of the parts' CRC32s.
        assert all(header == crc32(body) for body, header in sent)
        composite = crc32(b"".join(zlib.crc32(part).to_bytes(4, "big") for part in parts))
        assert head["ChecksumCRC32"].split("-")[0] == composite
    else:
        assert all(header is None for _, header in sent)
        assert "ChecksumCRC32" not in head


def test_a_local_file_is_written_back_while_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from forewarn.clients.checkpoint import local

    # The disk is asked to start on every WRITEBACK_STEP bytes as they come, not only at the
    # end: the fsync then finds the file mostly written.
    started: list[int] = []
    monkeypatch.setattr(local, "WRITEBACK_STEP", 1 << 20)
    monkeypatch.setattr(
        local, "start_writeback", lambda fd, offset=0, length=0: started.append(offset)
    )
    store = CheckpointStore(tmp_path / "store")
    data = os.urandom((3 << 20) + 5)
    with store.save(1) as gen, gen.open("model.bin") as stream:
        for start in range(0, len(data), 256 << 10):
            stream.write(data[start : start + (256 << 10)])
        assert started == [0, 1 << 20, 2 << 20]
    assert started == [0, 1 << 20, 2 << 20, 0]  # and the whole file once written
    assert store.get(1, verify="checksums").read_bytes("model.bin") == data


def test_a_store_on_azure_temporary_disk_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store under /mnt on an Azure VM (the resource disk, with the Azure agent's
    DATALOSS_WARNING_README.txt at its root) opened and saved silently, though a Redeploy, a
    Spot eviction or a scale-set Terminate erases that disk: the checkpoint saved for the
    notice was gone when the job came back."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    (mnt / "DATALOSS_WARNING_README.txt").write_text("WARNING: THIS IS A TEMPORARY DISK.\n")
    caplog.set_level("WARNING", logger="forewarn.checkpoint")
    CheckpointStore(mnt / "ckpt" / "run-1")  # not created yet: its nearest existing parent
    (warning,) = [r for r in caplog.records if "temporary disk" in r.getMessage()]
    assert str(mnt / "ckpt" / "run-1") in warning.getMessage()
    assert f"({mnt})" in warning.getMessage()
    caplog.clear()
    CheckpointStore(tmp_path / "data" / "ckpt")  # elsewhere: nothing said
    assert not [r for r in caplog.records if "temporary disk" in r.getMessage()]


# Another job's process committing a newer generation into the same store (keep=1).
COMMIT_NEWER = """
import sys
import torch
from forewarn.clients.checkpoint import CheckpointStore

with CheckpointStore(sys.argv[1], keep=1) as store:
    with store.save(int(sys.argv[2])) as gen, gen.open("state.pt") as stream:
        torch.save({"w": torch.full((8,), float(sys.argv[2]))}, stream)
"""


@requires("torch")
def test_a_generation_retention_removed_under_its_reader_says_so(
    make_store: Any, store_url: str, tmp_path: Path, rank_launcher: RankLauncher
) -> None:
    """A reader holding `latest()` while another process commits a newer generation (keep=1)
    got a bare FileNotFoundError naming a file path."""
    from forewarn.clients.checkpoint import GenerationRemovedError, load_state

    job = tmp_path / "commit_newer.py"
    job.write_text(COMMIT_NEWER)

    def commit(step: int) -> None:
        # Another process, forked from the launcher that imported torch once
        # (tests/forked_ranks.py): a fresh one spent ~1.6 CPU-s importing it.
        process = rank_launcher.start(job, [store_url, str(step)], dict(os.environ))
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err

    commit(1)
    store = make_store(keep=1)
    held = store.latest()
    assert held is not None and load_state(held)["w"][0] == 1.0
    commit(2)
    reads = [
        lambda: load_state(held),
        lambda: held.read_bytes("state.pt"),
        lambda: held.get_file("state.pt", tmp_path / "copy.pt"),
    ]
    if store.backend.local_path("") is not None:
        reads.append(lambda: held.path("state.pt"))
    for read in reads:
        with pytest.raises(GenerationRemovedError, match=r"call store.latest\(\) again") as info:
            read()
        assert "step-000000000001 was removed" in str(info.value)
        assert isinstance(info.value, FileNotFoundError)  # what the callers caught before
    again = store.latest()
    assert again is not None and again.step == 2 and load_state(again)["w"][0] == 2.0


def test_a_scheme_with_one_slash_is_read_as_a_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`s3:/bucket/run` (a slash short) opened a local store in `./s3:/bucket/run`: the
    checkpoints went to the machine's disk and were gone with it. `file:/path` is a file URL
    (RFC 8089) and named a local directory `file:` just the same."""
    monkeypatch.chdir(tmp_path)
    for typo in ("s3:/bucket/run", "S3:bucket/run"):
        with pytest.raises(StoreConfigError, match="s3://bucket/run"):
            CheckpointStore(typo)
    save_step(CheckpointStore(f"file:{tmp_path}/a"), 1)
    assert CheckpointStore(tmp_path / "a").get(1, verify="checksums").step == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a"]


def test_a_store_url_with_space_around_it_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`CheckpointStore(" /data/ckpt")` (a URL read from a config file or pasted with a space)
    opened the relative directory `./ /data/ckpt` on the machine's own disk, and `"/data/ckpt\n"`
    (a line read unstripped) a directory `ckpt\n` beside the store the next job opens: saved
    where no resume looks. Found: `CheckpointStore("  <tmp>/sp  ")` saved into
    `<cwd>/  <tmp>/sp  `. A name that really has it is given as a `pathlib.Path`."""
    monkeypatch.chdir(tmp_path)
    for url in (f" {tmp_path}/a", f"{tmp_path}/a\n", " s3://bucket/run", f"file://{tmp_path}/a "):
        with pytest.raises(StoreConfigError, match="space") as info:
            CheckpointStore(url)
        assert repr(url) in str(info.value)
    assert list(tmp_path.iterdir()) == []
    save_step(CheckpointStore(tmp_path / " a "), 1)  # a Path is taken as it is
    assert sorted(path.name for path in tmp_path.iterdir()) == [" a "]


@settings(max_examples=examples(60), deadline=None)
@given(
    st.text(alphabet=st.characters(categories=["Zs", "Cc"]), min_size=1, max_size=3),
    st.sampled_from(["/ckpt/run", "rel/run", "s3://bucket/run", "file:///ckpt/run"]),
    st.booleans(),
)
def test_space_at_either_end_of_any_store_url_is_refused(
    space: str, url: str, leading: bool
) -> None:
    text = space + url if leading else url + space
    if text == text.strip():
        return  # characters Python does not count as space (no such store is refused)
    with pytest.raises(StoreConfigError, match="space"):
        CheckpointStore(text)


@pytest.mark.parametrize("tail", ["run#2", "run?seed=2"])
def test_a_file_url_with_a_fragment_or_query_names_no_other_directory(
    tmp_path: Path, tail: str
) -> None:
    """`file:///ckpt/run#2` and `file:///ckpt/run#1` both opened `/ckpt/run`: the URL parser
    took `#2` for a fragment (`?seed=2` for a query) and dropped it, so two runs shared one
    store and the second resumed from the first's checkpoints."""
    (tmp_path / tail).mkdir()
    save_step(CheckpointStore(tmp_path / tail), 1)  # the path itself is a fine store
    for url in (f"file://{tmp_path}/{tail}", f"file:{tmp_path}/{tail}"):
        with pytest.raises(StoreConfigError, match="%23" if "#" in tail else "%3F"):
            CheckpointStore(url)
    quoted = tail.replace("#", "%23").replace("?", "%3F")
    assert CheckpointStore(f"file://{tmp_path}/{quoted}").get(1).step == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == [tail]


def test_the_hint_moves_back_once_the_generation_it_named_is_deleted(make_store: Any) -> None:
    """A run rolled back by deleting its newest generations (`store.delete(30)`, or by hand)
    kept LATEST naming step 30 until it saved past 30 again: a commit never moves the hint
    back, so `forewarn checkpoint ls` marked no generation LATEST and tools that follow the
    hint opened one that was gone."""
    store = make_store()
    for step in (10, 20, 30):
        save_step(store, step)
    store.delete(30)
    save_step(store, 25)
    assert store.latest_hint() == 25
    save_step(store, 22)  # an older step while the hinted one stands: the hint stays
    assert store.latest_hint() == 25


def test_only_the_name_a_step_is_saved_under_is_that_steps_generation(tmp_path: Path) -> None:
    """`step-0000000000030` (a thirteenth digit, a copy made by hand) and `step-` with
    non-ASCII digits parsed as step 30 too: `ls` and `verify` listed step 30 twice, the
    store read both through `step-000000000030`, and retention never removed the copy."""
    from forewarn.clients.checkpoint.manifest import generation_name, parse_generation_name

    for step in (0, 30, 10**12 - 1, 10**12, 10**15 + 7):
        assert parse_generation_name(generation_name(step)) == step
    for alias in ("step-0000000000030", "step-" + "\u0660" * 10 + "\u0663\u0660"):
        assert parse_generation_name(alias) is None, alias
    store = CheckpointStore(tmp_path / "store")
    save_step(store, 30)
    shutil.copytree(
        tmp_path / "store" / "step-000000000030", tmp_path / "store" / "step-0000000000030"
    )
    assert store.steps() == [30]


def test_a_generation_directory_that_is_a_symlink_counts(tmp_path: Path) -> None:
    """A generation moved to another disk and linked back (`step-…` a symlink to its
    directory) was invisible: `latest()` resumed from the step before it, `ls` left it out,
    and the work since was lost. It is read through the link now; retention removes the link
    only (what it points to may be another store's generation, see the next test), and a
    dangling link is no generation."""
    store = CheckpointStore(tmp_path / "store", keep=2)
    for step in (10, 20):
        store.flush(step, lambda gen, step=step: gen.write_bytes("model.bin", b"w%d" % step))
    elsewhere = tmp_path / "other-disk" / "step-20"
    elsewhere.parent.mkdir()
    (tmp_path / "store" / "step-000000000020").rename(elsewhere)
    (tmp_path / "store" / "step-000000000020").symlink_to(elsewhere, target_is_directory=True)

    assert store.steps() == [10, 20]
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 20
    assert latest.read_bytes("model.bin") == b"w20"

    store.flush(30, lambda gen: gen.write_bytes("model.bin", b"w30"))
    store.flush(40, lambda gen: gen.write_bytes("model.bin", b"w40"))
    assert store.steps() == [30, 40]
    assert not (tmp_path / "store" / "step-000000000020").is_symlink()
    assert (elsewhere / "model.bin").read_bytes() == b"w20"

    (tmp_path / "store" / "step-000000000050").symlink_to(tmp_path / "gone")
    assert store.steps() == [30, 40]
    store.close()


@pytest.mark.parametrize("how", ["retention", "prune", "delete", "a save of the step"])
def test_removing_a_linked_generation_leaves_where_the_link_points(
    tmp_path: Path, how: str
) -> None:
    """A run seeded from another store's generation (`step-…` a symlink into a colleague's
    store) lost that generation when retention here reached the link: its files were deleted
    where the link pointed, and the other store's `latest()` fell back past it. Retention,
    `prune`, `delete` and a save replacing the step remove the link only."""
    theirs = CheckpointStore(tmp_path / "their-store")
    theirs.flush(20, lambda gen: gen.write_bytes("model.bin", b"theirs"))
    root = tmp_path / "mine"
    mine = CheckpointStore(root, keep=None if how == "prune" else 1)
    mine.flush(10, lambda gen: gen.write_bytes("model.bin", b"mine"))
    (root / "step-000000000020").symlink_to(tmp_path / "their-store" / "step-000000000020")
    if how == "retention":
        mine.flush(30, lambda gen: gen.write_bytes("model.bin", b"w30"))
    elif how == "prune":
        mine.flush(30, lambda gen: gen.write_bytes("model.bin", b"w30"))
        mine.keep = 1
        assert mine.prune() == [10, 20]
    elif how == "delete":
        mine.delete(20)
    else:
        # Not verifying here (a file of it gone through another path, say) and saved again.
        (root / "step-000000000020" / "COMMIT").rename(tmp_path / "their-store" / "COMMIT.bak")
        mine.flush(20, lambda gen: gen.write_bytes("model.bin", b"mine20"))
        (tmp_path / "their-store" / "COMMIT.bak").rename(
            tmp_path / "their-store" / "step-000000000020" / "COMMIT"
        )
        got = mine.get(20)
        assert got.read_bytes("model.bin") == b"mine20"
    assert not (root / "step-000000000020").is_symlink()
    kept = theirs.latest(verify="checksums")
    assert kept is not None and kept.step == 20 and kept.read_bytes("model.bin") == b"theirs"
    mine.close()
    theirs.close()


def test_a_store_path_through_a_missing_directory_and_dotdot_makes_no_stray_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`CheckpointStore("./x/../y")` (a path joined from a run directory that does not exist
    and `..`) saved into `y`, and left an empty directory `x` beside it: the store's
    directory was made with every part of the path as written."""
    monkeypatch.chdir(tmp_path)
    with CheckpointStore("./x/../y") as store:
        store.flush(1, lambda gen: gen.write_bytes("model.bin", b"1"))
    assert sorted(os.listdir(tmp_path)) == ["y"]
    with CheckpointStore(str(tmp_path / "y")) as again:
        generation = again.latest()
        assert generation is not None and generation.step == 1


def test_a_step_restore_passed_over_as_not_loading_is_saved_again(tmp_path: Path) -> None:
    """`restore()` passed over step 20 (a byte flipped in its file: its sizes right, so it
    still verifies by sizes), the job resumed from 10 and trained through step 20 again:
    its save there was refused, `step-000000000020 is already committed ...; generations
    are immutable`, so the job failed at the step it had to redo."""

    def load(generation: Any) -> bytes:
        return bytes(generation.read_bytes("model.bin"))  # checksum-checked

    with CheckpointStore(str(tmp_path / "store")) as store:
        for step in (10, 20):
            store.flush(step, lambda gen, step=step: gen.write_bytes("model.bin", b"%d" % step))
        model = tmp_path / "store" / "step-000000000020" / "model.bin"
        model.write_bytes(b"2!")  # same size, one byte flipped
        restored = store.restore(load)
        assert restored is not None and restored[0].step == 10
        store.flush(20, lambda gen: gen.write_bytes("model.bin", b"20 again"))
        again = store.restore(load)
        assert again is not None and again == (again[0], b"20 again") and again[0].step == 20
