"""The agent's small state file: active notices and the message counter, kept across restarts.

Written atomically (a temporary file, fsync, rename, fsync of the directory), so a crash at
any moment leaves either the old state or the new one, never a torn file.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import stat
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from forewarn.protocol.timefmt import format_time, parse_time
from forewarn.providers.boot import boot_id, one_boot, saved_boot_time
from forewarn.providers.persist import write_kept
from pydantic import TypeAdapter, ValidationError

from .board import DEADLINE_KINDS
from .holders import Holder
from .protocol import MAX_FLUSH_SECONDS, Notice, OneLineNote, client_id_problem

log = logging.getLogger("forewarn.agent")

STATE_VERSION = 1
# The names of the state file and of the reserved high-water mark of `seq` in the directory.
STATE_FILE = "state.json"
SEQ_FILE = "seq"
# A failed save's note as an ack gives it: one line, of the length an ack's note may have.
_NOTE: TypeAdapter[str] = TypeAdapter(OneLineNote)


def write_atomic(path: Path, data: bytes, mode: int = 0o640) -> None:
    """Replace `path` with `data` so that readers see the old or the new content, never a mix;
    on a full disk, from the space the agent holds in the directory (`write_kept`): the `seq`
    mark, the notifiers' files."""
    write_kept(path, data, mode=mode)


