"""`forewarn checkpoint ls|show|verify|get|prune URL`: a checkpoint store, for people.

URL is a store URL as `CheckpointStore` takes it (a path, `file://`, `s3://bucket/prefix`).
S3 stores read the endpoint, region and credentials from the same environment as the store
(AWS_ENDPOINT_URL, AWS_PROFILE, ...) or from the flags. Exit codes: 0 fine, 1 a generation
does not verify, 2 bad input (one `forewarn checkpoint:` line), 3 the store could not be read
(or `prune` could not delete a generation: one line each).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import json
import logging
import math
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from forewarn.clients.checkpoint import (
    CheckpointError,
    CheckpointStore,
    CorruptGenerationError,
    GenerationNotFoundError,
    GenerationRemovedError,
    S3Options,
    StorageError,
    StoreConfigError,
    StoreNotFoundError,
)
from forewarn.clients.checkpoint.generation import Generation, Verification, read_generation
from forewarn.clients.checkpoint.local import LocalBackend
from forewarn.clients.checkpoint.manifest import COMMIT, generation_name, parse_generation_name
from forewarn.clients.checkpoint.requestlimits import RequestLimits
from forewarn.clients.checkpoint.s3 import S3Backend, configured_attempts, timeout_words
from forewarn.clients.checkpoint.s3profile import profile_named
from forewarn.clients.checkpoint.store import PASSED_OVER
from forewarn.protocol.errors import UsageError
from forewarn.protocol.timefmt import parse_time, typed_duration
from forewarn.protocol.wholenumber import whole_number

from .argtypes import path_arg, word_as_written
from .progressbar import LineHandler, ProgressBar, say_line

EXIT_CORRUPT = 1
EXIT_USAGE = 2
EXIT_UNREADABLE = 3


class _Usage(UsageError):
    """Bad input: one line, exit 2."""


_step = whole_number(
    minimum=0,
    not_whole="{text!r} is not a step number",
    below="a step is not negative (got {value})",
)


# How a generation's name begins (`generation_name`).
GENERATION_PREFIX = "step-"


def _generation_step(text: str) -> int:
    """A step as a number, or as the generation's name that `show`, `verify`, `prune` and
    the store's own listing print (`step-000000000040`): pasted from there it was refused,
    "'step-000000000040' is not a step number"."""
    word = text.strip()
    step = parse_generation_name(word)
    if step is not None:
        return step
    digits = word.removeprefix(GENERATION_PREFIX)
    if digits != word and digits.isascii() and digits.isdigit():
        # Unpadded (`step-102`), as a user writes the name from memory: refused, "'step-102'
        # is not a step number", though it can mean no other generation.
        return _step(digits)
    return _step(text)


# Not as _step: `--keep -1` said 'a step is not negative', and --keep is a count.
_keep = whole_number(
    minimum=1,
    not_whole="{text!r} is not a whole number",
    below="must keep at least {minimum} generation (got {value})",
)


# How long `get` waits for another copy into its DESTINATION (the ranks of one node restoring
# together): a generation of hundreds of GB copies in minutes, not in half an hour.
GET_WAIT = 1800.0


def _duration_flag(text: str, *, zero: bool, what: str) -> float:
    """A duration flag's value (`20`, `20s`, `1m`), finite, and above 0 unless `zero`."""
    try:
        seconds = typed_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not (seconds >= 0 if zero else seconds > 0) or not math.isfinite(seconds):
        raise argparse.ArgumentTypeError(f"{what} seconds (got {text!r})")
    return seconds


def _wait(text: str) -> float:
    return _duration_flag(text, zero=True, what="a wait is 0 or more")


# The commands' own request limits on S3 (the store's: 60 s, 6 attempts, over six minutes for
# a request never answered): a person waits at a prompt, and a read timeout is a time with no
# byte moving, so a slow download or listing is never cut short by it.
CLI_READ_TIMEOUT = 20.0
CLI_ATTEMPTS = 3


def _limit_seconds(text: str) -> float:
    """A timeout flag's value: a duration (`20`, `20s`, `1m`), more than 0."""
    return _duration_flag(text, zero=False, what="a timeout is more than 0")


