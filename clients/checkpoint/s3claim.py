"""One writer of a step at a time on S3, across processes and machines.

A save (its rank 0, in a save of several ranks) claims its step with a small object
`.<generation>.claim` in the store's root, created by a conditional write (`If-None-Match:
*`): the service creates it for one writer and answers every other 412 PreconditionFailed
(409 ConditionalRequestConflict while two race). Without it a second job saving the step (a
replacement started while the old one still flushes) deleted the first's files as a dead
writer's leftovers, or renamed its own over them.

A killed writer cannot let go of its claim, so a claim is a lease: its holder rewrites it
every `LEASE / 6` seconds (`If-Match` its own ETag, so a claim taken over is never taken
back) and deletes it (`If-Match` again) when its save ends. A claim not rewritten for `LEASE`
seconds, by the service's clock (its LastModified against the Date of the reply), is a dead
writer's: the next writer takes it over by a write conditional on the ETag it read, so of
two writers taking one over only one wins. So is at once one whose holder ran on this
machine, in this boot and PID namespace, and is gone (a job restarted on the machine its
writer was killed on). Claims that nobody takes over are removed by a later commit
(`remove_stale`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import uuid
from datetime import datetime, timezone
from typing import Any

from .backend import CLAIM_STEM, claim_stem
from .errors import CommitError
from .manifest import parse_generation_name

log = logging.getLogger("forewarn.checkpoint")

# How long a claim outlives its last renewal: what a killed writer's step is blocked for
# when its holder ran elsewhere (another machine, container or boot). A live holder renews
# six times in it, so it loses its claim only when S3 refused or failed every one of those
# writes (and then its own save is failing too).
LEASE = 60.0
SUFFIX = ".claim"
# Someone else holds the key, or is writing it at this moment.
_CONTESTED = ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")
# Services without conditional writes that refuse the header rather than ignore it.
_UNSUPPORTED = ("NotImplemented", "InvalidArgument", "InvalidRequest", "501")
_ATTEMPTS = 3
_CLAIM_NAME = re.compile(r"\.(?P<stem>[^/]+)" + re.escape(SUFFIX))
# What follows `.<generation>.rank-` in the key of a rank's claim.
RANK_CLAIM_KEY = re.compile(r"[0-9]+" + re.escape(SUFFIX))


def claim_name(prefix: str, rank: int = 0) -> str:
    """The key (relative to the store's root) of the claim of `rank` on generation `prefix`."""
    return f".{claim_stem(prefix, rank)}{SUFFIX}"


def error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return ""
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code or str(status or "")


def _missing(exc: BaseException) -> bool:
    return error_code(exc) in ("NoSuchKey", "404", "NotFound")


def service_time(reply: dict[str, Any]) -> datetime:
    """The time the service answered (its Date header), else this machine's."""
    from email.utils import parsedate_to_datetime

    date = reply.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if date:
        with contextlib.suppress(TypeError, ValueError):
            parsed = parsedate_to_datetime(date)
            if parsed.tzinfo is not None:
                return parsed
    return datetime.now(timezone.utc)


class S3Claim:
    """The claim of one save (its rank 0) on its generation; `take` it, then `release` it."""

    def __init__(self, client: Any, bucket: str, key: str, url: str, prefix: str) -> None:
        self._client = client
        self._bucket = bucket
        self._key = key
        self._url = url
        self._prefix = prefix
        self._body = json.dumps(
            {
                "holder": f"pid {os.getpid()} on {os.uname().nodename}",
                "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                **_this_process(),
                "lease": LEASE,
                # Makes this writer's body, hence its ETag, its own: a takeover changes it.
                "token": uuid.uuid4().hex,
            }
        ).encode()
        self._etag: str | None = None
        self._pid = os.getpid()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def take(self) -> bool:
        """Claim the generation; False when the service has no conditional writes (nothing
        is claimed then). `CommitError` naming the holder when a live writer holds it."""
        if not takes(self._client, "PutObject", "IfNoneMatch", "IfMatch"):
            # boto3 1.28 (what the aws extra allows) predates them: refusing the parameter,
            # it failed every save.
            log.warning(
                "forewarn: this botocore (%s) cannot make conditional writes: saves of one "
                "step by two processes are not kept apart in %s (upgrade boto3)",
                _botocore_version(),
                self._url,
            )
            return False
        for _attempt in range(_ATTEMPTS):
            try:
                reply = self._put(IfNoneMatch="*")
            except Exception as exc:
                code = error_code(exc)
                if code in _UNSUPPORTED:
                    log.warning(
                        "forewarn: %s refuses conditional writes (%s): saves of one step by "
                        "two processes are not kept apart there",
                        self._url,
                        code,
                    )
                    return False
                if code not in _CONTESTED:
                    raise
            else:
                self._held(reply)
                return True
            # Outside the handler: a refusal is about the holder, not the 412 before it.
            if self._take_over():
                return True
            # Released or taken over meanwhile: try again.
        raise CommitError(
            f"cannot save {self._prefix} in {self._url}: other writers kept claiming it "
            f"({self._key}); this save left it alone"
        )

    def _take_over(self) -> bool:
        try:
            reply = self._client.get_object(Bucket=self._bucket, Key=self._key)
            raw = reply["Body"].read()
        except Exception as exc:
            if _missing(exc):
                return False
            raise
        if raw == self._body:
            # This claim's own write, whose answer was lost (a reset connection): botocore
            # retried it and the service answered the retry 412.
            self._held(reply)
            return True
        age = (service_time(reply) - reply["LastModified"]).total_seconds()
        holder = _holder(raw)
        gone = _gone_from_here(raw)
        left = _left_by_this_process(raw)
        if age < LEASE and not gone and not left:
            raise CommitError(
                f"another process ({holder}) is saving {self._prefix} in {self._url}: its "
                f"claim {self._key} was last written {max(age, 0.0):.0f} s ago; this save left it "
                f"alone (a claim not renewed for {LEASE:.0f} s is a killed writer's, and the "
                "next save of the step takes it over)"
            )
        try:
            taken = self._put(IfMatch=reply["ETag"])
        except Exception as exc:
            if error_code(exc) in _CONTESTED or _missing(exc):
                return False
            raise
        log.warning(
            "forewarn: took over the claim on %s in %s from %s, %s",
            self._prefix,
            self._url,
            holder,
            # An earlier save of this process that failed (its credentials expired, the
            # service failing) could not remove its claim: no writer was killed.
            "whose process is gone (a writer that was killed)"
            if gone
            else "left by an earlier failed save of this process"
            if left
            else f"not renewed for {age:.0f} s (a writer that was killed)",
        )
        self._held(taken)
        return True

    def _put(self, **condition: str) -> Any:
        return self._client.put_object(
            Bucket=self._bucket, Key=self._key, Body=self._body, **condition
        )

    def _held(self, reply: dict[str, Any]) -> None:
        self._etag = reply["ETag"]
        self._renewer = threading.Thread(
            target=self._renew, name=f"forewarn-claim-{self._prefix}", daemon=True
        )
        self._renewer.start()

    def _renew(self) -> None:
        while not self._stop.wait(LEASE / 6):
            try:
                reply = self._put(IfMatch=str(self._etag))
            except Exception as exc:
                if error_code(exc) in _CONTESTED or _missing(exc):
                    if not self._stop.is_set():
                        log.warning(
                            "forewarn: the claim on %s in %s was taken over by another "
                            "writer (it was not renewed for %.0f s): that writer's save of "
                            "the step may spoil this one's",
                            self._prefix,
                            self._url,
                            LEASE,
                        )
                    return
                log.warning(
                    "forewarn: could not renew the claim on %s in %s: %s",
                    self._prefix,
                    self._url,
                    exc,
                )
                continue
            self._etag = reply["ETag"]

    def release(self) -> None:
        """Let go of the claim (this writer's only); never raises."""
        if os.getpid() != self._pid:
            return  # a forked child's copy: the claim is its parent's
        self._stop.set()
        renewer = self._renewer
        if renewer is not None and renewer is not threading.current_thread():
            # A renewal in flight may change the ETag (SSE-KMS gives every write its own).
            renewer.join(timeout=5.0)
        if self._etag is None:
            return
        if not takes(self._client, "DeleteObject", "IfMatch"):
            self._delete_if_ours()
            return
        try:
            self._client.delete_object(Bucket=self._bucket, Key=self._key, IfMatch=self._etag)
        except Exception as exc:
            code = error_code(exc)
            if code in _CONTESTED or _missing(exc):
                return  # taken over: it is not this writer's to delete
            if code in _UNSUPPORTED:
                self._delete_if_ours()
                return
            log.warning(
                "forewarn: could not remove the claim %s in %s (it expires %.0f s after its "
                "last renewal): %s",
                self._key,
                self._url,
                LEASE,
                exc,
            )

    def _delete_if_ours(self) -> None:
        # Without conditional deletes: read, then delete (a takeover in between is lost,
        # which needs this live writer's claim to have gone unrenewed for LEASE seconds).
        with contextlib.suppress(Exception):
            head = self._client.head_object(Bucket=self._bucket, Key=self._key)
            if head.get("ETag") == self._etag:
                self._client.delete_object(Bucket=self._bucket, Key=self._key)


def takes(client: Any, operation: str, *parameters: str) -> bool:
    """Whether this botocore knows `parameters` of `operation` (it refuses unknown ones)."""
    try:
        members = client.meta.service_model.operation_model(operation).input_shape.members
    except Exception:
        return False
    return all(name in members for name in parameters)


def _botocore_version() -> str:
    try:
        import botocore

        return str(botocore.__version__)
    except ImportError:
        return "unknown version"


def _this_process(pid: int | None = None) -> dict[str, Any]:
    """What tells a process apart on Linux: its pid, when it started (a pid is reused), and
    the boot and PID namespace that pid means something in; {} elsewhere."""
    pid = os.getpid() if pid is None else pid
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            boot = handle.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return {}
    started = _started(pid)
    if started is None:
        return {}
    return {"pid": pid, "pid_started": started, "boot": boot, "pid_namespace": namespace}


def _started(pid: int) -> int | None:
    """When process `pid` started (clock ticks after boot), or None when there is none (or
    only its zombie, killed and not yet reaped: it writes nothing any more)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        # The name in parentheses may hold spaces and parentheses: count from the last one.
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            return None
        return int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _gone_from_here(raw: bytes) -> bool:
    """Whether the claim's holder ran in this boot and PID namespace and is gone: the pid it
    names is no process, or one started at another time."""
    try:
        found = json.loads(raw)
        pid, started = int(found["pid"]), int(found["pid_started"])
        boot, namespace = found["boot"], found["pid_namespace"]
    # RecursionError: an object nested a few thousand deep (json.loads raises it, not
    # ValueError); the save meeting it failed with it.
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return False
    here = _this_process()
    if not here or (here["boot"], here["pid_namespace"]) != (boot, namespace):
        return False
    return _started(pid) != started


def _left_by_this_process(raw: bytes) -> bool:
    """Whether the claim names this very process: an earlier save of the step here failed
    after its claim was written (every answer to that write lost). No save of this process
    holds it now: the store lets one writer of a step at a time in per process."""
    try:
        found = json.loads(raw)
        named = {key: found[key] for key in ("pid", "pid_started", "boot", "pid_namespace")}
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return False
    here = _this_process()
    return bool(here) and named == here


def _holder(raw: bytes) -> str:
    try:
        holder = json.loads(raw).get("holder")
    except (ValueError, AttributeError, RecursionError):
        holder = None
    return holder if isinstance(holder, str) and holder else "unknown"


def live(client: Any, bucket: str, key: str) -> bool:
    """Whether the claim at `key` is a live writer's: renewed within `LEASE` by the service's
    clock, and not left by a process gone from this machine or by this very process."""
    try:
        reply = client.get_object(Bucket=bucket, Key=key)
        raw = reply["Body"].read()
    except Exception as exc:
        if _missing(exc):
            return False
        raise
    age = (service_time(reply) - reply["LastModified"]).total_seconds()
    return age < LEASE and not _gone_from_here(raw) and not _left_by_this_process(raw)


def remove_stale(client: Any, bucket: str, root: str) -> int:
    """Delete the claims under `root` (the store's root, ending in '/' or empty) not renewed
    for `LEASE` seconds: killed writers' of steps nobody saved again. Returns how many."""
    if not takes(client, "DeleteObject", "IfMatch"):
        return 0  # a claim taken over since the listing would be deleted: left to its step
    removed = 0
    paginator = client.get_paginator("list_objects_v2")
    # Claims only (`.step-….claim`): listing the whole root, each commit paged through every
    # generation the store keeps (a prefix each; thousands with retention off).
    for page in paginator.paginate(Bucket=bucket, Prefix=f"{root}.", Delimiter="/"):
        now = service_time(page)
        for item in page.get("Contents", []):
            found = _CLAIM_NAME.fullmatch(item["Key"][len(root) :])
            stem = CLAIM_STEM.fullmatch(found.group("stem")) if found else None
            if stem is None or parse_generation_name(stem.group("generation")) is None:
                continue
            modified = item.get("LastModified")
            if not isinstance(modified, datetime):
                continue
            if (now - modified).total_seconds() < LEASE:
                continue
            try:
                # Conditional: a claim taken over since the listing is a live writer's.
                client.delete_object(Bucket=bucket, Key=item["Key"], IfMatch=item["ETag"])
            except Exception as exc:
                code = error_code(exc)
                if code in _UNSUPPORTED:
                    # A takeover since the listing needs a claim this old: left to the
                    # next save of its step.
                    return removed
                if code in _CONTESTED or _missing(exc):
                    continue
                raise
            removed += 1
    return removed