@dataclass
class AgentState:
    seq: int = 0
    manual: list[Notice] = field(default_factory=list)
    # Ids of notices some client saved for: a restarted agent still says so.
    acked: list[str] = field(default_factory=list)
    # Provider notices active when saved: a restarted agent keeps them until their watcher has
    # answered again, rather than have clients take its silence meanwhile for a withdrawal.
    provider: list[Notice] = field(default_factory=list)
    # The recent flush times that size the exit margin, and the drains sent as terminate: a
    # restarted agent that forgot them sent an escalated drain as a drain again (its clients,
    # saving to exit, were told the machine was not going away).
    flushes: list[float] = field(default_factory=list)
    escalated: list[str] = field(default_factory=list)
    # The kernel's boot id when saved: provider notices from before a reboot are not restored.
    boot_id: str | None = None
    # The end of each provider notice's window (AWS scheduled maintenance's NotAfter), by id:
    # a restarted agent that forgot it retired such a notice at once inside its window.
    windows: dict[str, datetime] = field(default_factory=dict)
    # Which clients acked each active notice, by id: a restarted agent that forgot them never
    # counted a notice acked by one client before the restart and another after as flushed by
    # every client (the flag file stayed; Azure's early approval waited for NotBefore).
    acked_by: dict[str, list[str]] = field(default_factory=dict)
    # The acking clients each flushed notice was flushed by (at most MAX_EXPECTED_SAVED): a
    # restarted agent that forgot them took a notice every client had flushed for one still
    # waiting for acks, and called it flushed again when a client left or a new one acked.
    expected_by: dict[str, list[str]] = field(default_factory=dict)
    # When each notice was raised, by id, where that is not its `noticed_at` (raised again
    # after it was retired; a manual one changed by a second notify): a restarted agent that
    # forgot it retired a notice raised again at once (a clear, and the same terminate again at
    # its watcher's next answer), and gave a changed manual notice a longer life.
    raised: dict[str, datetime] = field(default_factory=dict)
    # The clients that are no subscribers holding each notice not flushed yet (a shell job's
    # `forewarn wait --client`): a restarted agent that forgot them counted a notice flushed at
    # another client's ack while such a job was still saving.
    held_by: dict[str, list[str]] = field(default_factory=dict)
    # The processes behind those holds (`wait --pid`), by notice id and client: a restarted
    # agent that forgot them held a killed loop's notice until the notice was retired.
    held_pids: dict[str, dict[str, Holder]] = field(default_factory=dict)
    # When each active notice was raised, by id, on the boot clock (`NoticeBoard.clock`), for
    # the boot `boot_id` only: a restarted agent that forgot it judged `forewarn ack --client
    # ID --flush-seconds` by the wall clock again, and a clock stepped back since the notice
    # kept the hold of a loop that had saved for it.
    raised_clock: dict[str, float] = field(default_factory=dict)
    # When the machine booted (`machine_started`) when saved: where the boot id cannot be read
    # (a container without /proc/sys/kernel/random/boot_id), what tells another boot's file.
    booted: datetime | None = None
    # The deadlines given as a duration (`forewarn notify --deadline 15m`), by id, on the boot
    # clock, for the same boot as `raised_clock`: a restarted agent that forgot them held the
    # deadline at the wall time it had come to, and a step of the clock after the restart
    # moved the terminate by the step.
    deadline_clock: dict[str, float] = field(default_factory=dict)
    # The provider notices' deadlines on the boot clock as of their last report, by id, for
    # the same boot as `raised_clock`: a restarted agent that forgot them judged a restored
    # drain by the wall clock alone, and after NTP's step forward sent a GCP maintenance drain
    # with an hour to go as a terminate until its watcher answered.
    reported_clock: dict[str, float] = field(default_factory=dict)
    # What each provider notice's deadline in `deadline_clock` is, by id (`DEADLINE_KINDS`):
    # a duration (the flag file's `5m`, which its watcher reports again from the file) or
    # one on the boot clock (one its watcher keeps on the boot clock itself: a GCP stop, a
    # deadline moved by a skew). A file without it (an agent before it) is read by provider:
    # `local` is a duration, any other is kept on the boot clock.
    deadline_kind: dict[str, str] = field(default_factory=dict)
    # The clients that had received each notice not flushed yet and not acked it, by id (the
    # first MAX_EXPECTED_SAVED, sorted): a restarted agent that forgot them let a terminate
    # whose job died while it was down pass its deadline in silence. None: a file of an agent
    # before them, which leaves who received its notices unknown.
    received_by: dict[str, list[str]] | None = None
    # The deadline each active notice was last told past without every ack at, by id
    # (`NoticeBoard.overdue`): a restarted agent that forgot them warned (and counted in
    # forewarn_unacked_terminates_total) of the same terminate's missed deadline again.
    overdue: dict[str, datetime] = field(default_factory=dict)
    # The clients that left each active notice before their ack, by id (the first
    # MAX_EXPECTED_SAVED, sorted): a restarted agent that forgot them showed a terminate
    # such a job never saved for as if every job had answered, once the others had acked.
    gone: dict[str, list[str]] = field(default_factory=dict)
    # The action each notice's acks in `acked_by` were for ("drain" or "terminate"), by id: a
    # restarted agent whose drain came back as terminate (its deadline came within the exit
    # margin while the agent was down) counts the drain's acks for no terminate. None: a file
    # of an agent before it, whose acks count for whatever the notice comes back as.
    acked_for: dict[str, str] | None = None
    # The clients whose save of each active terminate failed (they acked `outcome=failed`)
    # and that acked no saved flush since, with their note (blank when none), by id: named so
    # past the deadline by a restarted agent, not as gone before their ack. A file of an
    # agent before it has none.
    save_failed: dict[str, dict[str, str]] = field(default_factory=dict)


# Larger files are not ours: MAX_MANUAL notices take a few hundred kilobytes at most.
MAX_STATE_BYTES = 4 * 1024 * 1024
# The acking clients saved per notice (ids of up to 200 characters): a notice acked by more
# keeps the first of them (the board lists those that receive notices first), and counts as
# flushed after a restart once the others ack it again.
MAX_ACKED_SAVED = 64
# The receiving clients saved per notice: a notice sent to more is not saved as such, so a
# restarted agent does not know whether every client flushed it, and waits for the acks of
# those that subscribe again (as an agent did before they were saved).
MAX_EXPECTED_SAVED = 64


