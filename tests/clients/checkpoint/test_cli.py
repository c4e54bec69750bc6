"""`forewarn checkpoint ls|show|verify|get|prune` as a user runs it: a subprocess against a
store on local disk and on the moto S3 server, including a flipped byte found by `verify`."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.testing.waiting import eventually
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

# The first test runs `forewarn checkpoint` as its own fresh interpreter, as a user does (so do
# the terminal's, the broken pipe's and the waiting gets', which start theirs themselves); the
# other tests' commands fork from a process that loaded the command line, the store and boto3
# once (`run_checkpoint_forked`, tests/conftest.py): each its own process, environment, output
# and exit code, for a few hundredths of a CPU-second instead of ~0.3-0.5 (102 commands).
FRESH_TESTS = ("test_verify_finds_a_flipped_byte",)
# The forked runner of the test now running, set by `_commands_fork`; empty while a test of
# FRESH_TESTS runs.
_forked: list[Callable[..., subprocess.CompletedProcess[str]]] = []


@pytest.fixture(autouse=True)
def _commands_fork(
    request: pytest.FixtureRequest,
    run_checkpoint_forked: Callable[..., subprocess.CompletedProcess[str]],
) -> Iterator[None]:
    if request.node.originalname not in FRESH_TESTS:
        _forked.append(run_checkpoint_forked)
    try:
        yield
    finally:
        _forked.clear()


def forewarn(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    if _forked:
        given = dict(os.environ) if env is None else env
        return _forked[-1]("checkpoint", *argv, env=given, timeout=120)
    return subprocess.run(
        [sys.executable, "-m", "forewarn.agent.cli", "checkpoint", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def fill(store: CheckpointStore) -> None:
    for step in (10, 20, 30):
        with store.save(step, metadata={"loss": 1 / step}) as gen:
            gen.write_bytes("model.bin", os.urandom(50_000 * (step // 10)))
            gen.write_bytes("opt/state.bin", b"s" * step)
    store.save(40).write_bytes("model.bin", b"half")  # a save that never committed


def flip(store: CheckpointStore, key: str) -> None:
    with store.backend.open_read(key) as stream:
        data = stream.read()
    store.backend.put_small(key, data[:99] + bytes([data[99] ^ 0x01]) + data[100:])


def test_verify_finds_a_flipped_byte(make_store: Any, store_url: str) -> None:
    store = make_store()
    fill(store)
    ok = forewarn("verify", store_url)
    assert ok.returncode == 0, ok.stderr
    assert "3 of 3 generations verify (checksums)" in ok.stdout
    assert ok.stderr == ""  # not a terminal: no progress bar

    flip(store, "step-000000000020/model.bin")
    bad = forewarn("verify", store_url)
    assert bad.returncode == 1
    assert "step-000000000020: CORRUPT: model.bin does not match its checksum" in bad.stdout
    assert "2 of 3 generations verify" in bad.stdout
    assert forewarn("verify", store_url, "--step", "30").returncode == 0
    assert forewarn("verify", store_url, "--step", "20").returncode == 1
    # Same size: only the checksums catch it.
    assert forewarn("verify", store_url, "--sizes-only").returncode == 0


def test_prune_by_checksums_keeps_the_one_that_verifies(make_store: Any, store_url: str) -> None:
    store = make_store()
    fill(store)
    flip(store, "step-000000000030/model.bin")
    # By sizes 30 still counts, so 10 and 20 would go; by checksums 20 is the newest good one.
    # Step 40's writer let go of its claim (dropped): on local disk that proves it gone.
    killed = ", step-000000000040" if not store_url.startswith("s3://") else ""
    dry = forewarn("prune", store_url, "--keep", "1", "--dry-run")
    assert dry.stdout.strip() == f"would delete step-000000000010, step-000000000020{killed}"
    pruned = forewarn("prune", store_url, "--keep", "1", "--checksums")
    assert pruned.returncode == 0, pruned.stderr
    assert pruned.stdout.strip() == f"deleted step-000000000010{killed}"
    assert store.steps() == ([20, 30] if killed else [20, 30, 40])


def test_verify_of_a_mistyped_store_fails(make_store: Any, store_url: str) -> None:
    fill(make_store())
    # `runs/job-10` beside `runs/job-1`: on S3 a prefix that holds nothing, not an error.
    typo = store_url + "0"
    result = forewarn("verify", typo)
    assert result.returncode == 2, result.stdout
    assert typo in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_ls_show_get_and_prune(make_store: Any, store_url: str, tmp_path: Path) -> None:
    store = make_store()
    fill(store)
    listing = forewarn("ls", store_url)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert lines[0].split()[:5] == ["STEP", "SIZE", "FILES", "RANKS", "AGE"]
    assert lines[3].split()[0] == "30" and lines[3].endswith("LATEST")
    assert lines[4].split()[0] == "40" and "partial" in lines[4]
    rows = [json.loads(line) for line in forewarn("ls", store_url, "--json").stdout.splitlines()]
    assert [(row["step"], row["state"], row["latest"]) for row in rows] == [
        (10, "ok", False),
        (20, "ok", False),
        (30, "ok", True),
        (40, "partial", False),
    ]
    assert rows[1]["size"] == 100_020 and rows[1]["files"] == 2

    shown = forewarn("show", store_url, "20")
    assert shown.returncode == 0
    assert "step        20" in shown.stdout and '"loss": 0.05' in shown.stdout
    assert store.get(20).files["model.bin"].checksum in shown.stdout
    manifest = json.loads(forewarn("show", store_url, "--json").stdout)
    assert manifest["step"] == 30
    # The generation's name as `show`, `verify` and `prune` print it, pasted from there.
    named = forewarn("show", store_url, "step-000000000020", "--json")
    assert named.returncode == 0, named.stderr
    assert json.loads(named.stdout)["step"] == 20
    checked = forewarn("verify", store_url, "--step", "step-000000000010")
    assert checked.returncode == 0 and "step-000000000010: ok" in checked.stdout, checked
    # Unpadded, as written from memory: no other generation is meant.
    short = forewarn("show", store_url, "step-20", "--json")
    assert short.returncode == 0, short.stderr
    assert json.loads(short.stdout)["step"] == 20

    copied = forewarn("get", store_url, str(tmp_path / "out"), "--step", "10")
    assert copied.returncode == 0, copied.stderr
    assert (tmp_path / "out" / "model.bin").read_bytes() == store.get(10).read_bytes("model.bin")

    # Step 40's writer let go of its claim (dropped): on local disk that proves it gone.
    killed = ", step-000000000040" if not store_url.startswith("s3://") else ""
    dry = forewarn("prune", store_url, "--keep", "1", "--dry-run")
    assert dry.stdout.strip() == f"would delete step-000000000010, step-000000000020{killed}"
    assert store.steps() == [10, 20, 30, 40]
    assert forewarn("prune", store_url, "--keep", "1").returncode == 0
    assert store.steps() == ([30] if killed else [30, 40])


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["ls", "gs://bucket/x"], "'gs' is not supported"),
        (["show", "{url}", "99"], "no committed generation for step 99"),
        (["show", "{url}", "-3"], "not negative"),
        (["prune", "{url}", "--keep", "0"], "at least 1"),
        (["prune", "{url}", "--keep", "-1"], "--keep: must keep at least 1 generation (got -1)"),
        (["prune", "{url}", "--keep", "two"], "--keep: 'two' is not a whole number"),
        (
            ["ls", "{url}", "--endpoint-url", "http://127.0.0.1:9"],
            "--endpoint-url: for s3:// stores only",
        ),
        (["ls", "s3://bucket/x", "--endpoint-url", "htp:/127.0.0.1:9"], "htp:/127.0.0.1:9"),
        # botocore takes these and fails at the first request: 'cannot read', exit 3.
        (["ls", "s3://bucket/x", "--endpoint-url", "ftp://127.0.0.1:9"], "ftp://127.0.0.1:9"),
        (["ls", "s3://bucket/x", "--endpoint-url", "http://127.0.0.1:99999"], "Port out of range"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, argv: list[str], named: str) -> None:
    url = str(tmp_path / "store")
    CheckpointStore(url).flush(1, lambda gen: gen.write_bytes("m", b"1"))
    result = forewarn(*(word.replace("{url}", url) for word in argv))
    assert result.returncode == 2
    assert named in result.stderr
    assert "Traceback" not in result.stderr
    # One line, in the CLI's one form for bad input: `forewarn: checkpoint <command>: ...`.
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("forewarn: checkpoint"), lines


def test_a_terminal_gets_a_progress_bar(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    CheckpointStore(url).flush(1, lambda gen: gen.write_bytes("m.bin", os.urandom(3 << 20)))
    controller, terminal = pty.openpty()
    try:
        process = subprocess.run(
            [sys.executable, "-m", "forewarn.agent.cli", "checkpoint", "verify", url],
            stdout=subprocess.PIPE,
            stderr=terminal,
            timeout=120,
        )
        os.close(terminal)
        drawn = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(controller)
    assert process.returncode == 0
    assert b"\rverifying step-000000000001 [" in drawn
    assert b"100% 3.0 MiB of 3.0 MiB" in drawn


@settings(max_examples=examples(60), deadline=None)
@given(
    url=st.text(max_size=30)
    | st.builds(
        "{}://{}{}".format,
        st.sampled_from(["http", "https", "ftp", "s3", "htp", ""]),
        st.sampled_from(["127.0.0.1", "", "[::1]", "h_st"]),
        st.sampled_from(["", ":9", ":99999", ":x", "/p"]),
    )
)
def test_an_s3_endpoint_is_refused_at_once_or_is_http(url: str) -> None:
    """Whatever the endpoint text, the client is either refused with StoreConfigError naming
    it or speaks http(s): `ftp://host` passed and failed only at the first request."""
    from forewarn.clients.checkpoint.errors import StoreConfigError
    from forewarn.clients.checkpoint.s3 import make_client

    try:
        client = make_client(
            endpoint_url=url or None,
            region="us-east-1",
            access_key_id="a",
            secret_access_key="b",
            session_token=None,
            profile=None,
            addressing_style=None,
            concurrency=1,
            upload_checksums=False,
        )
    except StoreConfigError as error:
        assert "S3 endpoint" in str(error)
        return
    assert client.meta.endpoint_url.startswith(("http://", "https://"))


@pytest.mark.parametrize("where", ["a file", "under a file", "a directory at a file's name"])
def test_get_names_a_destination_it_cannot_write(
    make_store: Any, store_url: str, tmp_path: Path, where: str
) -> None:
    """Each was 'cannot read <store>: ...' with exit 3 (the store could not be read), though
    the store was fine and the destination was the problem."""
    fill(make_store())
    occupied = tmp_path / "occupied"
    occupied.write_text("not a directory")
    destination = {
        "a file": occupied,
        "under a file": occupied / "out",
        "a directory at a file's name": tmp_path / "out",
    }[where]
    (tmp_path / "out" / "model.bin").mkdir(parents=True)
    result = forewarn("get", store_url, str(destination))
    assert result.returncode == 2, result.stderr
    assert "cannot read" not in result.stderr and str(destination) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert occupied.read_text() == "not a directory"


def test_a_reader_that_goes_away_is_no_store_error(tmp_path: Path) -> None:
    """`forewarn checkpoint ls URL | head -1`: the pipe closed under the listing was reported
    as 'cannot read <store>: [Errno 32] Broken pipe', exit 3."""
    url = str(tmp_path / "store")
    CheckpointStore(url).flush(1, lambda gen: gen.write_bytes("m", b"1"))
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line is written
    try:
        process = subprocess.run(
            [sys.executable, "-m", "forewarn.agent.cli", "checkpoint", "ls", url],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)
    assert process.returncode != 3
    assert process.stderr == ""


@pytest.mark.parametrize("action", ["verify", "ls"])
def test_a_generation_retention_removes_while_it_is_checked_is_not_corrupt(
    make_store: Any,
    store_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    action: str,
) -> None:
    """A job with keep=N deletes its oldest generation once it commits a newer one, and the
    command checks the oldest first: the one deleted between its listing and its check was
    reported 'CORRUPT: not committed' (exit 1, a monitoring gate failing on a sound store),
    or, deleted while hashed, 'cannot read <store>' (exit 3)."""
    import argparse

    from forewarn.agent import checkpoint_cli

    fill(make_store())
    check = CheckpointStore.verify

    def retention_meanwhile(self: CheckpointStore, generation: Any, **options: Any) -> Any:
        if generation == 10:
            self.delete(10)  # another process's retention, between the listing and the check
        return check(self, generation, **options)

    monkeypatch.setattr(CheckpointStore, "verify", retention_meanwhile)
    parser = argparse.ArgumentParser()
    checkpoint_cli.add_arguments(parser)
    code = checkpoint_cli.run(parser.parse_args([action, store_url]))
    out = capsys.readouterr().out
    assert code == 0, out
    assert "corrupt" not in out.lower()
    # (fill's step 40, which never committed, is named so: step 10 is not.)
    assert not [line for line in out.splitlines() if "10" in line and "not committed" in line]
    if action == "verify":
        assert "step-000000000010: removed while it was checked" in out
        assert "2 of 2 generations verify (checksums)" in out


def test_prune_names_what_it_deleted_and_what_it_could_not(tmp_path: Path) -> None:
    """Another user's generation in a shared store stopped `prune`: it said only 'cannot read
    <store>: cannot remove step-…10 …' (the store was read fine), and not that it had deleted
    step-…20 meanwhile, so the one running it could not tell what was left."""
    import argparse
    import contextlib
    import io
    import shutil
    import tempfile

    from forewarn.agent import checkpoint_cli
    from other_user import call_as, other_user

    uid, gid = other_user()
    shared = Path(tempfile.mkdtemp(prefix="forewarn-prune-", dir="/tmp"))
    try:
        url = str(shared / "store")
        fill(CheckpointStore(url))  # this user's, under umask 022 here: 0755 directories
        os.chmod(shared, 0o755)
        os.chmod(url, 0o777)
        for directory, _dirs, _files in os.walk(os.path.join(url, "step-000000000020")):
            os.chmod(directory, 0o777)  # a generation the other user may delete

        def prune() -> tuple[int, str, str]:
            parser = argparse.ArgumentParser()
            checkpoint_cli.add_arguments(parser)
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = checkpoint_cli.run(parser.parse_args(["prune", url, "--keep", "1"]))
            return code, out.getvalue(), err.getvalue()

        code, out, err = call_as(uid, gid, prune)
        assert CheckpointStore(url).steps() == [10, 30, 40]
        assert out.strip() == "deleted step-000000000020", (out, err)
        assert code == 3, (out, err)
        assert "cannot read" not in err and "cannot remove step-000000000010" in err, err
        # Step 40 is a dropped writer's unfinished save, this user's too.
        assert "cannot remove step-000000000040" in err, err
        assert len(err.strip().splitlines()) == 2, err
    finally:
        shutil.rmtree(shared)


def test_a_directory_of_a_generation_it_cannot_list_is_not_called_missing(tmp_path: Path) -> None:
    """A generation's subdirectory this user may not list (or one whose listing fails: EIO)
    made its files 'missing': `verify` said CORRUPT (exit 1) of a sound generation, and
    `latest()` passed over it to resume from an older one (whose job then deleted the sound one
    as broken when it saved that step again)."""
    import argparse
    import contextlib
    import io
    import shutil
    import tempfile

    from forewarn.agent import checkpoint_cli
    from other_user import call_as, other_user

    uid, gid = other_user()
    shared = Path(tempfile.mkdtemp(prefix="forewarn-unlisted-", dir="/tmp"))
    try:
        os.chmod(shared, 0o755)
        url = str(shared / "store")
        fill(CheckpointStore(url))
        hidden = os.path.join(url, "step-000000000030", "opt")
        os.chmod(hidden, 0o700)  # this user's; the other user may not list it

        def look() -> tuple[int, str, str, str]:
            parser = argparse.ArgumentParser()
            checkpoint_cli.add_arguments(parser)
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = checkpoint_cli.run(parser.parse_args(["verify", url, "--step", "30"]))
            try:
                resumed = f"step {CheckpointStore(url).latest().step}"  # type: ignore[union-attr]
            except PermissionError as exc:
                resumed = f"PermissionError: {exc}"
            return code, out.getvalue(), err.getvalue(), resumed

        code, out, err, resumed = call_as(uid, gid, look)
        assert "missing" not in out, out
        assert code == 3 and "Permission denied" in err and hidden in err, (code, out, err)
        assert resumed.startswith("PermissionError") and hidden in resumed, resumed
        assert CheckpointStore(url).verify(30, checksums=True).ok
    finally:
        shutil.rmtree(shared)


def test_get_into_a_directory_holding_files_is_refused_unless_replace(
    make_store: Any, store_url: str, tmp_path: Path
) -> None:
    """`get` into a directory holding another step's files copied the new ones beside them:
    a stale `model.safetensors` stayed beside a sharded layout, and the loader read a mix.
    It is refused now (exit 2, nothing touched); `--replace` leaves exactly the generation's
    files, put in place only once every one verified."""
    store = make_store()
    fill(store)
    out = tmp_path / "out"
    assert forewarn("get", store_url, str(out), "--step", "10").returncode == 0
    (out / "model.safetensors").write_bytes(b"stale weights of another layout")
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))

    refused = forewarn("get", store_url, str(out), "--step", "20")
    assert refused.returncode == 2, refused.stderr
    assert str(out) in refused.stderr and "--replace" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before
    assert (out / "model.bin").read_bytes() == store.get(10).read_bytes("model.bin")

    replaced = forewarn("get", store_url, str(out), "--step", "20", "--replace")
    assert replaced.returncode == 0, replaced.stderr
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == ["model.bin", "opt/state.bin"]
    assert (out / "model.bin").read_bytes() == store.get(20).read_bytes("model.bin")

    # An empty directory (a volume mounted for it) is fine without --replace.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert forewarn("get", store_url, str(empty)).returncode == 0
    assert (empty / "model.bin").read_bytes() == store.get(30).read_bytes("model.bin")


def test_get_of_the_latest_falls_back_past_one_whose_bytes_do_not_verify(
    make_store: Any, store_url: str, tmp_path: Path
) -> None:
    """A restart script's `forewarn checkpoint get URL DIR` failed (exit 1) when the newest
    generation's sizes matched but a byte did not: the step before, sound, was never copied
    and the job could not resume. It copies that one now, saying so on standard error; with
    `--step` the step asked for is still the only one."""
    store = make_store()
    fill(store)
    flip(store, "step-000000000030/model.bin")
    out = tmp_path / "out"
    got = forewarn("get", store_url, str(out))
    assert got.returncode == 0, got.stderr
    assert "step-000000000030 does not verify" in got.stderr
    assert "model.bin does not match its checksum" in got.stderr
    assert "step-000000000020" in got.stdout
    assert (out / "model.bin").read_bytes() == store.get(20).read_bytes("model.bin")
    assert not list(out.rglob(".*"))  # no temp or staging file of the failed copy

    asked = forewarn("get", store_url, str(tmp_path / "asked"), "--step", "30")
    assert asked.returncode == 1
    assert not (tmp_path / "asked" / "model.bin").exists()

    for step in (10, 20):
        flip(store, f"step-{step:012d}/model.bin")
    none = forewarn("get", store_url, str(tmp_path / "none"))
    assert none.returncode == 1
    assert "step-000000000030 does not verify" in none.stderr


@pytest.mark.parametrize("where", ["the store's parent", "the store", "inside the store"])
def test_get_replace_never_replaces_the_store_itself(tmp_path: Path, where: str) -> None:
    """`get --replace` removes what DESTINATION holds: pointed at the directory holding the
    store (`get ./ckpt . --replace`), at the store or into it, it would delete the store's
    generations, every checkpoint of the run. It is refused (exit 2) and nothing goes."""
    root = tmp_path / "work" / "ckpt"
    store = CheckpointStore(root)
    fill(store)
    store.close()
    destination = {
        "the store's parent": tmp_path / "work",
        "the store": root,
        "inside the store": root / "step-000000000010",
    }[where]
    result = forewarn("get", str(root), str(destination), "--step", "20", "--replace")
    assert result.returncode == 2, result.stderr
    assert "store" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert CheckpointStore(root).steps() == [10, 20, 30, 40]
    assert CheckpointStore(root).verify(10).ok


def test_one_file_is_counted_as_one_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`get --prefix` of one file printed `copied 1 files (1 B)`, and `show` of a
    one-file generation `size 4 B in 1 files`."""
    from forewarn.agent.cli import main

    store = CheckpointStore(str(tmp_path / "ckpt"))
    with store.save(5) as gen:
        gen.write_bytes("model.bin", b"four")
        gen.write_bytes("opt/state.bin", b"s")
    assert main(["checkpoint", "show", str(tmp_path / "ckpt"), "5"]) == 0
    assert "size        5 B in 2 files\n" in capsys.readouterr().out
    with store.save(6) as gen:
        gen.write_bytes("model.bin", b"four")
    assert main(["checkpoint", "show", str(tmp_path / "ckpt"), "6"]) == 0
    assert "size        4 B in 1 file\n" in capsys.readouterr().out
    out = str(tmp_path / "out")
    assert (
        main(["checkpoint", "get", str(tmp_path / "ckpt"), out, "--step", "5", "--prefix", "opt"])
        == 0
    )
    assert capsys.readouterr().out == f"copied 1 file (1 B) of step-000000000005 to {out}\n"
    assert main(["checkpoint", "get", str(tmp_path / "ckpt"), out, "--step", "5", "--replace"]) == 0
    assert capsys.readouterr().out == f"copied 2 files (5 B) of step-000000000005 to {out}\n"


