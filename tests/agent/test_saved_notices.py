"""The notices the agent keeps in its state directory (state.json, webhook-pending.json), read
by another version of the agent.

A newer agent's file may hold keys this one does not know, top-level (ignored already) and in
a saved notice (a rollback past a new field): the saved notice was dropped as 'Extra inputs
are not permitted', and a manual notice with it, which nothing raises again. The client
library reads a notice with an unknown key, leaving the key out; the agent reads its own saved
notices the same way.
"""

from __future__ import annotations

import json
import logging
import tempfile
from datetime import timezone
from pathlib import Path

import pytest
from forewarn.agent.notifications.pending import PendingFile, decode_pending, encode_pending
from forewarn.agent.protocol import Notice, client_id_problem
from forewarn.agent.state import (
    STATE_VERSION,
    AgentState,
    _clock_readings,
    encode_state,
    load_state,
    saved_notice,
)
from forewarn.protocol.timefmt import format_time, parse_time
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from support import AgentProcess, agent_env, local_notice


def sent(seq: int, action: str) -> Notice:
    """A manual notice at the wire's millisecond precision, as the files hold it."""
    notice: Notice = local_notice(seq, action)
    return Notice.model_validate_json(notice.model_dump_json())


def with_newer_keys(notice: Notice, /, **newer: object) -> dict[str, object]:
    item: dict[str, object] = json.loads(notice.model_dump_json())
    item.update(newer)
    return item


def test_a_manual_notice_saved_by_a_newer_agent_is_kept(tmp_path: Path) -> None:
    manual, provider = sent(4, "drain"), sent(5, "terminate")
    saved = json.loads(encode_state(AgentState(seq=5, manual=[manual], provider=[provider])))
    saved["manual"] = [with_newer_keys(manual, lead_seconds=7200)]
    saved["provider"] = [with_newer_keys(provider, source={"kind": "imds"})]
    saved["holds"] = {"local/4": 2}  # a newer top-level key
    path = tmp_path / "state.json"
    path.write_text(json.dumps(saved))
    state = load_state(path)
    assert (state.seq, state.manual, state.provider) == (5, [manual], [provider])
    assert path.exists()  # read, not set aside


def test_a_webhook_notice_saved_by_a_newer_agent_is_delivered(tmp_path: Path) -> None:
    waiting = sent(7, "terminate")
    path = tmp_path / "webhook-pending.json"
    saved = json.loads(encode_pending([waiting]))
    saved["notices"] = [with_newer_keys(waiting, attempts=3)]
    path.write_text(json.dumps(saved))
    assert PendingFile(path, list).load() == [waiting]


def test_a_notice_that_is_no_notice_is_still_left_out() -> None:
    notices, problems = decode_pending(
        json.dumps({"version": 1, "notices": [{"id": "x", "extra": 1}]}).encode()
    )
    assert notices == [] and len(problems) == 1


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=20).filter(lambda key: key not in Notice.model_fields),
        st.one_of(st.none(), st.integers(), st.text(max_size=20), st.lists(st.booleans())),
        max_size=5,
    )
)
def test_keys_a_newer_agent_adds_to_a_notice_are_left_out(newer: dict[str, object]) -> None:
    notice = sent(3, "drain")
    assert saved_notice(with_newer_keys(notice, **newer)) == notice


_READINGS = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=4),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.integers(), max_size=2),
)


@given(raw=st.one_of(_READINGS, st.dictionaries(st.text(max_size=6), _READINGS, max_size=4)))
def test_a_state_files_boot_clock_readings_are_taken_only_as_seconds(raw: object) -> None:
    """`raised_clock` as anything may have left it (a hand edit, another version): never an
    error, and a reading is taken only as a finite, non-negative count of seconds."""
    readings = _clock_readings(raw)
    for notice_id, seconds in readings.items():
        assert isinstance(raw, dict) and notice_id in raw
        assert type(seconds) is float and 0 <= seconds < float("inf")


def test_a_state_files_boot_clock_readings_read_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(encode_state(AgentState(raised_clock={"local/flag/1": 1234.5})))
    assert load_state(path).raised_clock == {"local/flag/1": 1234.5}
    old = json.loads(path.read_text())
    del old["raised_clock"]  # an agent from before the readings were kept
    path.write_text(json.dumps(old))
    assert load_state(path).raised_clock == {}