def load_state(path: Path) -> AgentState:
    """The saved state, or an empty one. Nothing in it stops a start: a file that cannot be
    read or parsed, or is not a state file of this version, is set aside (renamed `.broken`)
    and reported; a notice that does not validate is dropped and reported, and the others
    are kept."""
    try:
        data = read_small(path)
    except FileNotFoundError:
        return AgentState()
    except OSError as error:
        return _set_aside(path, f"cannot be read: {error.strerror or error}")
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError) as error:
        return _set_aside(path, f"not JSON: {error}")
    if not isinstance(raw, dict):
        return _set_aside(path, "not a JSON object")
    version = raw.get("version")
    if type(version) is not int or version != STATE_VERSION:
        # Another program's file in the directory given as state_dir (or one of another
        # version of the format) loaded as an empty state, and the next save replaced it.
        return _set_aside(
            path, f"is not a forewarn state file of version {STATE_VERSION} (version {version!r})"
        )
    manual = _notices(raw, "manual", path)
    provider = _notices(raw, "provider", path)
    acked_raw = raw.get("acked", [])
    acked = (
        [item for item in acked_raw if isinstance(item, str)] if isinstance(acked_raw, list) else []
    )
    escalated_raw = raw.get("escalated", [])
    escalated = (
        [item for item in escalated_raw if isinstance(item, str)]
        if isinstance(escalated_raw, list)
        else []
    )
    flushes_raw = raw.get("flushes", [])
    flushes = [
        float(item)
        for item in (flushes_raw if isinstance(flushes_raw, list) else [])
        if isinstance(item, (int, float))
        and not isinstance(item, bool)
        and 0 <= item <= MAX_FLUSH_SECONDS  # first: a huge int does not convert to float
        and math.isfinite(item)
    ]
    seq = raw.get("seq", 0)
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        log.error("state file %s: seq %r is not a count; ignored", path, seq)
        seq = 0
    boot_id = raw.get("boot_id")
    return AgentState(
        seq=seq,
        acked_by=_acked_by(raw.get("acked_by", {})),
        expected_by=_expected_by(raw.get("expected_by", {})),
        manual=manual,
        acked=acked,
        provider=provider,
        flushes=flushes,
        escalated=escalated,
        boot_id=boot_id if isinstance(boot_id, str) else None,
        windows=_times(raw, "windows", "window end", path),
        raised=_times(raw, "raised", "raise time", path),
        held_by=_acked_by(raw.get("held_by", {})),
        held_pids=_held_pids(raw.get("held_pids", {})),
        raised_clock=_clock_readings(raw.get("raised_clock", {})),
        booted=saved_boot_time(raw.get("booted")),
        deadline_clock=_clock_readings(raw.get("deadline_clock", {})),
        reported_clock=_clock_readings(raw.get("reported_clock", {})),
        deadline_kind=_deadline_kinds(raw.get("deadline_kind", {})),
        received_by=_acked_by(raw["received_by"]) if "received_by" in raw else None,
        overdue=_times(raw, "overdue", "overdue deadline", path),
        gone=_acked_by(raw.get("gone_before_ack", {})),
        acked_for=_acked_for(raw["acked_for"]) if "acked_for" in raw else None,
        save_failed=_save_failed(raw.get("save_failed", {})),
    )


def _save_failed(raw: object) -> dict[str, dict[str, str]]:
    """The saved failed saves by notice id and client, each with its note; a client that no
    ack could name, or a note that is no one-line text an ack could give, is left out."""
    found: dict[str, dict[str, str]] = {}
    for notice_id, clients in (raw if isinstance(raw, dict) else {}).items():
        for client, note in (clients if isinstance(clients, dict) else {}).items():
            if len(found.get(notice_id, {})) >= MAX_EXPECTED_SAVED:
                break
            if client_id_problem(client) is not None:
                continue
            try:
                kept = _NOTE.validate_python(note, strict=True)
            except ValidationError:
                continue
            found.setdefault(notice_id, {})[client] = kept
    return found


def _acked_for(raw: object) -> dict[str, str]:
    """The saved actions of the acks by notice id; one that is no action acks are for is left
    out (that notice's acks then count as in a file without them)."""
    if not isinstance(raw, dict):
        return {}
    return {
        notice_id: action
        for notice_id, action in raw.items()
        if isinstance(notice_id, str) and action in ("drain", "terminate")
    }


def _deadline_kinds(raw: object) -> dict[str, str]:
    """The saved kinds of deadline by notice id; one that is no kind this version knows is
    left out (its notice's kind is then told by its provider, as in a file without them)."""
    return {
        notice_id: kind
        for notice_id, kind in (raw if isinstance(raw, dict) else {}).items()
        if isinstance(notice_id, str) and kind in DEADLINE_KINDS
    }