_attempts = whole_number(
    minimum=1,
    not_whole="{text!r} is not a whole number",
    below="at least {minimum} attempt (got {value})",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "List, inspect, verify, copy out and prune the generations of a checkpoint store "
        "(a path or s3://bucket/prefix)."
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help, description=help)
        sub.add_argument("url", metavar="URL", help="the store: a path or s3://bucket/prefix")
        s3 = sub.add_argument_group("S3 (default: the environment, as the store reads it)")
        s3.add_argument("--endpoint-url", help="S3 endpoint (MinIO, Spaces, GCS, moto)")
        s3.add_argument("--region", help="S3 signing region")
        s3.add_argument("--profile", help="a named AWS profile")
        s3.add_argument(
            "--addressing-style",
            type=word_as_written,
            choices=("auto", "path", "virtual"),
            help="S3 addressing style",
        )
        s3.add_argument(
            "--connect-timeout",
            type=_limit_seconds,
            metavar="DURATION",
            help="how long a connection may take to open (default: 3s)",
        )
        s3.add_argument(
            "--read-timeout",
            type=_limit_seconds,
            metavar="DURATION",
            help="how long a request may wait with no byte coming back, per attempt "
            f"(default: {CLI_READ_TIMEOUT:g}s)",
        )
        s3.add_argument(
            "--attempts",
            type=_attempts,
            metavar="N",
            help="tries of each request, the first included (default: AWS_MAX_ATTEMPTS, else "
            f"the AWS config file's max_attempts, else {CLI_ATTEMPTS})",
        )
        return sub

    ls = command("ls", "list generations: step, size, age, verified state, LATEST")
    ls.add_argument("--checksums", action="store_true", help="re-hash every byte, not sizes only")
    ls.add_argument("--json", action="store_true", help="one JSON object per generation")
    ls.set_defaults(action_func=run_ls)

    show = command("show", "one generation's manifest: files, sizes, checksums, metadata")
    show.add_argument(
        "step",
        nargs="?",
        type=_generation_step,
        help="the step, or its generation's name (default: the latest)",
    )
    show.add_argument("--json", action="store_true", help="the manifest as JSON")
    show.set_defaults(action_func=run_show)

    verify = command("verify", "re-check checksums; exit 1 when a generation does not verify")
    verify.add_argument("--step", type=_generation_step, help="only this step (default: every one)")
    verify.add_argument(
        "--sizes-only", action="store_true", help="check presence and sizes, not checksums"
    )
    verify.set_defaults(action_func=run_verify)

    get = command("get", "copy a generation's files out, verified")
    get.add_argument("destination", type=path_arg, help="a directory (created)")
    get.add_argument("--step", type=_generation_step, help="the step (default: the latest)")
    get.add_argument("--prefix", default="", help="only the files under this prefix")
    get.add_argument(
        "--replace",
        action="store_true",
        help="replace what DESTINATION holds (default: refuse a directory that is not empty)",
    )
    get.add_argument(
        "--allow-empty",
        action="store_true",
        help="a store that holds no committed generation yet (a job's first start) is no "
        "error: exit 0, nothing copied (an unreadable store still exits 3)",
    )
    get.add_argument(
        "--wait",
        type=_wait,
        default=GET_WAIT,
        metavar="DURATION",
        help="wait this long for another copy into DESTINATION under way (the ranks of one "
        "node restoring together) to end, then find its copy in place (default: 30m; 0: "
        "refuse at once)",
    )
    get.set_defaults(action_func=run_get)

    prune = command("prune", "delete all but the newest N verified generations")
    prune.add_argument("--keep", type=_keep, required=True, help="generations to keep")
    prune.add_argument("--dry-run", action="store_true", help="say what would go; delete nothing")
    prune.add_argument(
        "--checksums",
        action="store_true",
        help="count only generations whose checksums verify toward --keep (reads every byte)",
    )
    prune.add_argument(
        "--abort-uploads",
        action="store_true",
        help="also abort unfinished uploads (only while no job is saving to the store)",
    )
    prune.set_defaults(action_func=run_prune)

    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Dispatch to the action, turning the store's errors into one line and an exit code."""
    action = args.action_func
    # The store's word on newer generations `latest()` passes over is for a resuming job:
    # here `ls` shows them `partial`, and on bad input it made the one line two.
    store_log = logging.getLogger("forewarn.checkpoint")
    store_log.addFilter(_without_passed_over)
    # The store's warnings (and botocore's) as lines of their own: through logging's
    # last-resort handler they ran on after a `get`'s progress bar.
    root = logging.getLogger()
    lines = LineHandler(logging.WARNING) if not root.handlers else None
    if lines is not None:
        root.addHandler(lines)
    limits: list[RequestLimits] = []
    try:
        store = _open(args)
        watch = None
        if isinstance(store.backend, S3Backend):
            limits.append(store.backend.limits)
            watch = store.backend.watch_requests(_say_waiting)
        try:
            result: int = action(args, store)
        finally:
            if watch is not None:
                watch.close()
            store.close()
        return result
    except (_Usage, StoreConfigError, GenerationNotFoundError) as error:
        print(f"forewarn: checkpoint: {error}", file=sys.stderr)
        return EXIT_USAGE
    except CorruptGenerationError as error:
        print(f"forewarn: checkpoint: {error}", file=sys.stderr)
        return EXIT_CORRUPT
    except BrokenPipeError:
        # The reader went away (`forewarn checkpoint ls URL | head -1`): the command line's
        # own quiet exit, not 'cannot read <store>: Broken pipe'.
        raise
    except (CheckpointError, OSError) as error:
        print(
            f"forewarn: checkpoint: cannot read {args.url}: {_why(error, limits)}", file=sys.stderr
        )
        return EXIT_UNREADABLE
    except Exception as error:
        # botocore's errors (no such bucket, access denied, endpoint unreachable).
        if type(error).__module__.startswith(("botocore", "boto3")):
            print(
                f"forewarn: checkpoint: cannot read {args.url}: {_why(error, limits)}",
                file=sys.stderr,
            )
            return EXIT_UNREADABLE
        raise
    finally:
        store_log.removeFilter(_without_passed_over)
        if lines is not None:
            root.removeHandler(lines)