@pytest.mark.parametrize("key", ["manual", "provider"])
@pytest.mark.parametrize("shape", ["one notice", "text"])
def test_a_notice_list_edited_into_no_list_is_reported_not_dropped_in_silence(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, key: str, shape: str
) -> None:
    """A hand edit left `"manual": {...}` (one notice, its list's brackets removed) or a
    string: the agent started with no such notice and said nothing, and its next save wrote
    the file over, so a manual drain nothing raises again was gone without a word. It is
    reported, naming the key, as a notice that does not validate is."""
    notice = sent(4, "drain")
    saved = json.loads(encode_state(AgentState(seq=5, **{key: [notice]})))  # type: ignore[arg-type]
    saved[key] = saved[key][0] if shape == "one notice" else "local/4"
    path = tmp_path / "state.json"
    path.write_text(json.dumps(saved))
    with caplog.at_level(logging.ERROR, logger="forewarn.agent"):
        state = load_state(path)
    assert getattr(state, key) == []
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(f"{key} is not a list" in message for message in errors), errors


def test_a_state_files_duration_deadlines_read_back_as_written(tmp_path: Path) -> None:
    """`forewarn notify --deadline 15m`'s deadline on the boot clock: a restarted agent that
    did not read it back held the deadline at the wall time it had come to."""
    path = tmp_path / "state.json"
    path.write_bytes(encode_state(AgentState(deadline_clock={"local/manual/1": 900.5})))
    assert load_state(path).deadline_clock == {"local/manual/1": 900.5}
    old = json.loads(path.read_text())
    del old["deadline_clock"]  # a file of an agent before it
    path.write_text(json.dumps(old))
    assert load_state(path).deadline_clock == {}


def test_a_state_files_reported_deadlines_read_back_as_written(tmp_path: Path) -> None:
    """The provider notices' deadlines on the boot clock as last reported: a restarted agent
    that did not read them back judged a restored drain by the wall clock alone, and after a
    step forward sent it as terminate until its watcher answered."""
    path = tmp_path / "state.json"
    saved = {"gcp/maintenance-event/1": 8600.5}
    path.write_bytes(encode_state(AgentState(reported_clock=saved)))
    assert load_state(path).reported_clock == saved
    old = json.loads(path.read_text())
    del old["reported_clock"]  # a file of an agent before it
    path.write_text(json.dumps(old))
    assert load_state(path).reported_clock == {}


def test_a_state_files_receivers_read_back_as_written(tmp_path: Path) -> None:
    """The clients that received each notice not flushed: read back, a deadline that passed
    while the agent was down names them; absent (a file of an agent before them), None, which
    the agent says it cannot name."""
    path = tmp_path / "state.json"
    saved = {"local/manual/1": ["trainer", "eval"]}
    path.write_bytes(encode_state(AgentState(received_by=saved)))
    assert load_state(path).received_by == {"local/manual/1": ["eval", "trainer"]}
    old = json.loads(path.read_text())
    del old["received_by"]
    path.write_text(json.dumps(old))
    assert load_state(path).received_by is None


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)


@given(raw=_JSON)
def test_a_state_files_receivers_are_taken_only_as_client_ids(raw: object) -> None:
    """`received_by` as anything may have left it (a hand edit, another version): never an
    error at the start; only lists of ids an ack could name are taken."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "state.json"
        path.write_text(json.dumps({"version": STATE_VERSION, "seq": 1, "received_by": raw}))
        state = load_state(path)
    assert state.received_by is not None
    for notice_id, clients in state.received_by.items():
        assert isinstance(raw, dict) and notice_id in raw
        assert all(
            isinstance(client, str) and client_id_problem(client) is None for client in clients
        )


def test_a_state_files_overdue_deadlines_read_back_as_written(tmp_path: Path) -> None:
    """The deadline each notice was told past at: read back, a restarted agent does not tell
    it again; absent (a file of an agent before them), none, and each is told as before."""
    path = tmp_path / "state.json"
    told = {"local/manual/1": parse_time("2026-12-06T08:00:00.250Z")}
    path.write_bytes(encode_state(AgentState(overdue=told)))
    assert load_state(path).overdue == told
    old = json.loads(path.read_text())
    del old["overdue"]
    path.write_text(json.dumps(old))
    assert load_state(path).overdue == {}


_SAVED_TIMES = st.datetimes(timezones=st.just(timezone.utc)).map(format_time)


@given(raw=_JSON | st.dictionaries(st.text(max_size=6), _SAVED_TIMES | _JSON, max_size=4))
def test_a_state_files_overdue_deadlines_are_taken_only_as_times(raw: object) -> None:
    """`overdue` as anything may have left it (a hand edit, another version): never an error
    at the start; only RFC 3339 times are taken, by the ids they were saved under."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "state.json"
        path.write_text(json.dumps({"version": STATE_VERSION, "seq": 1, "overdue": raw}))
        state = load_state(path)
    for notice_id, deadline in state.overdue.items():
        assert isinstance(raw, dict) and notice_id in raw
        assert deadline == parse_time(raw[notice_id])