def _clock_readings(raw: object) -> dict[str, float]:
    """The saved boot-clock readings by notice id; one that is no finite count of seconds is
    left out (its notice is then judged by its `noticed_at`)."""
    readings = {}
    for notice_id, seconds in (raw if isinstance(raw, dict) else {}).items():
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
            try:
                reading = float(seconds)
            except OverflowError:  # an int past any float
                continue
            if 0 <= reading < math.inf:
                readings[notice_id] = reading
    return readings


def another_boot(state: AgentState, this_boot: str | None, booted: datetime | None) -> bool:
    """Whether `state` was saved in another boot of this machine: by the boot ids, or, where
    either cannot be read, by the boot times. A file that says neither is this boot's."""
    if state.boot_id is not None and this_boot is not None:
        return state.boot_id != this_boot
    if state.booted is not None and booted is not None:
        return not one_boot(state.booted, booted)
    return state.boot_id is not None


def saved_this_boot(state: AgentState, this_boot: str | None, booted: datetime | None) -> bool:
    """Whether `state` says it was saved in this boot (so that its readings of the boot clock
    hold): by the boot ids, or, where either cannot be read, by the boot times. Unlike
    `another_boot`, a file that says neither is not."""
    if state.boot_id is not None and this_boot is not None:
        return state.boot_id == this_boot
    return state.booted is not None and booted is not None and one_boot(state.booted, booted)


def _times(raw: dict[str, object], key: str, what: str, path: Path) -> dict[str, datetime]:
    """The times by notice id under `key`; one that is not a time is left out and reported."""
    times = {}
    items = raw.get(key, {})
    for notice_id, moment in (items if isinstance(items, dict) else {}).items():
        try:
            times[notice_id] = parse_time(moment if isinstance(moment, str) else repr(moment))
        except ValueError:
            log.error(
                "state file %s: %s %r of %s is not a time; ignored", path, what, moment, notice_id
            )
    return times


def _acked_by(raw: object) -> dict[str, list[str]]:
    """The saved acking clients, by notice id: a file from before they were saved has none,
    and ids no ack could name are left out."""
    acked_by = {}
    for notice_id, clients in (raw if isinstance(raw, dict) else {}).items():
        if isinstance(clients, list):
            named = [c for c in clients if isinstance(c, str) and client_id_problem(c) is None]
            acked_by[notice_id] = named[:MAX_ACKED_SAVED]
    return acked_by


def _held_pids(raw: object) -> dict[str, dict[str, Holder]]:
    """The saved processes of the holds, by notice id and client. One that is not whole (a
    pid that is no pid, a start that is no number) is left out: its hold then lasts until its
    ack or the notice's end, as one without a process does, never let go for a wrong pid."""
    held: dict[str, dict[str, Holder]] = {}
    for notice_id, clients in (raw if isinstance(raw, dict) else {}).items():
        for client, saved in (clients if isinstance(clients, dict) else {}).items():
            holder = _holder(saved)
            if holder is not None and client_id_problem(client) is None:
                held.setdefault(notice_id, {})[client] = holder
    return held


def _holder(saved: object) -> Holder | None:
    if not isinstance(saved, dict):
        return None
    pid, start, namespace = saved.get("pid"), saved.get("start"), saved.get("namespace")
    if type(pid) is not int or not 1 <= pid <= 2**31 - 1:
        return None
    if start is not None and (type(start) is not int or not 0 <= start < 2**63):
        return None
    if not isinstance(namespace, str) or len(namespace) > 200:
        return None
    group = saved.get("group")
    if group is not None and (type(group) is not int or not 1 <= group <= 2**31 - 1):
        return None
    return Holder(pid, start, namespace, group)


def _expected_by(raw: object) -> dict[str, list[str]]:
    """The saved receiving clients, by notice id. Unlike the acks, a list that is not whole
    (too long, or with ids no client could have) is left out: a part of it could make a notice
    count as flushed by every client when it was not."""
    expected_by = {}
    for notice_id, clients in (raw if isinstance(raw, dict) else {}).items():
        if (
            isinstance(clients, list)
            and len(clients) <= MAX_EXPECTED_SAVED
            and all(isinstance(c, str) and client_id_problem(c) is None for c in clients)
        ):
            expected_by[notice_id] = list(clients)
    return expected_by


