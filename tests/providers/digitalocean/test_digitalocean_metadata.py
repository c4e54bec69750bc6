"""Droplet metadata: the simulator, detection within a second, and the droplet's identity."""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import respx
from forewarn.providers.base import ParseError, PollHealth, WatcherContext
from forewarn.providers.digitalocean import watch
from forewarn.providers.digitalocean.seen import SeenMail
from forewarn.providers.digitalocean.settings import Settings
from forewarn.providers.digitalocean.simulate import make_simulator
from forewarn.providers.digitalocean.watch import (
    DigitalOceanWatcher,
    MetadataUnavailable,
    parse_droplet_id,
)
from forewarn.providers.simulator import SimServer
from hypothesis import given
from hypothesis import strategies as st


@pytest.fixture
def metadata() -> Iterator[SimServer]:
    with SimServer(make_simulator(droplet_id=3164444, hostname="gpu-b300-1")) as server:
        yield server


def watcher(tmp_path: Path, **settings: object) -> DigitalOceanWatcher:
    context = WatcherContext(tmp_path, tmp_path, PollHealth("digitalocean"))
    return DigitalOceanWatcher(Settings(**settings), context)


def test_the_simulator_serves_the_documented_paths(metadata: SimServer) -> None:
    with httpx.Client(base_url=metadata.url, trust_env=False) as client:
        assert client.get("/metadata/v1/id").text == "3164444"
        assert client.get("/metadata/v1/hostname").text == "gpu-b300-1"
        index = client.get("/metadata/v1/").text.splitlines()
        for entry in ("id", "hostname", "user-data", "region", "interfaces/", "tags/"):
            assert entry in index
        moved = client.get("/metadata/v1")
        assert (moved.status_code, moved.headers["location"]) == (301, "/metadata/v1/")
        moved = client.get("/metadata/v1/interfaces")
        assert (moved.status_code, moved.headers["location"]) == (301, "/metadata/v1/interfaces/")
        assert client.get("/metadata/v1/interfaces/public/0/ipv4/address").status_code == 404
        assert client.get("/metadata/v1/interfaces/public/0/mac").status_code == 200
        assert client.get("/metadata/v1/spot").status_code == 404
        assert client.get("/latest/meta-data/").status_code == 404
        whole = client.get("/metadata/v1.json").json()
        assert whole["droplet_id"] == 3164444 and whole["hostname"] == "gpu-b300-1"
        refused = client.post("/_sim/notices", json={"kind": "reclaim"})
        assert refused.status_code == 400 and "email" in refused.json()["error"]
        assert client.get("/_sim/state").json()["droplet"]["droplet_id"] == 3164444


async def test_detect_says_yes_to_droplet_metadata(metadata: SimServer, tmp_path: Path) -> None:
    probe = watcher(tmp_path, url=metadata.url)
    assert await probe.detect() is True
    droplet = await probe.identify()
    assert (droplet.id, droplet.name) == ("3164444", "gpu-b300-1")
    await probe.aclose()


async def test_detect_says_no_quickly_elsewhere(tmp_path: Path) -> None:
    probe = watcher(tmp_path, url="http://127.0.0.1:9")
    assert await probe.detect() is False
    await probe.aclose()
    # An AWS-like answer is not a droplet id.
    with respx.mock(base_url="http://127.0.0.1:1") as mock:
        mock.get("/metadata/v1/id").respond(200, text="<html>hello</html>")
        probe = watcher(tmp_path, url="http://127.0.0.1:1")
        assert await probe.detect() is False
        await probe.aclose()


async def test_detect_gives_up_within_a_second(tmp_path: Path) -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return httpx.Response(200, text="1")

    with respx.mock(base_url="http://127.0.0.1:1", assert_all_called=False) as mock:
        mock.get("/metadata/v1/id").mock(side_effect=slow)
        probe = watcher(tmp_path, url="http://127.0.0.1:1")
        started = time.monotonic()
        assert await probe.detect() is False
        assert time.monotonic() - started < 1.5
        await probe.aclose()