def _say_waiting(line: str) -> None:
    say_line(f"forewarn: checkpoint: {line}", sys.stderr)


def _why(error: BaseException, limits: list[RequestLimits]) -> str:
    """The error, and for a timeout the limit that ended it (botocore names only the URL:
    "Read timeout on endpoint URL: ...", after minutes of silence) and the flags to change."""
    if isinstance(error, StorageError):
        # The store's own words, its S3Options fields told as this command's flags.
        if not error.options:
            return f"{error.detail} ({error.what})"
        flags = ", ".join(
            _S3_FLAGS.get(name, _S3_VARIABLES.get(name, name)) for name in error.options
        )
        return f"{error.detail} ({error.what}: {flags})"
    words = timeout_words(error, limits[0]) if limits else None
    if words is None:
        return str(error)
    return f"{error} ({words}: --connect-timeout, --read-timeout, --attempts)"


def _without_passed_over(record: logging.LogRecord) -> bool:
    return not getattr(record, PASSED_OVER, False)


# The S3 flags by the S3Options field each sets: a refusal names the flag given.
_S3_FLAGS = {
    "endpoint_url": "--endpoint-url",
    "region": "--region",
    "profile": "--profile",
    "addressing_style": "--addressing-style",
    "connect_timeout": "--connect-timeout",
    "read_timeout": "--read-timeout",
    "attempts": "--attempts",
}
# The S3Options fields no flag sets, by the variable that does.
_S3_VARIABLES = {
    "access_key_id": "AWS_ACCESS_KEY_ID",
    "secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "session_token": "AWS_SESSION_TOKEN",
}