def _notices(raw: dict[str, object], key: str, path: Path) -> list[Notice]:
    notices = []
    items = raw.get(key, [])
    if items is not None and not isinstance(items, list):
        # A hand edit (one notice without its list's brackets): left out in silence, the next
        # save wrote the file over and a manual notice nothing raises again was gone unsaid.
        log.error(
            "state file %s: %s is not a list (%s: %.200s); its notices dropped",
            path,
            key,
            type(items).__name__,
            json.dumps(items),
        )
    for item in items if isinstance(items, list) else []:
        try:
            notices.append(saved_notice(item))
        except ValidationError as error:
            shown = item.get("id") if isinstance(item, dict) else None
            first = error.errors()[0]
            # Naming the field: "Value error, a time without its UTC offset" said not which.
            where = ".".join(str(part) for part in first["loc"])
            log.error(
                "state file %s: notice %r dropped: %s%s",
                path,
                shown,
                f"{where}: " if where else "",
                first["msg"].removeprefix("Value error, "),
            )
    return notices


def saved_notice(item: object) -> Notice:
    """A notice as the agent's own files hold it (state.json, webhook-pending.json), written
    by this version of the agent or another. Keys this version does not know are left out,
    as the client library leaves them out of a notice it receives: refused, a rollback past a
    new field dropped every saved notice, manual ones for good. ValidationError when it is
    no notice."""
    if isinstance(item, dict):
        item = {key: value for key, value in item.items() if key in Notice.model_fields}
    return Notice.model_validate(item)


def saved_manual_ids(path: Path) -> set[str] | None:
    """The ids of the manual notices the state file at `path` holds now, or None when it
    cannot be read as one. Reads only (unlike `load_state`, which sets a broken file aside):
    what a restart would restore, told to a clear that could not be saved."""
    try:
        raw = json.loads(read_small(path))
    except FileNotFoundError:
        return set()
    except (OSError, ValueError, RecursionError):
        return None
    items = raw.get("manual") if isinstance(raw, dict) else None
    if not isinstance(items, list):
        return None
    return {
        item["id"] for item in items if isinstance(item, dict) and isinstance(item.get("id"), str)
    }


def read_small(path: Path, limit: int = MAX_STATE_BYTES) -> bytes:
    """The content of the regular file `path` (not through a link), at most `limit` bytes:
    OSError for a larger file or anything else."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise OSError(0, "not a regular file")
        if found.st_size > limit:
            raise OSError(0, f"larger than {limit} bytes")
        return os.read(fd, limit + 1)
    finally:
        os.close(fd)


def set_aside(path: Path, what: str, why: str) -> None:
    """Move the unreadable file `path` to `<path>.broken` (one kept), saying so: the next
    write would otherwise replace what someone may want to look at."""
    broken = path.with_name(path.name + ".broken")
    try:
        if broken.is_dir() and not broken.is_symlink():
            shutil.rmtree(broken)
        os.replace(path, broken)
        log.error("%s %s %s; moved to %s", what, path, why, broken)
    except OSError as error:
        log.error("%s %s %s, and cannot be moved aside (%s)", what, path, why, error)


def _set_aside(path: Path, why: str) -> AgentState:
    set_aside(path, "state file", why)
    return AgentState()


def load_seq_mark(path: Path) -> int:
    """The reserved high-water mark of `seq` (0 when there is none or it is unreadable)."""
    try:
        text = read_small(path).decode().strip()
        return int(text) if text.isascii() and text.isdigit() else 0
    # ValueError: more digits than int() converts (4,300), which stopped every start.
    except (OSError, UnicodeDecodeError, ValueError):
        return 0


def saved_seq(directory: Path) -> int | None:
    """The highest `seq` an agent saved in the state directory `directory` (its state file's,
    or its mark's if higher): which of two directories an agent ran on last. None when its
    state file names none (there is none; it is unreadable; a hand-made one). Reads only:
    nothing is set aside."""
    try:
        raw = json.loads(read_small(directory / STATE_FILE))
    except (OSError, ValueError, RecursionError):
        return None
    seq = raw.get("seq") if isinstance(raw, dict) else None
    if type(seq) is not int or seq < 0:
        return None
    return max(seq, load_seq_mark(directory / SEQ_FILE))


def save_seq_mark(path: Path, mark: int) -> None:
    """Replace the mark at `path`; where that fails (a full disk, the reserve spent), write it
    over the mark already there, in the blocks it holds. With both copies' replacements
    failing (a full state disk and a full /run), each start after a step of the clock back
    numbered from the last mark that landed: the previous run's numbers again. OSError when
    neither lands."""
    data = f"{mark}\n".encode()
    try:
        write_atomic(path, data)
    except OSError as error:
        try:
            _overwrite_in_place(path, data)
        except OSError:
            raise error from None


def _overwrite_in_place(path: Path, data: bytes) -> None:
    """Write `data` over the regular file `path` from its start and cut it there: no new file,
    so no new block while it fits the blocks the file holds (a mark of a few bytes does). One
    write: a reader sees the old or the new mark, and a mark torn by a power cut reads as none,
    the other copy and the clock then giving the floor."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        if os.pwrite(fd, data, 0) != len(data):
            raise OSError(f"{path}: short write")
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)