def test_a_restart_scripts_get_run_again_into_its_own_copy_works(tmp_path: Path) -> None:
    """A restart script runs `forewarn checkpoint get STORE DEST` before each start, as
    docs/checkpoint.md has it: the second run on the same machine (a torchrun or systemd
    restart) found DEST holding the first run's copy and was refused, exit 2, so the job never
    started again. A directory that holds just what an earlier `get` put there, unchanged, is
    that get's: the same generation again is there already, a newer one replaces it."""
    url = str(tmp_path / "store")
    store = CheckpointStore(url)
    fill(store)
    out = tmp_path / "ckpt"
    first = forewarn("get", url, str(out))
    assert first.returncode == 0, first.stderr
    again = forewarn("get", url, str(out))
    assert again.returncode == 0, again.stderr
    assert (out / "model.bin").read_bytes() == store.get(30).read_bytes("model.bin")

    with store.save(50) as gen:  # the job trained on and saved a newer step, one file fewer
        gen.write_bytes("model.bin", b"newer weights")
    newer = forewarn("get", url, str(out))
    assert newer.returncode == 0, newer.stderr
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == ["model.bin"]
    assert (out / "model.bin").read_bytes() == b"newer weights"

    # Changed since the copy (the job wrote into it): not the earlier get's any more.
    (out / "model.bin").write_bytes(b"edited by hand")
    refused = forewarn("get", url, str(out), "--step", "30")
    assert refused.returncode == 2 and "--replace" in refused.stderr, refused.stderr
    assert (out / "model.bin").read_bytes() == b"edited by hand"