def _open(args: argparse.Namespace) -> CheckpointStore:
    options = S3Options(
        endpoint_url=args.endpoint_url,
        region=args.region,
        profile=args.profile,
        addressing_style=args.addressing_style,
        connect_timeout=args.connect_timeout,
        read_timeout=args.read_timeout,
        attempts=args.attempts,
    )
    url = os.fspath(args.url)
    if options.given() and not url.lower().startswith("s3:"):
        # The store's own refusal names its fields ("S3 options endpoint_url apply ..."),
        # which no flag of this command is called. (`s3:/x` is left to the store, which
        # asks whether `s3://x` was meant.)
        flags = ", ".join(_S3_FLAGS[name] for name in sorted(options.given()))
        raise _Usage(f"{flags}: for s3:// stores only, not {url!r}")
    if url.lower().startswith("s3:"):
        attempts = args.attempts
        if attempts is None:
            # boto3's own setting (AWS_MAX_ATTEMPTS, the config file's max_attempts) wins
            # over this command's shorter default, as it does over the store's.
            with profile_named(url, args.profile):
                attempts = configured_attempts(args.profile) or CLI_ATTEMPTS
        options = dataclasses.replace(
            options,
            read_timeout=CLI_READ_TIMEOUT if args.read_timeout is None else args.read_timeout,
            attempts=attempts,
        )
    keep = getattr(args, "keep", None)
    verify: Literal["sizes", "checksums"] = (
        "checksums" if args.action == "prune" and args.checksums else "sizes"
    )
    store = CheckpointStore(
        args.url, keep=keep, verify=verify, s3=options if options.given() else None
    )
    root = getattr(store.backend, "root", None)
    if isinstance(store.backend, LocalBackend):
        try:
            store.backend.raise_if_unreachable()  # no empty store, no first start
        except StoreNotFoundError:
            store.close()
            raise
    # (`get --allow-empty` at a first start: the store's directory comes with the first save.)
    first_start = (
        getattr(args, "allow_empty", False) and isinstance(root, Path) and not root.exists()
    )
    if isinstance(root, Path) and not root.is_dir() and not first_start:
        # A mistyped path would otherwise read as an empty store: `verify` would pass.
        store.close()
        why = "not a directory" if root.exists() else "no such directory"
        first = _FIRST_START if args.action == "get" and not root.exists() else ""
        raise _Usage(f"{args.url}: {why} (a local store is a directory){first}")
    return store


def _empty_segment(store: CheckpointStore) -> str:
    """For a store found empty whose S3 prefix holds `//`: which store it is not. A `$BASE/`
    joined with `/$RUN` names other keys than the job's store, and read as empty (with `get
    --allow-empty`, as a first start: the job trained from scratch)."""
    url = store.url
    if not url.startswith("s3://"):
        return ""
    bucket, _, prefix = url[len("s3://") :].partition("/")
    if "//" not in prefix:
        return ""
    segments = "/".join(part for part in prefix.split("/") if part)
    return (
        f" (its prefix {prefix!r} holds an empty segment, which S3 keeps: it is not "
        f"s3://{bucket}/{segments})"
    )


def _size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # pragma: no cover


def _files(count: int) -> str:
    return f"{count} file" if count == 1 else f"{count} files"


def _age(created_at: str, now: datetime) -> str:
    try:
        seconds = (now - parse_time(created_at)).total_seconds()
    except ValueError:
        return "?"
    return _seconds(seconds)


def _seconds(seconds: float) -> str:
    for unit, length in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= length:
            return f"{seconds / length:.0f}{unit}"
    return f"{max(seconds, 0):.0f}s"


def _uploads(store: CheckpointStore) -> dict[int, list[dict[str, Any]]]:
    """The files of each step still in unfinished uploads (S3), oldest first. A save killed
    while its only files were uploads left no object under its generation: `ls` listed no
    such step, and only `prune --abort-uploads` found its bytes."""
    found: dict[int, list[dict[str, Any]]] = {}
    try:
        listed = store.backend.unfinished_uploads()
    except Exception as error:
        # Credentials without s3:ListBucketMultipartUploads (a common narrow bucket policy)
        # read the store fine: said, and the generations listed without them.
        print(
            f"forewarn: checkpoint: cannot list the unfinished uploads in {store.url} "
            f"({error}): a save whose files are only uploads is not shown",
            file=sys.stderr,
        )
        return found
    for upload in listed:
        step = parse_generation_name(upload.generation)
        if step is not None:
            found.setdefault(step, []).append(
                {"file": upload.file, "size": upload.size, "age_seconds": upload.age_seconds}
            )
    return found