async def test_identity_from_settings_or_a_clear_error(tmp_path: Path) -> None:
    configured = watcher(tmp_path, url="http://127.0.0.1:9", droplet_id="77", droplet_name="n")
    droplet = await configured.identify()
    assert (droplet.id, droplet.name) == ("77", "n")
    await configured.aclose()
    partly = watcher(tmp_path, url="http://127.0.0.1:9", droplet_name="gpu-1")
    assert (await partly.identify()).name == "gpu-1"
    await partly.aclose()
    unknown = watcher(tmp_path, url="http://127.0.0.1:9")
    with pytest.raises(MetadataUnavailable, match=r"digitalocean\.droplet_id"):
        await unknown.identify()
    await unknown.aclose()


def test_parse_droplet_id() -> None:
    assert parse_droplet_id(200, "3164444\n") == "3164444"
    with pytest.raises(ParseError, match="HTTP 404"):
        parse_droplet_id(404, "")
    with pytest.raises(ParseError, match="not a droplet id"):
        parse_droplet_id(200, "i-0abc")


def test_seen_mail_state_survives_and_resets_when_it_must(tmp_path: Path) -> None:
    path = tmp_path / "state" / "seen.json"
    seen = SeenMail.load(path, "box-a")
    assert seen.begin(uidvalidity=7) == 0
    seen.handled(3)
    seen.handled(5, raised="digitalocean/reclaim/abc")
    again = SeenMail.load(path, "box-a")
    assert again.begin(7) == 5 and again.was_raised("digitalocean/reclaim/abc")
    # A new UIDVALIDITY restarts the UIDs but still knows what was raised.
    assert again.begin(8) == 0 and again.was_raised("digitalocean/reclaim/abc")
    # Another mailbox starts afresh.
    assert SeenMail.load(path, "box-b").begin(8) == 0
    assert [p.name for p in path.parent.iterdir()] == ["seen.json"]  # no temporary left
    path.write_text("{not json")
    assert SeenMail.load(path, "box-b").begin(8) == 0
    assert json.loads(path.read_text())["uidvalidity"] == 8


def test_a_state_file_nested_past_json_recursion_is_ignored_not_raised(tmp_path: Path) -> None:
    """json.loads raises RecursionError, not ValueError, for JSON nested a few thousand deep:
    a seen or active file of that shape crashed the watcher at every start."""
    from datetime import datetime, timezone

    from forewarn.providers.digitalocean.seen import ActiveReclaims

    nested = "[" * 100_000 + "]" * 100_000
    seen, active = tmp_path / "seen.json", tmp_path / "active.json"
    seen.write_text(nested)
    active.write_text(nested)
    assert SeenMail.load(seen, "box-a").begin(7) == 0
    assert ActiveReclaims(active).load(datetime.now(timezone.utc)) == []


class _Trickle:
    """A droplet metadata endpoint on loopback that answers with headers at once, then one
    byte of the body every 0.3 s (under the per-read timeout): a proxy or a metadata service
    in trouble. Each read then keeps within its timeout while the answer takes for ever."""

    def __init__(self) -> None:
        self.server: asyncio.AbstractServer | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
            while True:
                writer.write(b"4")
                await writer.drain()
                await asyncio.sleep(0.3)
        writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


