"""The notices a watcher keeps in the state directory, read by another version of the agent.

`Report` gained a field before (`until`, in 5991706): every file a newer agent writes has it,
and an agent rolled back past it refused each saved report as an extra key. The DigitalOcean
reclaims were then gone for good (their mails are marked handled), and GCP's notices in force
lost their ids. A key the reader does not know is left out, and one report it cannot read
costs only that report.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from forewarn.protocol.fields import stable_id
from forewarn.protocol.timefmt import format_time
from forewarn.providers.boot import boot_id
from forewarn.providers.digitalocean.imap import FETCH_LIMIT
from forewarn.providers.digitalocean.seen import (
    KEEP_RAISED,
    MAX_ACTIVE_BYTES,
    MAX_MAILBOX_BYTES,
    ActiveReclaims,
    SeenMail,
)
from forewarn.providers.gcp.active import ActiveNotices
from forewarn.providers.persist import MAX_STATE_BYTES, read_state_object
from forewarn.providers.report import Report, saved_report
from hypothesis import given
from hypothesis import strategies as st

# Now, not a fixed day: a saved notice without a boot id is judged by the clock, and one
# noticed before this machine started is of an earlier boot (dropped). A fixed 01:00 failed
# two tests on every machine booted later that day.
NOW = datetime.now(timezone.utc).replace(microsecond=0)


def reclaim(number: int) -> Report:
    return Report(
        id=f"digitalocean/reclaim/{number}",
        action="drain",
        reason="reclaim",
        provider="digitalocean",
        deadline=NOW + timedelta(hours=2),
        noticed_at=NOW,
        detail={"subject": "Droplet reclaim"},
    )


def as_saved(report: Report, **newer: object) -> dict[str, object]:
    """`report` as the file holds it, with the keys a newer agent adds."""
    item: dict[str, object] = json.loads(report.model_dump_json())
    item.update(newer)
    return item


def test_a_digitalocean_reclaim_saved_by_a_newer_agent_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "digitalocean-active.json"
    first, second = reclaim(1), reclaim(2)
    path.write_text(json.dumps([as_saved(first, lead_seconds=7200), as_saved(second)]))
    assert ActiveReclaims(path).load(NOW) == [first, second]


def test_one_unreadable_reclaim_costs_only_itself(tmp_path: Path) -> None:
    path = tmp_path / "digitalocean-active.json"
    kept = reclaim(2)
    path.write_text(json.dumps([{"id": "", "action": "sideways"}, "text", as_saved(kept)]))
    assert ActiveReclaims(path).load(NOW) == [kept]


def test_a_reclaim_saved_before_until_is_read(tmp_path: Path) -> None:
    # The format of 51cdf3b (before `until`): what an upgraded agent finds.
    path = tmp_path / "digitalocean-active.json"
    older = as_saved(reclaim(1))
    del older["until"]
    path.write_text(json.dumps([older]))
    assert ActiveReclaims(path).load(NOW) == [reclaim(1)]


def test_a_gcp_notice_in_force_saved_by_a_newer_agent_keeps_its_id(tmp_path: Path) -> None:
    path = tmp_path / "gcp-notices.json"
    drain = Report(
        id="gcp/maintenance-event/1",
        action="drain",
        reason="host-maintenance",
        provider="gcp",
        deadline=NOW + timedelta(hours=1),
        noticed_at=NOW,
    )
    path.write_text(
        json.dumps({"maintenance-event": as_saved(drain, window_start=format_time(NOW))})
    )
    assert ActiveNotices(path).get("maintenance-event") == drain


def test_one_unreadable_gcp_notice_costs_only_itself(tmp_path: Path) -> None:
    path = tmp_path / "gcp-notices.json"
    preempted = Report(
        id="gcp/preempted/1",
        action="terminate",
        reason="preemption",
        provider="gcp",
        noticed_at=NOW,
    )
    path.write_text(json.dumps({"maintenance-event": [], "preempted": as_saved(preempted)}))
    assert ActiveNotices(path).notices == {"preempted": preempted}


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=20).filter(lambda key: key not in Report.model_fields),
        st.one_of(st.none(), st.integers(), st.text(max_size=20), st.lists(st.booleans())),
        max_size=5,
    )
)
def test_keys_a_newer_agent_adds_are_left_out(newer: dict[str, object]) -> None:
    report = reclaim(3)
    assert saved_report(as_saved(report, **newer)) == report


_ANY_VALUE = st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.lists(st.none())


@given(boot=_ANY_VALUE, droplet=_ANY_VALUE, identified=st.booleans())
def test_any_boot_or_droplet_saved_with_a_reclaim_loads(
    boot: object, droplet: object, identified: bool
) -> None:
    """The boot id and droplet saved beside each reclaim, whatever they hold: the reclaim
    stands, or waits to be confirmed this droplet's, or is another droplet's; never an
    error, and never another droplet's while this one's is not known."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "digitalocean-active.json"
        path.write_text(json.dumps([as_saved(reclaim(1), boot_id=boot, droplet=droplet)]))
        active = ActiveReclaims(path)
        active.identified, active.droplet_id = identified, "424242424" if identified else None
        loaded, held = active.load(NOW), active.of_another_boot(NOW)
        assert loaded in ([], [reclaim(1)]) and len(held) <= 1
        assert not (loaded and held)
        if not identified:
            assert loaded or held
        if held:
            assert held == [(reclaim(1), droplet)] and isinstance(boot, str)