def _rows(store: CheckpointStore, checksums: bool) -> list[dict[str, Any]]:
    hinted = store.latest_hint()
    steps = store.steps()
    uploads = _uploads(store)
    rows: list[dict[str, Any]] = []
    for step in sorted(set(steps) | set(uploads)):
        generation, problems = read_generation(store.backend, step)
        row: dict[str, Any] = {
            "step": step,
            "generation": generation_name(step),
            "latest": step == hinted,
            "writer": None,
            "uploads": uploads.get(step, []),
        }
        if generation is None:
            state = "partial" if problems == ["not committed"] else "corrupt"
            row.update(size=None, files=None, world_size=None, created_at=None)
            row.update(state=state, problems=[] if state == "partial" else problems)
            if state == "partial":
                # The bytes it holds, unfinished files too: what deleting it would free.
                row["size"] = store.backend.usage(generation_name(step)) + sum(
                    upload["size"] for upload in row["uploads"]
                )
                row["writer"] = _writer(store, step)
        else:
            check = _verified(store, generation, checksums)
            if check is None:
                continue  # removed since it was listed
            row.update(
                size=generation.size,
                files=len(generation.files),
                world_size=generation.world_size,
                created_at=generation.created_at,
                state="ok" if check.ok else "corrupt",
                problems=list(check.problems),
            )
        rows.append(row)
    return rows


def _writer(store: CheckpointStore, step: int) -> str:
    """Who writes the uncommitted generation of `step`: "saving", "gone" or "unknown"."""
    # A save under way (a live claim holds its step) or a killed writer's leftover: `latest()`
    # tells them apart in the job's log, and `ls` listed both alike. "gone" only where the
    # backend proves it, as `prune` deletes by (on NFS another node's live save looks
    # unclaimed here): else no claim was seen.
    name = generation_name(step)
    if store.backend.claimed(name):
        return "saving"
    if store.backend.writer_gone(name):
        return "gone"
    return "unknown"


def _state_words(row: dict[str, Any]) -> str:
    """The STATE column of `ls`: the state, with the problems or who writes a partial."""
    if row["problems"]:
        return f"{row['state']}: {'; '.join(row['problems'])}"
    writer = {"saving": "being saved", "gone": "writer gone", "unknown": "no live claim seen"}.get(
        row.get("writer") or ""
    )
    uploads = row.get("uploads") or []
    if writer and uploads:
        # Its bytes in uploads S3 lists apart from objects: under way, or left by a kill.
        kind = {"saving": "in flight", "gone": "abandoned"}.get(row["writer"], "unfinished")
        count = f"{len(uploads)} upload" if len(uploads) == 1 else f"{len(uploads)} uploads"
        ages = [u["age_seconds"] for u in uploads if u["age_seconds"] is not None]
        oldest = "" if len(uploads) == 1 else " the oldest"
        started = f",{oldest} started {_seconds(max(ages))} ago" if ages else ""
        writer = f"{writer}; {count} {kind}{started}"
    return f"{row['state']} ({writer})" if writer else row["state"]


def _verified(
    store: CheckpointStore, generation: Generation, checksums: bool
) -> Verification | None:
    """`store.verify` with a progress bar; None when the generation was removed meanwhile:
    a job with `keep=N` deletes its oldest generation (marker first) once it commits a newer
    one, and the commands check the oldest first, so that one read as 'CORRUPT: not
    committed' (exit 1) or, deleted while hashed, as 'cannot read <store>' (exit 3)."""
    bar = ProgressBar(f"verifying {generation.name}", generation.size)
    try:
        check = store.verify(generation.step, checksums=checksums, progress=bar.update)
    except FileNotFoundError:
        if _committed(store, generation):
            raise
        return None
    finally:
        bar.close()
    if check.problems and not _committed(store, generation):
        return None
    return check