def test_a_get_run_again_says_the_copy_was_in_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A restart script's second `get` into the DEST its first run filled printed `copied 2
    files ... to DEST` though nothing moved (get_dir returned at once): the job's log said a
    copy was made that was not. It says the generation was in place, nothing copied."""
    from forewarn.agent.cli import main

    store_url = str(tmp_path / "ckpt")
    with CheckpointStore(store_url).save(5) as gen:
        gen.write_bytes("model.bin", b"four")
        gen.write_bytes("opt/state.bin", b"s")
    out = str(tmp_path / "out")
    assert main(["checkpoint", "get", store_url, out]) == 0
    assert capsys.readouterr().out == f"copied 2 files (5 B) of step-000000000005 to {out}\n"
    assert main(["checkpoint", "get", store_url, out]) == 0
    assert capsys.readouterr().out == (
        f"step-000000000005 already in place in {out}: 2 files (5 B), nothing copied\n"
    )


def _paused_get(tmp_path: Path, *argv: str) -> tuple[subprocess.Popen[str], Path]:
    """A first `get` under way: it holds DESTINATION's lock until `go` is written."""
    paused, go = tmp_path / "paused", tmp_path / "go"
    worker = Path(__file__).with_name("paused_get.py")
    first = subprocess.Popen(
        [sys.executable, str(worker), str(paused), str(go), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    eventually(paused.exists, timeout=30, what="the first get to hold DESTINATION")
    return first, go


def _started_get(*argv: str, stderr: Path) -> subprocess.Popen[str]:
    with stderr.open("w") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "forewarn.agent.cli", "checkpoint", "get", *argv],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )


@pytest.mark.parametrize("flags", [(), ("--replace",)], ids=["plain", "replace"])
def test_a_second_get_into_one_destination_waits_for_the_first(
    tmp_path: Path, flags: tuple[str, ...]
) -> None:
    """Local ranks of one node each running the restart script's `get STORE DEST` at once:
    the second exited 2 (`another copy into DEST is under way`) and its rank never started.
    It waits for the first now, saying so, and finds the copy in place (exit 0). With
    `--replace` too: copied again, it would swap the files under the first rank, which
    loads them once its own get has ended."""
    url = str(tmp_path / "store")
    fill(CheckpointStore(url))
    out = tmp_path / "out"
    first, go = _paused_get(tmp_path, url, str(out), *flags)
    errors = tmp_path / "second.err"
    second = _started_get(url, str(out), *flags, stderr=errors)
    eventually(
        lambda: "waiting" in errors.read_text() or second.poll() is not None,
        timeout=30,
        what="the second get to wait",
    )
    assert second.poll() is None
    (line,) = errors.read_text().splitlines()
    assert f"another copy into {out} is under way (pid {first.pid})" in line, line
    go.write_text("go")
    assert first.wait(timeout=30) == 0, first.stderr.read() if first.stderr else ""
    loaded = (out / "model.bin").stat().st_ino  # the first rank's loader opens it now
    assert second.wait(timeout=30) == 0, errors.read_text()
    assert second.stdout is not None and "already in place" in second.stdout.read()
    assert (out / "model.bin").stat().st_ino == loaded
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == ["model.bin", "opt/state.bin"]


def test_a_waiting_get_copies_itself_when_the_first_fails_and_gives_up_at_its_bound(
    tmp_path: Path,
) -> None:
    """The wait has a bound (`--wait`, exit 2 naming the copy it waited for), and when the
    first get fails the one waiting copies the generation itself."""
    url = str(tmp_path / "store")
    fill(CheckpointStore(url))
    out = tmp_path / "out"
    first, go = _paused_get(tmp_path, url, str(out))
    bounded = forewarn("get", url, str(out), "--wait", "0.2s")
    assert bounded.returncode == 2, bounded.stderr
    assert "still under way after 0.2s" in bounded.stderr and str(out) in bounded.stderr
    assert forewarn("get", url, str(out), "--wait", "0").returncode == 2  # no wait: at once

    errors = tmp_path / "second.err"
    second = _started_get(url, str(out), stderr=errors)
    eventually(
        lambda: "waiting" in errors.read_text() or second.poll() is not None,
        timeout=30,
        what="the second get to wait",
    )
    go.write_text("fail")
    assert first.wait(timeout=30) == 2
    assert second.wait(timeout=30) == 0, errors.read_text()
    assert second.stdout is not None and "copied 2 files" in second.stdout.read()
    assert (out / "model.bin").read_bytes() == CheckpointStore(url).get(30).read_bytes("model.bin")


@settings(max_examples=examples(80), deadline=None)
@given(
    text=st.text(max_size=20)
    | st.from_regex(r"\A\s?(step-)?-?[0-9]{1,14}\s?\Z")
    | st.integers(0, 10**15).map(lambda step: f"step-{step:012d}")
)
def test_a_step_is_a_number_or_a_generations_name_or_named_as_refused(text: str) -> None:
    """`show STEP`, `verify --step`, `get --step`: a step in digits, or its generation's name
    as the commands print it; anything else an argparse error naming it, never an exception
    out of the parser."""
    import argparse

    from forewarn.agent.checkpoint_cli import _generation_step
    from forewarn.clients.checkpoint.manifest import generation_name

    try:
        step = _generation_step(text)
    except argparse.ArgumentTypeError as error:
        assert str(error)
        assert not text.strip().startswith("step-") or generation_name(0) != text.strip()
    else:
        assert step >= 0
        word = text.strip()
        assert (
            word in (str(step), generation_name(step)) or int(word.removeprefix("step-")) == step
        ), text


@settings(max_examples=examples(80), deadline=None)
@given(text=st.text(max_size=12) | st.from_regex(r"\A-?[0-9]{1,4}(\.[0-9])?(s|m|h|ms)?\Z"))
def test_get_wait_takes_a_duration_of_zero_or_more_or_names_the_text(text: str) -> None:
    """`get --wait`: a duration of 0 or more is the seconds to wait; anything else is an
    argparse error naming the text, never an exception out of the parser."""
    import argparse
    import math

    from forewarn.agent.checkpoint_cli import _wait
    from forewarn.protocol.timefmt import typed_duration

    # The rule every duration flag follows (`typed_duration`: `-0` is TOML's 0, `1_0s` 10 s).
    try:
        expected: float | None = typed_duration(text)
    except ValueError:
        expected = None
    try:
        seconds = _wait(text)
    except argparse.ArgumentTypeError as error:
        assert expected is None or expected < 0 or not math.isfinite(expected), text
        assert str(error)
    else:
        assert seconds == expected and seconds >= 0


def test_a_get_from_an_s3_url_spelled_with_a_slash_finds_its_copy_in_place(
    bucket: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`get s3://b/run/` then `get s3://b/run` (or `s3://b//run`): one store, one generation,
    but the second copied it all again (every restart, a whole checkpoint re-downloaded when
    the restart script's URL and the first copy's differ by a slash): the store's URL kept
    the slashes as written, and the record of the copy did not match. It is `s3://b/run`."""
    from forewarn.agent.cli import main

    with CheckpointStore(f"s3://{bucket}/runs/job-1") as store, store.save(5) as gen:
        gen.write_bytes("model.bin", b"four")
    out = str(tmp_path / "out")
    assert main(["checkpoint", "get", f"s3://{bucket}/runs/job-1/", out]) == 0
    assert capsys.readouterr().out.startswith("copied 1 file")
    for spelled in (f"s3://{bucket}/runs/job-1", f"s3://{bucket}//runs/job-1//"):
        assert main(["checkpoint", "get", spelled, out]) == 0
        assert "already in place" in capsys.readouterr().out, spelled
    assert CheckpointStore(f"s3://{bucket}//runs/job-1/").url == f"s3://{bucket}/runs/job-1"


def test_a_get_whose_generation_retention_removes_meanwhile_copies_the_newer_one(
    tmp_path: Path,
) -> None:
    """A restart script's `get STORE DEST` while another node's job still saves with `keep=1`:
    the generation it chose was deleted by that job's retention once a newer one committed,
    and the get exited 2 (`step-… was removed … call store.latest() again`), so the rank
    never started, or the script took it for a first start and trained from scratch. Without
    `--step` it copies the newest generation now, saying so; with `--step` that step only."""
    url = str(tmp_path / "store")
    store = CheckpointStore(url, keep=1)
    with store.save(10) as gen:
        gen.write_bytes("model.bin", b"older")
    out = tmp_path / "out"
    first, go = _paused_get(tmp_path, url, str(out))
    with store.save(20) as gen:
        gen.write_bytes("model.bin", b"newer")
    assert store.steps() == [20]
    go.write_text("go")
    stdout, stderr = first.communicate(timeout=30)
    assert first.returncode == 0, stderr
    assert "step-000000000010 was removed" in stderr and "step-000000000020" in stderr, stderr
    assert "of step-000000000020" in stdout, stdout
    assert (out / "model.bin").read_bytes() == b"newer"


def test_a_restart_scripts_first_start_gets_nothing_with_allow_empty(
    make_store: Any, store_url: str, tmp_path: Path
) -> None:
    """A restart script's `get STORE DEST` at the job's very first start, the store empty,
    exited 2 as for a typo: under `set -e` the job never started, and the `|| true` people
    add for that also swallowed exit 3 (the store unreadable: credentials expired, S3 down),
    and the job trained from scratch beside its checkpoints. `--allow-empty` takes a store
    that holds no committed generation as a first start (exit 0, nothing copied, said);
    unreadable is still 3, and a store whose generations are all broken is no empty one."""
    store = make_store()
    out = tmp_path / "out"
    first = forewarn("get", store_url, str(out), "--allow-empty")
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"no committed generation in {store.url} yet: nothing copied\n"
    assert not out.exists()
    store.save(40).write_bytes("model.bin", b"half")  # a save that never committed
    assert forewarn("get", store_url, str(out), "--allow-empty").returncode == 0
    assert forewarn("get", store_url, str(out)).returncode == 2  # without it, as before
    with store.save(50) as gen:
        gen.write_bytes("model.bin", b"whole")
    store.backend.put_small("step-000000000050/model.bin", b"short")  # broken: sizes differ
    broken = forewarn("get", store_url, str(out), "--allow-empty")
    assert broken.returncode != 0 and "nothing copied" not in broken.stdout, broken.stdout
    step = forewarn("get", store_url, str(out), "--allow-empty", "--step", "50")
    assert step.returncode == 2 and "--allow-empty" in step.stderr, step.stderr


def test_a_local_store_behind_a_dangling_symlink_is_unreadable_not_empty(tmp_path: Path) -> None:
    """`get STORE DEST --allow-empty` on a store whose symbolic link's target is gone (its
    volume not mounted) took it for a first start: `nothing copied`, exit 0, and the job
    trained from scratch; `ls` said `no such directory`, naming the link only. It is a store
    that cannot be read (exit 3), its link and target named."""
    volume = tmp_path / "volume"
    volume.mkdir()
    link = tmp_path / "ckpt"
    link.symlink_to(volume)
    with CheckpointStore(link) as store, store.save(5) as gen:
        gen.write_bytes("model.bin", b"four")
    for child in sorted(volume.rglob("*"), reverse=True):
        child.rmdir() if child.is_dir() else child.unlink()
    volume.rmdir()
    said = f"{link} is a symbolic link to {volume}, which does not exist"
    for argv in (
        ("get", str(link), str(tmp_path / "out"), "--allow-empty"),
        ("ls", str(link)),
        ("verify", str(link)),
    ):
        done = forewarn(*argv)
        assert done.returncode == 3 and said in done.stderr, (argv, done.stdout, done.stderr)
        assert "nothing copied" not in done.stdout
    assert not (tmp_path / "out").exists()


def test_an_empty_s3_store_spelled_with_an_inner_double_slash_says_which_it_is_not(
    bucket: str, tmp_path: Path
) -> None:
    """`s3://b/runs//job-1` (a `$BASE/` joined with `/$RUN`) names other keys than the job's
    `s3://b/runs/job-1`: it read as an empty store, and `get --allow-empty` took it for a
    first start, nothing copied, the job training from scratch beside its checkpoints. The
    commands that find it empty now name the store without the empty segment."""
    with CheckpointStore(f"s3://{bucket}/runs/job-1") as store, store.save(5) as gen:
        gen.write_bytes("model.bin", b"four")
    doubled = f"s3://{bucket}/runs//job-1"
    meant = f"s3://{bucket}/runs/job-1"
    listed = forewarn("ls", doubled)
    assert listed.returncode == 0 and meant in listed.stdout, listed.stdout
    first = forewarn("get", doubled, str(tmp_path / "out"), "--allow-empty")
    assert first.returncode == 0 and meant in first.stdout, first.stdout
    for argv in (("get", doubled, str(tmp_path / "out")), ("verify", doubled)):
        refused = forewarn(*argv)
        assert refused.returncode == 2 and meant in refused.stderr, refused.stderr


def test_a_waiting_replace_get_whose_generation_was_removed_keeps_the_first_ones_copy(
    tmp_path: Path,
) -> None:
    """Two local ranks' `get STORE DEST --replace` at once while another node's job saves with
    `keep=1`: both chose step 10; the first copied step 20 once retention removed 10, and the
    second, after waiting for it, found 10 gone too and copied 20 again, swapping the files
    under the first rank loading them. Its wait counts for the newest generation too."""
    url = str(tmp_path / "store")
    store = CheckpointStore(url, keep=1)
    with store.save(10) as gen:
        gen.write_bytes("model.bin", b"older")
    out = tmp_path / "out"
    first, go = _paused_get(tmp_path, url, str(out), "--replace")
    errors = tmp_path / "second.err"
    second = _started_get(url, str(out), "--replace", stderr=errors)
    eventually(
        lambda: "waiting" in errors.read_text() or second.poll() is not None,
        timeout=30,
        what="the second get to wait",
    )
    with store.save(20) as gen:
        gen.write_bytes("model.bin", b"newer")
    assert store.steps() == [20]
    go.write_text("go")
    assert first.wait(timeout=30) == 0, first.stderr.read() if first.stderr else ""
    loaded = (out / "model.bin").stat().st_ino  # the first rank's loader opens it now
    assert second.wait(timeout=30) == 0, errors.read_text()
    _one_copied_one_in_place(first, second)
    assert (out / "model.bin").stat().st_ino == loaded
    assert (out / "model.bin").read_bytes() == b"newer"


def _one_copied_one_in_place(first: subprocess.Popen[str], second: subprocess.Popen[str]) -> None:
    """One rank copied, the other found that copy in place. Which one copies is the lock's
    choice: the first lets go of it between its tries (the generation it chose was removed or
    corrupt), and the second may take it then (check 31d saw that order)."""
    assert first.stdout is not None and second.stdout is not None
    said = [first.stdout.read(), second.stdout.read()]
    assert sorted("already in place" in text for text in said) == [False, True], said
    assert sum(text.startswith("copied 1 file") for text in said) == 1, said


def test_a_waiting_replace_get_whose_newest_is_corrupt_keeps_the_first_ones_copy(
    tmp_path: Path,
) -> None:
    """As with a generation removed: both ranks chose step 20, whose file is corrupt; the
    first copied step 10 instead, and the second, after waiting, found 20 corrupt too and
    copied 10 again under the first rank loading it."""
    url = str(tmp_path / "store")
    store = CheckpointStore(url)
    for step in (10, 20):
        with store.save(step) as gen:
            gen.write_bytes("model.bin", bytes([step]) * 200)
    flip(store, "step-000000000020/model.bin")
    out = tmp_path / "out"
    first, go = _paused_get(tmp_path, url, str(out), "--replace")
    errors = tmp_path / "second.err"
    second = _started_get(url, str(out), "--replace", stderr=errors)
    eventually(
        lambda: "waiting" in errors.read_text() or second.poll() is not None,
        timeout=30,
        what="the second get to wait",
    )
    go.write_text("go")
    assert first.wait(timeout=30) == 0, first.stderr.read() if first.stderr else ""
    loaded = (out / "model.bin").stat().st_ino  # the first rank's loader opens it now
    assert second.wait(timeout=30) == 0, errors.read_text()
    _one_copied_one_in_place(first, second)
    assert (out / "model.bin").stat().st_ino == loaded
    assert (out / "model.bin").read_bytes() == bytes([10]) * 200


def test_a_first_start_without_allow_empty_is_told_of_it(
    make_store: Any, store_url: str, tmp_path: Path
) -> None:
    """A restart script's `get STORE DEST` without `--allow-empty` at the job's first start
    exits 2, as a typo does: the line said only 'no committed generation in URL' (or, for a
    local store whose directory the first save makes, 'no such directory'), and whoever read
    the failed job's log was not told the flag that takes an empty store for a first start."""
    make_store()
    if "://" not in store_url:
        os.makedirs(store_url)  # made by hand: an empty local store
    out = tmp_path / "out"
    empty = forewarn("get", store_url, str(out))
    assert empty.returncode == 2, empty.stderr
    assert "no committed generation" in empty.stderr and "--allow-empty" in empty.stderr
    assert len(empty.stderr.splitlines()) == 1, empty.stderr
    missing = forewarn("get", str(tmp_path / "never-saved"), str(out))
    assert missing.returncode == 2, missing.stderr
    assert "no such directory" in missing.stderr and "--allow-empty" in missing.stderr
    stepped = forewarn("get", store_url, str(out), "--step", "7")
    assert stepped.returncode == 2 and "--allow-empty" not in stepped.stderr, stepped.stderr
    shown = forewarn("show", store_url)
    assert shown.returncode == 2 and "--allow-empty" not in shown.stderr, shown.stderr
    with make_store().save(50) as gen:
        gen.write_bytes("model.bin", b"whole")
    store = make_store()
    store.backend.put_small("step-000000000050/model.bin", b"cut")  # broken: sizes differ
    for argv in ((), ("--allow-empty",)):
        broken = forewarn("get", store_url, str(out), *argv)  # no first start: not told so
        assert broken.returncode == 2 and "--allow-empty" not in broken.stderr, broken.stderr