@given(boot=_ANY_VALUE)
def test_any_boot_saved_with_a_gcp_notice_loads(boot: object) -> None:
    import tempfile

    now = datetime.now(timezone.utc).replace(microsecond=0)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "gcp-notices.json"
        drain = Report(
            id="gcp/maintenance-event/1",
            action="drain",
            reason="host-maintenance",
            provider="gcp",
            deadline=now + timedelta(hours=1),
            noticed_at=now,
        )
        path.write_text(json.dumps({"maintenance-event": as_saved(drain, boot_id=boot)}))
        # Seen now: by the clock this boot's, and by a boot id if it names one.
        another = isinstance(boot, str) and boot_id() is not None and boot != boot_id()
        assert ActiveNotices(path).get("maintenance-event") == (None if another else drain)


def _gcp_notices(path: Path) -> object:
    return ActiveNotices(path).notices


def _state_object(path: Path) -> object:
    return read_state_object(path, "aws")


@pytest.mark.parametrize("read", [_gcp_notices, _state_object], ids=["gcp", "shared"])
@pytest.mark.parametrize("kind", ["fifo", "too large", "link to a large file"])
def test_a_watchers_file_that_is_no_small_regular_file_is_passed_over(
    tmp_path: Path, read: Callable[[Path], object], kind: str
) -> None:
    """A watcher's own file that is a FIFO hung its watcher's start for good (GCP's
    `gcp-notices.json` and every file read through `read_state_object` were opened for a
    blocking read), and GCP's read one of any size whole. Each is now read as the agent reads
    state.json: not through a link, without blocking, a regular file of 64 KiB at most;
    anything else is logged and taken as none."""
    path = tmp_path / "gcp-notices.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        # A notice in force, in a file over the limit: read whole, it was restored.
        preempted = Report(
            id="gcp/preempted/1",
            action="terminate",
            reason="preemption",
            provider="gcp",
            noticed_at=datetime.now(timezone.utc),
        )
        saved = json.dumps({"preempted": as_saved(preempted, boot_id=boot_id())})
        big = tmp_path / "big.json" if kind.startswith("link") else path
        big.write_text(saved + " " * MAX_STATE_BYTES)
        if big != path:
            path.symlink_to(big)
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(read(path)), daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive() and kind == "fifo":
        # Let the blocked open go, so the failing test leaves no thread behind.
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(5)
        pytest.fail("the read of a FIFO blocked")
    assert result in ([{}], [None]), result


def _do_mailbox(path: Path) -> object:
    return SeenMail.load(path, "box-a").last_uid


def _do_active(path: Path) -> object:
    return ActiveReclaims(path).load(NOW)


def _largest_mailbox_file(path: Path) -> None:
    """The mailbox file at its largest: KEEP_RAISED ids, each also raised and applied ahead
    of a pass, at the largest UIDs IMAP has; and ten times as many raised and applied ahead
    before them in that pass (ids no longer kept in `raised`, which `load` drops)."""
    seen = SeenMail(path, "box-a", uidvalidity=2**32 - 1, last_uid=2**32 - 2)
    ids = [stable_id("digitalocean", "reclaim", str(n)) for n in range(KEEP_RAISED * 11)]
    seen.raised = ids[-KEEP_RAISED:]
    seen.ahead = dict.fromkeys(ids, 2**32 - 1)
    seen.replaced = dict.fromkeys(ids, 2**32 - 1)
    seen.save()