def _committed(store: CheckpointStore, generation: Generation) -> bool:
    return _marked(store, generation.step)


def _marked(store: CheckpointStore, step: int) -> bool:
    """Whether `step`'s generation has its commit marker (whether or not it verifies)."""
    return store.backend.get_small(f"{generation_name(step)}/{COMMIT}") is not None


def run_ls(args: argparse.Namespace, store: CheckpointStore) -> int:
    rows = _rows(store, args.checksums)
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
        return 0
    if not rows:
        print(f"no generations in {store.url}{_empty_segment(store)}")
        return 0
    now = datetime.now(timezone.utc)
    checked = "checksums" if args.checksums else "sizes"
    header = ("STEP", "SIZE", "FILES", "RANKS", "AGE", f"STATE ({checked})", "")
    table = [header]
    for row in rows:
        table.append(
            (
                str(row["step"]),
                _size(row["size"]) if row["size"] is not None else "-",
                str(row["files"]) if row["files"] is not None else "-",
                str(row["world_size"]) if row["world_size"] is not None else "-",
                _age(row["created_at"], now) if row["created_at"] else "-",
                _state_words(row),
                "LATEST" if row["latest"] else "",
            )
        )
    widths = [max(len(line[column]) for line in table) for column in range(len(header))]
    for line in table:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        )
    return 0


# Said where `get` finds no store to copy from: a restart script's first start exits 2 as a
# typo does, and its log did not name the flag that takes an empty store for one.
_FIRST_START = "; at a job's first start, --allow-empty takes that for no checkpoint yet (exit 0)"


def _chosen(store: CheckpointStore, step: int | None) -> Any:
    if step is not None:
        return store.get(step, verify="sizes")
    latest = store.latest(verify="sizes")
    if latest is None:
        raise GenerationNotFoundError(
            f"no committed generation in {store.url}{_empty_segment(store)}"
        )
    return latest


def _any_marked(store: CheckpointStore) -> bool:
    return any(_marked(store, step) for step in reversed(store.steps()))


def run_show(args: argparse.Namespace, store: CheckpointStore) -> int:
    generation = _chosen(store, args.step)
    manifest = generation.manifest
    if args.json:
        print(manifest.encode().decode(), end="")
        return 0
    print(f"generation  {generation.name} in {store.url}")
    print(f"step        {generation.step}")
    print(f"created     {generation.created_at}")
    print(f"ranks       {generation.world_size}")
    print(f"size        {_size(generation.size)} in {_files(len(generation.files))}")
    print(f"LATEST      {'yes' if store.latest_hint() == generation.step else 'no'}")
    if generation.metadata:
        print(f"metadata    {json.dumps(generation.metadata, sort_keys=True)}")
    width = max(len(entry.name) for entry in manifest.files) if manifest.files else 0
    for entry in manifest.files:
        print(
            f"  {entry.name.ljust(width)}  {_size(entry.size):>10}  rank {entry.rank}  "
            f"{entry.checksum}"
        )
    return 0


def run_verify(args: argparse.Namespace, store: CheckpointStore) -> int:
    uploads: dict[int, list[dict[str, Any]]] = {}
    if args.step is not None:
        steps = [args.step]
    else:
        # The store's own listing first: a store that cannot be read (a missing bucket) is
        # said once, by the command's error, not first as uploads it could not list.
        listed = store.steps()
        uploads = _uploads(store)
        steps = sorted(set(listed) | set(uploads))
    failed = 0
    checked = 0
    for step in steps:
        generation, problems = read_generation(store.backend, step)
        if generation is None and problems == ["not committed"]:
            if args.step is not None:
                raise GenerationNotFoundError(
                    f"no committed generation for step {step} in {store.url}"
                )
            # A save in progress or a dead writer's leftover: not a generation, so not
            # counted, but said: after a kill mid-save `verify` said only that the
            # committed ones verify, and the lost save was in `ls` alone.
            row = {
                "state": "partial",
                "problems": [],
                "writer": _writer(store, step),
                "uploads": uploads.get(step, []),
            }
            print(f"{generation_name(step)}: {_state_words(row)}: not committed, not counted")
            continue
        if generation is not None:
            check = _verified(store, generation, not args.sizes_only)
            if check is None:
                print(f"{generation_name(step)}: removed while it was checked")
                continue
            problems = list(check.problems)
        checked += 1
        if problems:
            failed += 1
            print(f"{generation_name(step)}: CORRUPT: {'; '.join(problems)}")
        else:
            print(f"{generation_name(step)}: ok")
    if not checked:
        # A mistyped S3 prefix lists as an empty store: "0 of 0 verify" would pass a gate.
        raise GenerationNotFoundError(
            f"no committed generation in {store.url} to verify{_empty_segment(store)}"
        )
    what = "sizes" if args.sizes_only else "checksums"
    print(f"{checked - failed} of {checked} generations verify ({what})")
    return EXIT_CORRUPT if failed else 0