def test_a_state_files_clients_gone_before_their_ack_read_back_as_written(tmp_path: Path) -> None:
    """The clients that left each terminate before their ack: read back, a restarted agent
    still names them as gone; absent (a file of an agent before them), none."""
    path = tmp_path / "state.json"
    path.write_bytes(encode_state(AgentState(gone={"local/manual/1": ["trainer", "eval"]})))
    assert load_state(path).gone == {"local/manual/1": ["eval", "trainer"]}
    old = json.loads(path.read_text())
    del old["gone_before_ack"]
    path.write_text(json.dumps(old))
    assert load_state(path).gone == {}


@given(raw=_JSON)
def test_a_state_files_clients_gone_are_taken_only_as_client_ids(raw: object) -> None:
    """`gone_before_ack` as anything may have left it: never an error at the start; only
    lists of ids an ack could name are taken."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "state.json"
        path.write_text(json.dumps({"version": STATE_VERSION, "seq": 1, "gone_before_ack": raw}))
        state = load_state(path)
    for notice_id, clients in state.gone.items():
        assert isinstance(raw, dict) and notice_id in raw
        assert all(
            isinstance(client, str) and client_id_problem(client) is None for client in clients
        )


# Times a hand edit leaves in a saved notice that no agent writes: without their UTC offset
# (read as naive datetimes), or one whose UTC is past what a date holds.
_UNUSABLE_TIMES = ["2026-12-07T06:00:00", "9999-12-31T23:59:59-01:00", "0001-01-01T00:30:00+01:00"]


@pytest.mark.parametrize("field", ["deadline", "noticed_at", "sent_at"])
@pytest.mark.parametrize("moment", _UNUSABLE_TIMES)
def test_a_saved_notice_with_a_time_no_agent_can_use_is_dropped_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, field: str, moment: str
) -> None:
    """Taken as valid, the first stopped every start of the agent ("unexpected TypeError:
    can't subtract offset-naive and offset-aware datetimes") and the others at its first
    publish (format_time's OverflowError): each restart the same, no notice ever sent again.
    The notice is dropped and reported, as any that does not validate; the others are kept."""
    bad, good = sent(4, "drain"), sent(5, "terminate")
    saved = json.loads(encode_state(AgentState(seq=5, manual=[bad, good])))
    saved["manual"][0][field] = moment
    path = tmp_path / "state.json"
    path.write_text(json.dumps(saved))
    with caplog.at_level(logging.ERROR, logger="forewarn.agent"):
        state = load_state(path)
    assert state.manual == [good]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and f"notice {bad.id!r} dropped: {field}: " in errors[0], errors
    assert "\n" not in errors[0], errors


_TIME_TEXTS = st.one_of(
    st.sampled_from(_UNUSABLE_TIMES),
    st.datetimes(timezones=st.none() | st.timezones()).map(lambda moment: moment.isoformat()),
    st.integers(-(2**40), 2**40),
    st.text(max_size=30),
)


@given(deadline=_TIME_TEXTS, noticed=_TIME_TEXTS)
def test_a_saved_notice_is_refused_or_one_the_agent_can_send_and_save(
    deadline: object, noticed: object
) -> None:
    """Whatever times a saved notice holds: a ValidationError, or a notice whose times are
    aware and that the agent can publish and write back."""
    item = json.loads(sent(4, "drain").model_dump_json())
    item.update(deadline=deadline, noticed_at=noticed)
    try:
        notice = saved_notice(item)
    except ValidationError:
        return
    for moment in (notice.deadline, notice.noticed_at, notice.sent_at):
        assert moment is not None and moment.utcoffset() is not None
        format_time(moment)
    text = notice.model_dump_json()  # at the wire's millisecond precision
    assert saved_notice(json.loads(text)).model_dump_json() == text
    encode_state(AgentState(manual=[notice]))


def test_an_agent_whose_state_holds_a_time_without_its_offset_starts_and_restores_the_rest(
    tmp_path: Path,
) -> None:
    """The hand edit as the agent met it: it exited 1 at every start, saying only "unexpected
    TypeError", so a unit restarting it never brought it back."""
    env = agent_env(tmp_path)
    bad, good = sent(4, "drain"), sent(5, "drain")
    saved = json.loads(encode_state(AgentState(seq=5, manual=[bad, good])))
    saved["manual"][0]["deadline"] = "2026-12-07T06:00:00"
    (Path(env["FOREWARN_STATE_DIR"]) / "state.json").write_text(json.dumps(saved))
    with AgentProcess(tmp_path, env=env) as agent:
        active = [notice["id"] for notice in agent.control({"op": "status"})["active"]]
        assert active == [good.id], active
    assert f"notice {bad.id!r} dropped" in agent.output(), agent.output()