@pytest.mark.parametrize("read", [_do_mailbox, _do_active], ids=["mailbox", "active"])
@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_digitaloceans_files_that_are_no_regular_files_are_passed_over(
    tmp_path: Path, read: Callable[[Path], object], kind: str
) -> None:
    """DigitalOcean's mailbox and reclaim files were read with a blocking read_text: a FIFO
    in their place hung the watcher's start for good, and a link was followed. They are now
    read as every watcher's own file: a regular file, not through a link, without blocking."""
    path = tmp_path / ("mailbox.json" if read is _do_mailbox else "active.json")
    if kind == "fifo":
        os.mkfifo(path)
    else:
        target = tmp_path / "elsewhere.json"
        if read is _do_mailbox:
            _largest_mailbox_file(target)
        else:
            target.write_text(json.dumps([as_saved(reclaim(1))]))
        path.symlink_to(target)
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(read(path)), daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # let the blocked open go
        reader.join(5)
        pytest.fail("the read of a FIFO blocked")
    assert result in ([0], [[]]), result


def test_digitaloceans_largest_files_are_read_and_larger_ones_passed_over(
    tmp_path: Path,
) -> None:
    """The bounds fit what the watcher writes: its mailbox file at its largest, and reclaims
    whose subject is a whole mail (FETCH_LIMIT bytes, each escaped to six), are read back;
    a file over the bound is passed over as any other unreadable one."""
    mailbox = tmp_path / "mailbox.json"
    _largest_mailbox_file(mailbox)
    assert SeenMail.load(mailbox, "box-a").last_uid == 2**32 - 2
    active = tmp_path / "active.json"
    subject = "\x01" * FETCH_LIMIT
    long = [reclaim(n).model_copy(update={"detail": {"subject": subject}}) for n in (1, 2)]
    active.write_text(json.dumps([as_saved(r) for r in long], indent=1) + "\n")
    assert ActiveReclaims(active).load(NOW) == long
    for path, read in ((mailbox, _do_mailbox), (active, _do_active)):
        bound = MAX_MAILBOX_BYTES if path is mailbox else MAX_ACTIVE_BYTES
        with path.open("a") as grown:
            grown.write(" " * (bound - path.stat().st_size + 1))
        assert read(path) in (0, [])


_UID = st.integers(min_value=1, max_value=2**32 - 1)


@given(
    raised=st.lists(st.text(max_size=40), max_size=KEEP_RAISED, unique=True),
    ahead=st.dictionaries(st.text(max_size=40), _UID, max_size=20),
    replaced=st.dictionaries(st.text(max_size=40), _UID, max_size=20),
    last_uid=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_the_mailbox_file_reads_back_as_written(
    raised: list[str], ahead: dict[str, int], replaced: dict[str, int], last_uid: int
) -> None:
    """What the watcher writes, the next start reads: the ids raised, the last UID handled,
    and what was raised or applied ahead of the pass for the ids still kept."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "digitalocean-mailbox.json"
        # Ids raised ahead are in `raised` when raised; some fell out of it since.
        ahead = {**ahead, **dict.fromkeys(raised[:3], 2**32 - 1)}
        seen = SeenMail(path, "box-a", 7, last_uid, raised, ahead, replaced)
        seen.save()
        again = SeenMail.load(path, "box-a")
        assert (again.uidvalidity, again.last_uid, again.raised) == (7, last_uid, raised)
        for name in ("ahead", "replaced"):
            kept = {
                key: uid
                for key, uid in getattr(seen, name).items()
                if key in raised and uid > last_uid
            }
            assert getattr(again, name) == kept


@pytest.mark.parametrize("moment", ["2026-12-07T06:00:00", "9999-12-31T23:59:59-01:00"])
@pytest.mark.parametrize("field", ["deadline", "noticed_at", "until"])
def test_a_reclaim_with_a_time_no_agent_can_use_costs_only_itself(
    tmp_path: Path, moment: str, field: str
) -> None:
    """A hand edit's time without its UTC offset (or past year 9999 in UTC) was read as
    valid: the agent then failed comparing it with the clock, or publishing it."""
    path = tmp_path / "digitalocean-active.json"
    kept = reclaim(2)
    path.write_text(json.dumps([as_saved(reclaim(1), **{field: moment}), as_saved(kept)]))
    assert ActiveReclaims(path).load(NOW) == [kept]