# How many times `get` takes the newest generation again when the one it copies is removed by
# retention meanwhile (each time, another job committed a newer one).
RECHOOSE = 5


def run_get(args: argparse.Namespace, store: CheckpointStore) -> int:
    if args.allow_empty:
        if args.step is not None:
            raise _Usage("--allow-empty is for the newest generation (a first start), not --step")
        if not _any_marked(store):
            # The job's first start: exit 2 stopped a `set -e` restart script, and the
            # `|| true` added for it took an unreadable store (exit 3) for one too.
            print(
                f"no committed generation in {store.url} yet: nothing copied{_empty_segment(store)}"
            )
            return 0
    try:
        generation = _chosen(store, args.step)
    except GenerationNotFoundError as error:
        if args.step is not None or args.allow_empty or _any_marked(store):
            raise  # (committed ones that all fail the sizes check: no first start)
        raise GenerationNotFoundError(f"{error}{_FIRST_START}") from None
    removed = 0
    waited: list[str] = []  # what an earlier try waited for (another rank's copy)
    while True:
        try:
            return _copy_out(args, store, generation, waited)
        except GenerationRemovedError:
            # Another node's job saving with keep=N deleted it once a newer one committed: the
            # get exited 2, and the restart script's rank never started (or, taken for a first
            # start, trained from scratch). The newest one is what it wants.
            removed += 1
            if args.step is not None or removed > RECHOOSE:
                raise
            newer = _chosen(store, None)
            print(
                f"forewarn: checkpoint: {generation.name} was removed while it was copied "
                f"(retention, once a newer generation committed): copying {newer.name}, the "
                "newest",
                file=sys.stderr,
            )
            generation = newer
        except CorruptGenerationError as error:
            if args.step is not None:
                raise
            # latest() checks sizes: a flipped byte shows only as the files are copied, and
            # the restart script's `get` then failed though the step before was sound.
            older = _newest_below(store, generation.step)
            if older is None:
                raise
            print(
                f"forewarn: checkpoint: {error}: copying {older.name}, the newest older "
                "generation that verifies",
                file=sys.stderr,
            )
            generation = older


def _newest_below(store: CheckpointStore, step: int) -> Generation | None:
    for candidate in reversed([s for s in store.steps() if s < step]):
        try:
            return store.get(candidate, verify="sizes")
        except GenerationNotFoundError:
            continue  # not committed: a save in progress or a dead writer's leftover
        except CorruptGenerationError as error:
            print(f"forewarn: checkpoint: {error}", file=sys.stderr)
    return None