async def test_a_trickling_metadata_answer_fails_within_seconds_not_at_the_stall_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The metadata requests at start-up were bounded per read only: an answer trickled a
    byte a second held the watcher, reading no mail, until the runner's stall bound (about
    54 min of a 2 h lead). Each request now has a deadline of its own: the watcher reports
    `metadata` and retries, or matches on what is configured (its 5 s shortened to 1 s)."""
    monkeypatch.setattr(watch, "METADATA_DEADLINE", 1.0)
    async with _Trickle() as url:
        unknown = watcher(tmp_path, url=url)
        started = time.monotonic()
        with pytest.raises(MetadataUnavailable, match=r"digitalocean\.droplet_id"):
            await asyncio.wait_for(unknown.identify(), 15)
        assert time.monotonic() - started < 3.0
        await unknown.aclose()
        partly = watcher(tmp_path, url=url, droplet_id="424242424")
        started = time.monotonic()
        droplet = await asyncio.wait_for(partly.identify(), 15)
        assert (droplet.id, droplet.name) == ("424242424", None)
        assert time.monotonic() - started < 3.0
        await partly.aclose()


def test_a_reclaim_raised_ahead_of_the_pass_is_kept_across_a_crash_mid_pass(
    tmp_path: Path,
) -> None:
    """A reclaim read ahead of a long pass (newer mail) moves no last_uid, so no mail of the
    pass is skipped; a crash mid-pass reads the pass again, and the older cancellation in it
    must still know that the reclaim came after it (it is kept in the file)."""
    path = tmp_path / "seen.json"
    seen = SeenMail.load(path, "box-a")
    seen.begin(7)
    seen.handled(3)
    seen.raised_ahead(90, "digitalocean/reclaim/new")
    again = SeenMail.load(path, "box-a")
    assert again.begin(7) == 3 and again.was_raised("digitalocean/reclaim/new")
    assert again.raised_after("digitalocean/reclaim/new", 40)
    assert not again.raised_after("digitalocean/reclaim/new", 95)
    again.handled(90)  # read in its place: no longer ahead
    assert not again.raised_after("digitalocean/reclaim/new", 40)
    again.raised_ahead(120, "digitalocean/reclaim/newer")
    assert again.begin(8) == 0 and not again.raised_after("digitalocean/reclaim/newer", 1)


def test_a_cancellation_applied_ahead_of_the_pass_is_kept_across_a_crash_mid_pass(
    tmp_path: Path,
) -> None:
    """A cancellation applied ahead of a long pass takes the place of the reclaims in older
    mail still to be read; a crash mid-pass reads them again, and they must still raise
    nothing (it is kept in the file, and dropped once the pass reaches its mail)."""
    path = tmp_path / "seen.json"
    seen = SeenMail.load(path, "box-a")
    seen.begin(7)
    seen.handled(3)
    seen.replaced_ahead(90, "digitalocean/cancel/new")
    again = SeenMail.load(path, "box-a")
    assert again.begin(7) == 3 and again.was_raised("digitalocean/cancel/new")
    assert again.superseded(40) == 90 and again.superseded(90) is None
    again.replaced_ahead(95, "digitalocean/reclaim/moved")
    assert again.superseded(40) == 95 and again.superseded(92) == 95
    again.handled(90)
    assert again.superseded(40) == 95 and again.replaced == {"digitalocean/reclaim/moved": 95}
    again.handled(95)
    assert again.superseded(40) is None
    again.replaced_ahead(120, "digitalocean/cancel/newer")
    assert again.begin(8) == 0 and again.superseded(1) is None


@given(
    ahead=st.recursive(st.none() | st.integers() | st.text(max_size=5), st.lists, max_leaves=6)
    | st.dictionaries(
        st.text(max_size=5), st.integers() | st.booleans() | st.text(max_size=3) | st.none()
    ),
    key=st.sampled_from(["ahead", "replaced"]),
)
def test_any_ahead_or_replaced_value_in_the_seen_file_loads_without_error(
    ahead: object, key: str
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "seen.json"
        raised = list(ahead) if isinstance(ahead, dict) else []
        path.write_text(
            json.dumps(
                {
                    "mailbox": "box-a",
                    "uidvalidity": 7,
                    "last_uid": 0 if isinstance(ahead, dict) and len(ahead) % 2 else 5,
                    "raised": raised,
                    key: ahead,
                }
            )
        )
        seen = SeenMail.load(path, "box-a")
        last = seen.begin(7)
        held = seen.ahead if key == "ahead" else seen.replaced
        assert all(type(uid) is int and uid > last for uid in held.values())
        assert set(held) <= set(raised)
        assert seen.superseded(last) is None or seen.superseded(last) in held.values()