_WITHOUT_FLOCK = """
import errno, fcntl, runpy, sys

def no_locks(*args, **kwargs):
    raise OSError(errno.ENOLCK, "No locks available")

fcntl.flock = no_locks  # DESTINATION on NFS without a lock manager
if sys.argv[1] == "-m":
    sys.argv = ["forewarn", *sys.argv[3:]]
    runpy.run_module("forewarn.agent.cli", run_name="__main__")
else:
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_second_get_into_a_destination_without_flock_waits_and_says_why(
    tmp_path: Path,
) -> None:
    """Two local ranks' restart scripts `get STORE DEST` at once, DEST on NFS whose locks
    fail (ENOLCK: no lock manager): the second copied at once beside the first, said nothing,
    and ended first; the first then swapped its own copy in under the second rank loading
    its files. The copy under way shows by its stage's pid: the second waits for it as for a
    lock, and each says once that DEST has no working locks."""
    url = str(tmp_path / "store")
    fill(CheckpointStore(url))
    out = tmp_path / "out"
    shim = tmp_path / "shim.py"
    shim.write_text(_WITHOUT_FLOCK)
    paused, go = tmp_path / "paused", tmp_path / "go"
    paused_get = str(Path(__file__).with_name("paused_get.py"))
    first = subprocess.Popen(
        [sys.executable, str(shim), paused_get, str(paused), str(go), url, str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    eventually(paused.exists, timeout=30, what="the first get to start its copy")
    errors = tmp_path / "second.err"
    with errors.open("w") as err:
        second = subprocess.Popen(
            [
                sys.executable,
                str(shim),
                "-m",
                "forewarn.agent.cli",
                "checkpoint",
                "get",
                url,
                str(out),
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    eventually(
        lambda: "waiting" in errors.read_text() or second.poll() is not None,
        timeout=30,
        what="the second get to wait",
    )
    assert second.poll() is None, errors.read_text()
    said = errors.read_text()
    assert "no working locks" in said and "No locks available" in said, said
    assert f"under way (pid {first.pid})" in said, said
    go.write_text("go")
    assert first.wait(timeout=30) == 0, first.stderr.read() if first.stderr else ""
    loaded = (out / "model.bin").stat().st_ino  # the first rank's loader opens it now
    assert second.wait(timeout=30) == 0, errors.read_text()
    assert second.stdout is not None and "already in place" in second.stdout.read()
    assert (out / "model.bin").stat().st_ino == loaded


# A job's save of step 40 under way in another process: its file written, its commit not yet.
SAVING_WRITER = """
import sys, time
from forewarn.clients.checkpoint import CheckpointStore