def _copy_out(
    args: argparse.Namespace, store: CheckpointStore, generation: Generation, waited: list[str]
) -> int:
    """Copy `generation` out; `waited` gathers what it waited for, across tries: a rank whose
    try waited for another's copy and then found its generation removed finds that rank's
    copy of the newest in place, also with --replace (not copied again under it)."""

    def waiting(what: str) -> None:
        waited.append(what)
        print(f"forewarn: checkpoint: {what}", file=sys.stderr)

    prefix = args.prefix.strip("/")
    names = [n for n in generation.files if not prefix or n.startswith(prefix + "/")]
    if not names:
        raise _Usage(f"{generation.name} has no files under {args.prefix!r}")
    destination = Path(args.destination)
    if destination.exists() and not destination.is_dir():
        raise _Usage(f"{destination} is not a directory (get copies the files into one)")
    total = sum(generation.files[name].size for name in names)
    bar = ProgressBar(f"copying {generation.name}", total)
    try:
        copied = generation.get_dir(
            prefix,
            destination,
            progress=lambda done, _total: bar.update(done),
            replace=args.replace,
            wait=args.wait,
            waiting=waiting,
            waited=bool(waited),
        )
    except GenerationNotFoundError:
        raise  # removed meanwhile by another job's retention
    except ValueError as error:
        raise _Usage(str(error)) from None  # a destination that is the store, or holds it
    except OSError as error:
        if (
            _in_store(store, error)
            or isinstance(error, StorageError)
            or type(error).__module__.startswith("botocore")
        ):
            # The store's own file, or S3's request failing (the store's StorageError, and
            # botocore's timeouts, are OSErrors): "cannot read", exit 3.
            raise
        if isinstance(error, FileExistsError) and error.errno == errno.ENOTEMPTY:
            # Copied beside another step's files, a loader read a mix of the two checkpoints
            # (a stale model.safetensors beside a sharded layout): get_dir refused, at once.
            raise _Usage(
                f"{destination} is not empty: the files of {generation.name} would mix with "
                "what it holds; give an empty or new directory, or --replace to replace its "
                "contents"
            ) from None
        # Said as "cannot read <store>", exit 3, it sent people to a store that was fine.
        raise _Usage(f"cannot write to {destination}: {error}") from None
    finally:
        bar.close()
    if copied.in_place:
        # The restart script's second run: saying 'copied' told its log of a copy not made.
        print(
            f"{generation.name} already in place in {args.destination}: "
            f"{_files(len(copied))} ({_size(total)}), nothing copied"
        )
        return 0
    print(
        f"copied {_files(len(copied))} ({_size(total)}) of {generation.name} to {args.destination}"
    )
    return 0


def _in_store(store: CheckpointStore, error: OSError) -> bool:
    """Whether `error` is about a file of the (local) store rather than of a destination."""
    root = getattr(store.backend, "root", None)
    if not isinstance(root, Path) or not error.filename:
        return False
    return Path(os.fsdecode(error.filename)).absolute().is_relative_to(root)


def run_prune(args: argparse.Namespace, store: CheckpointStore) -> int:
    doomed = store.prune(dry_run=True)
    if args.dry_run:
        names = ", ".join(generation_name(step) for step in doomed) or "nothing"
        print(f"would delete {names}")
        return 0
    # One by one here, not through store.prune(): that raises the first generation it could
    # not delete once the rest are gone, and the command then said only 'cannot read
    # <store>' (a store it had read) and not which generations it had deleted.
    deleted: list[int] = []
    failures: list[str] = []
    for step in doomed:
        try:
            if not store.backend.delete_unclaimed(generation_name(step)):
                # A writer claimed it since it was chosen (a job restarted on the store,
                # saving that step again): deleted, its files went under it. Asked with
                # the delete, as `store.prune()` does.
                print(
                    f"forewarn: checkpoint: {generation_name(step)} left alone: another "
                    "process is saving it now",
                    file=sys.stderr,
                )
                continue
        except CheckpointError as error:
            failures.append(str(error))  # names the generation and the store
        except Exception as error:
            failures.append(f"cannot remove {generation_name(step)} from {store.url}: {error}")
        else:
            deleted.append(step)
    if deleted:
        # The lock files (claims) of the killed writers whose saves it removed.
        with contextlib.suppress(CheckpointError, OSError):
            store.backend.remove_stale_claims()
    print(f"deleted {', '.join(generation_name(step) for step in deleted) or 'nothing'}")
    for failure in failures:
        print(f"forewarn: checkpoint: {failure}", file=sys.stderr)
    if args.abort_uploads:
        print(f"aborted {store.abort_stale_uploads()} unfinished uploads")
    return EXIT_UNREADABLE if failures else 0