def save_state(path: Path, state: AgentState) -> None:
    write_atomic(path, encode_state(state))


def encode_state(state: AgentState) -> bytes:
    """The state file's bytes for `state`."""
    payload = {
        "version": STATE_VERSION,
        "seq": state.seq,
        "manual": [json.loads(notice.model_dump_json()) for notice in state.manual],
        "acked": list(state.acked),
        "provider": [json.loads(notice.model_dump_json()) for notice in state.provider],
        "flushes": list(state.flushes),
        "escalated": list(state.escalated),
        "boot_id": state.boot_id,
        "booted": format_time(state.booted) if state.booted is not None else None,
        "windows": {notice_id: format_time(end) for notice_id, end in state.windows.items()},
        "raised": {notice_id: format_time(when) for notice_id, when in state.raised.items()},
        "acked_by": {
            # In the order given: the board puts the clients that matter first.
            notice_id: list(clients)[:MAX_ACKED_SAVED]
            for notice_id, clients in state.acked_by.items()
        },
        "expected_by": {
            notice_id: sorted(clients)
            for notice_id, clients in state.expected_by.items()
            if len(clients) <= MAX_EXPECTED_SAVED
        },
        "held_by": {
            notice_id: list(clients)[:MAX_ACKED_SAVED]
            for notice_id, clients in state.held_by.items()
        },
        "held_pids": {
            notice_id: {
                client: {
                    "pid": h.pid,
                    "start": h.start,
                    "namespace": h.namespace,
                    "group": h.group,
                }
                for client, h in holders.items()
            }
            for notice_id, holders in state.held_pids.items()
        },
        "raised_clock": dict(state.raised_clock),
        "deadline_clock": dict(state.deadline_clock),
        "reported_clock": dict(state.reported_clock),
        "deadline_kind": dict(state.deadline_kind),
        "overdue": {notice_id: format_time(when) for notice_id, when in state.overdue.items()},
        "gone_before_ack": {
            notice_id: sorted(clients)[:MAX_EXPECTED_SAVED]
            for notice_id, clients in state.gone.items()
        },
    }
    if state.save_failed:
        payload["save_failed"] = {
            notice_id: dict(sorted(clients.items())[:MAX_EXPECTED_SAVED])
            for notice_id, clients in state.save_failed.items()
        }
    if state.acked_for is not None:
        payload["acked_for"] = {
            notice_id: action
            for notice_id, action in state.acked_for.items()
            if notice_id in state.acked_by
        }
    if state.received_by is not None:
        payload["received_by"] = {
            notice_id: sorted(clients)[:MAX_EXPECTED_SAVED]
            for notice_id, clients in state.received_by.items()
        }
    return json.dumps(payload, indent=1).encode()


__all__ = [
    "SEQ_FILE",
    "STATE_FILE",
    "AgentState",
    "another_boot",
    "boot_id",
    "encode_state",
    "load_seq_mark",
    "load_state",
    "read_small",
    "save_seq_mark",
    "save_state",
    "saved_notice",
    "saved_seq",
    "saved_this_boot",
    "set_aside",
    "write_atomic",
]