store = CheckpointStore(sys.argv[1])
store.flush(30, lambda gen: gen.write_bytes("model.bin", b"x" * 1000))
with store.save(40) as gen:
    gen.write_bytes("model.bin", b"y" * 1000)
    print("saving", flush=True)
    time.sleep(300)  # the scenario: a live writer mid-save until the test kills it
"""


def test_ls_tells_a_save_under_way_from_a_killed_writers_leftover(tmp_path: Path) -> None:
    """After a reclaim's SIGKILL mid-save, `ls` listed the unfinished generation `partial`,
    as it lists one a live job is still saving: whether it was safe to delete, or what
    resume had passed over, `latest()` said in the job's log and `ls` did not. Found: a local
    store after a kill 1.5 s into a final save listed `180  -  -  -  -  partial`."""
    store_url = str(tmp_path / "store")
    writer = subprocess.Popen(
        [sys.executable, "-c", SAVING_WRITER, store_url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "saving\n"
        live = forewarn("ls", store_url)
        live_rows = [
            json.loads(line) for line in forewarn("ls", store_url, "--json").stdout.splitlines()
        ]
    finally:
        writer.kill()  # the platform's SIGKILL
        writer.wait(30)
    assert live.returncode == 0, live.stderr
    assert live.stdout.splitlines()[2].split()[-1:] == ["saved)"], live.stdout
    assert "partial (being saved)" in live.stdout.splitlines()[2], live.stdout
    assert [(r["step"], r["state"], r["writer"]) for r in live_rows] == [
        (30, "ok", None),
        (40, "partial", "saving"),
    ]
    dead = forewarn("ls", store_url)
    assert "partial (writer gone)" in dead.stdout.splitlines()[2], dead.stdout
    dead_rows = [
        json.loads(line) for line in forewarn("ls", store_url, "--json").stdout.splitlines()
    ]
    assert [(r["step"], r["writer"]) for r in dead_rows] == [(30, None), (40, "gone")]


def test_prune_removes_a_killed_writers_newer_partial_and_ls_shows_its_size(
    tmp_path: Path,
) -> None:
    """A final save SIGKILLed at a reclaim's deadline left step 40 uncommitted, newer than
    every generation kept: `prune --keep 1` spared it (`deleted nothing`) and `ls` showed its
    size as `-`, though its bytes held the disk. Found: a 3,000,000-byte save killed mid-file
    in a local store listed `300  -  -  -  -  partial (writer gone)`, and `prune --keep 1`
    deleted step 100 and left it. On a local file system every writer is on this machine, so
    a lock nobody holds proves the writer gone; a live writer's save is still spared."""
    store_url = str(tmp_path / "store")
    writer = subprocess.Popen(
        [sys.executable, "-c", SAVING_WRITER, store_url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "saving\n"
        live = forewarn("prune", store_url, "--keep", "1")
        sizes = [
            json.loads(line)["size"]
            for line in forewarn("ls", store_url, "--json").stdout.splitlines()
        ]
    finally:
        writer.kill()  # the platform's SIGKILL
        writer.wait(30)
    assert live.returncode == 0 and live.stdout == "deleted nothing\n", live.stdout
    assert sizes == [1000, 1000]
    listed = forewarn("ls", store_url).stdout.splitlines()[2]
    assert listed.split()[:2] == ["40", "1000"], listed
    dry = forewarn("prune", store_url, "--keep", "1", "--dry-run")
    assert dry.stdout == "would delete step-000000000040\n", dry.stdout
    pruned = forewarn("prune", store_url, "--keep", "1")
    assert pruned.returncode == 0 and pruned.stdout == "deleted step-000000000040\n", (
        pruned.stdout + pruned.stderr
    )
    assert sorted(os.listdir(store_url)) == ["LATEST", "step-000000000030"]
    with CheckpointStore(store_url) as store:
        generation = store.latest()
        assert generation is not None and generation.step == 30


def test_prune_spares_a_partial_whose_writer_may_be_on_another_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On NFS (or any file system other machines write) a lock nobody holds here proves
    nothing: a `nolock` mount keeps locks per machine, so another node's live save looks
    free. There `prune` leaves a newer partial alone, as before."""
    from forewarn.clients.checkpoint import local

    store_url = str(tmp_path / "store")
    writer = subprocess.Popen(
        [sys.executable, "-c", SAVING_WRITER, store_url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "saving\n"
    finally:
        writer.kill()
        writer.wait(30)
    monkeypatch.setattr(local, "_FILE_SYSTEMS_OF_ONE_MACHINE", frozenset())
    with CheckpointStore(store_url, keep=1) as store:
        assert store.prune(dry_run=True) == []
        assert store.prune() == []
        assert store.steps() == [30, 40]
        monkeypatch.undo()  # a local file system: the lock nobody holds proves it gone
        assert store.prune() == [40]
        assert sorted(os.listdir(store_url)) == ["LATEST", "step-000000000030"]


def test_prune_removes_a_save_killed_on_this_machine_in_either_store(store_url: str) -> None:
    """The same on S3: a claim naming a process of this machine's boot that is gone proves
    its writer gone, and `prune` run here after the kill removes the save (before: `deleted
    nothing`, the partial and its claim left until the job saved that very step again)."""
    writer = subprocess.Popen(
        [sys.executable, "-c", SAVING_WRITER, store_url],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "saving\n"
    finally:
        writer.kill()  # the platform's SIGKILL
        writer.wait(30)
    pruned = forewarn("prune", store_url, "--keep", "1")
    assert pruned.returncode == 0 and pruned.stdout == "deleted step-000000000040\n", (
        pruned.stdout + pruned.stderr
    )
    with CheckpointStore(store_url) as store:
        assert store.steps() == [30]


def test_ls_says_no_live_claim_seen_where_nothing_proves_the_writer_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On NFS (or any file system other machines write) a free lock proves nothing: another
    node's live save looks unlocked here, and `prune` spares it. `ls` still listed it
    `partial (writer gone)`, read as "safe to delete" of a save that may be under way."""
    from forewarn.agent.cli import main
    from forewarn.clients.checkpoint import local

    store_url = str(tmp_path / "store")
    writer = subprocess.Popen(
        [sys.executable, "-c", SAVING_WRITER, store_url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "saving\n"
    finally:
        writer.kill()
        writer.wait(30)
    monkeypatch.setattr(local, "_FILE_SYSTEMS_OF_ONE_MACHINE", frozenset())  # as on NFS
    assert main(["checkpoint", "ls", store_url]) == 0
    listed = capsys.readouterr().out.splitlines()[2]
    assert "writer gone" not in listed and "partial (no live claim seen)" in listed, listed
    assert main(["checkpoint", "ls", store_url, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["step"], r["writer"]) for r in rows] == [(30, None), (40, "unknown")]


# A job restarted on the store saving step 40 again (the killed writer's step): claimed,
# its file written, its commit not yet.
SAVING_AGAIN = """
import sys, time
from forewarn.clients.checkpoint import CheckpointStore

store = CheckpointStore(sys.argv[1])
with store.save(40) as gen:
    gen.write_bytes("model.bin", b"z" * 1000)
    print("saving", flush=True)
    time.sleep(300)  # the scenario: a live writer mid-save until the test kills it
"""


def test_prune_spares_a_step_a_writer_claims_after_prune_chose_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`prune` chose what to delete (a killed writer's partial step 40), then deleted each
    without asking again whether a writer holds it: a job that started saving that step in
    between (restarted, saving step 40 again) had its files deleted under it."""
    from forewarn.agent.cli import main

    store_url = str(tmp_path / "store")
    killed = subprocess.Popen(
        [sys.executable, "-c", SAVING_WRITER, store_url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert killed.stdout is not None and killed.stdout.readline() == "saving\n"
    finally:
        killed.kill()  # the platform's SIGKILL
        killed.wait(30)
    started: list[subprocess.Popen[str]] = []
    chose = CheckpointStore.prune

    def then_a_writer_starts(self: CheckpointStore, *, dry_run: bool = False) -> list[int]:
        doomed = chose(self, dry_run=dry_run)
        if dry_run and not started:
            writer = subprocess.Popen(
                [sys.executable, "-c", SAVING_AGAIN, store_url], stdout=subprocess.PIPE, text=True
            )
            started.append(writer)
            assert writer.stdout is not None and writer.stdout.readline() == "saving\n"
        return doomed

    monkeypatch.setattr(CheckpointStore, "prune", then_a_writer_starts)
    try:
        code = main(["checkpoint", "prune", store_url, "--keep", "1"])
        out = capsys.readouterr()
        assert started and started[0].poll() is None, "the second writer was not saving"
        assert (Path(store_url) / "step-000000000040" / "model.bin").exists(), out
    finally:
        for writer in started:
            writer.kill()
            writer.wait(30)
    assert code == 0, out
    assert out.out == "deleted nothing\n", out
    assert "step-000000000040" in out.err and "saving it" in out.err, out.err


# SAVING_AGAIN, started ahead: says "ready", then saves step 40 once told to (a line).
READY_TO_SAVE_AGAIN = """
import sys, time
from forewarn.clients.checkpoint import CheckpointStore

store = CheckpointStore(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
with store.save(40) as gen:
    gen.write_bytes("model.bin", b"z" * 1000)
    print("saving", flush=True)
    time.sleep(300)  # the scenario: a live writer mid-save until the test kills it
"""


def test_prune_spares_a_step_a_writer_claims_as_prune_deletes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Asked just before the delete, the claim still left a window: a writer claiming the
    step between that question and the delete (a job restarted on the store, saving a killed
    writer's step again) wrote its file, and the delete took it. On a local store the delete
    now holds the step's claim: the writer waits for it (up to 5 s), then saves."""
    import select

    from forewarn.agent.cli import main
    from forewarn.clients.checkpoint.local import LocalBackend

    store_url = str(tmp_path / "store")
    killed = subprocess.Popen(
        [sys.executable, "-c", SAVING_WRITER, store_url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert killed.stdout is not None and killed.stdout.readline() == "saving\n"
    finally:
        killed.kill()  # the platform's SIGKILL
        killed.wait(30)
    writer = subprocess.Popen(
        [sys.executable, "-c", READY_TO_SAVE_AGAIN, store_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdin is not None and writer.stdout is not None
    said: list[str] = []
    real = LocalBackend.delete_tree

    def a_writer_starts_first(self: LocalBackend, prefix: str) -> None:
        if prefix == "step-000000000040" and not said:
            writer.stdin.write("go\n")  # type: ignore[union-attr]
            writer.stdin.flush()  # type: ignore[union-attr]
            # Its claim and file come at once, unless it waits for a claim held (3 s: below
            # the 5 s it waits for one whose holder its file does not name).
            ready, _, _ = select.select([writer.stdout], [], [], 3.0)
            said.append(writer.stdout.readline() if ready else "")  # type: ignore[union-attr]
        real(self, prefix)

    try:
        assert writer.stdout.readline() == "ready\n"
        monkeypatch.setattr(LocalBackend, "delete_tree", a_writer_starts_first)
        code = main(["checkpoint", "prune", store_url, "--keep", "1"])
        out = capsys.readouterr()
        monkeypatch.undo()
        assert said == [""], said  # the writer waited for the delete
        assert writer.stdout.readline() == "saving\n"
        assert writer.poll() is None
        assert (Path(store_url) / "step-000000000040" / "model.bin").read_bytes() == b"z" * 1000
    finally:
        writer.kill()
        writer.wait(30)
    assert code == 0 and out.out == "deleted step-000000000040\n", out


# READY_TO_SAVE_AGAIN that prints the error its save raised instead of saving on.
READY_TO_SAVE_AGAIN_OR_SAY = """
import sys
from forewarn.clients.checkpoint import CheckpointStore, CommitError

store = CheckpointStore(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
try:
    with store.save(40) as gen:
        gen.write_bytes("model.bin", b"z" * 1000)
except CommitError as error:
    print(f"refused: {error}", flush=True)
else:
    print("saved", flush=True)
"""


def test_a_writer_waiting_out_a_slow_delete_says_it_waited_for_a_delete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A delete holding the step's claim for longer than the 5 s a writer waits for it (a
    large killed save on a slow disk or NFS) failed the writer with `another process (pid
    N on HOST) is saving step-000000000040 ...`, naming the killed writer whose lock file the
    delete held: a process long gone, and nobody saving. The error now says the step's
    delete held it and what the writer waited."""
    import select

    from forewarn.agent.cli import main
    from forewarn.clients.checkpoint.local import LocalBackend

    store_url = str(tmp_path / "store")
    killed = subprocess.Popen(
        [sys.executable, "-c", SAVING_WRITER, store_url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert killed.stdout is not None and killed.stdout.readline() == "saving\n"
    finally:
        killed.kill()  # the platform's SIGKILL
        killed.wait(30)
    writer = subprocess.Popen(
        [sys.executable, "-c", READY_TO_SAVE_AGAIN_OR_SAY, store_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdin is not None and writer.stdout is not None
    said: list[str] = []
    real = LocalBackend.delete_tree

    def a_slow_delete(self: LocalBackend, prefix: str) -> None:
        if prefix == "step-000000000040" and not said:
            writer.stdin.write("go\n")  # type: ignore[union-attr]
            writer.stdin.flush()  # type: ignore[union-attr]
            # The delete outlasts the writer's wait: it ends once the writer has given up.
            ready, _, _ = select.select([writer.stdout], [], [], 60.0)
            said.append(writer.stdout.readline() if ready else "")  # type: ignore[union-attr]
        real(self, prefix)

    try:
        assert writer.stdout.readline() == "ready\n"
        monkeypatch.setattr(LocalBackend, "delete_tree", a_slow_delete)
        code = main(["checkpoint", "prune", store_url, "--keep", "1"])
        out = capsys.readouterr()
        monkeypatch.undo()
    finally:
        writer.kill()
        writer.wait(30)
    assert code == 0 and out.out == "deleted step-000000000040\n", out
    assert len(said) == 1 and said[0].startswith("refused: "), said
    refusal = said[0]
    assert f"pid {killed.pid} " not in refusal, refusal
    assert "is saving" not in refusal, refusal
    assert f"a delete of step-000000000040 (pid {os.getpid()} on " in refusal, refusal
    assert "waited 5s" in refusal, refusal


def test_verify_names_a_killed_writers_leftover_it_does_not_count(tmp_path: Path) -> None:
    """After a reclaim's SIGKILL mid-save, `verify` printed `ok` for each committed
    generation and `2 of 2 generations verify`, and nothing of the step the kill cut short:
    what happened (a save lost, its bytes still on disk) was in `ls` alone. Found: a torch
    loop SIGKILLed while saving step 60 to a local store, `verify` said `3 of 3
    generations verify (checksums)` beside a 16 MiB partial step 60."""
    store_url = str(tmp_path / "store")
    writer = subprocess.Popen(
        [sys.executable, "-c", SAVING_WRITER, store_url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "saving\n"
    finally:
        writer.kill()  # the platform's SIGKILL
        writer.wait(30)
    checked = forewarn("verify", store_url)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.splitlines() == [
        "step-000000000030: ok",
        "step-000000000040: partial (writer gone): not committed, not counted",
        "1 of 1 generations verify (checksums)",
    ], checked.stdout


@settings(max_examples=examples(80), deadline=None)
@given(
    root=st.sampled_from(["", "runs/job-1/", "runs/job-1/sub/"]),
    head=st.sampled_from(["", "runs/job-1/", "runs/other/", "outputs/", ".step-000000000040"]),
    top=st.text(max_size=20) | st.integers(0, 10**13).map(lambda step: f"step-{step:012d}"),
    rest=st.text(max_size=20),
)
def test_an_upload_key_is_a_generations_file_only_under_the_stores_generations(
    root: str, head: str, top: str, rest: str
) -> None:
    """`ls` lists a step from the keys of the bucket's unfinished uploads: only a file under
    one of this store's generations names one (never another store's under the same
    bucket, a claim, `outputs/`), and never raises."""
    from forewarn.clients.checkpoint.manifest import generation_name, parse_generation_name
    from forewarn.clients.checkpoint.s3 import generation_file

    key = f"{head}{top}/{rest}"
    named = generation_file(root, key)
    if named is None:
        step = parse_generation_name(top)
        assert not (key.startswith(root) and head == root and step is not None and rest), key
        return
    generation, name = named
    step = parse_generation_name(generation)
    assert step is not None and generation == generation_name(step), key
    assert name and f"{root}{generation}/{name}" == key, key
