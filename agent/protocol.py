"""The agent's pydantic models of protocol v1, pinned to `forewarn.protocol` by a test.

Events travel on the XPUB socket as two frames, a topic (`notice` or `heartbeat`) and UTF-8
JSON. Control requests travel on the REP socket as JSON, one request per message.
This module must stay importable without httpx or zmq: the in-process client uses it.
"""

from __future__ import annotations

import contextlib
import json
import re
from datetime import datetime
from typing import Annotated, Any, Literal

from forewarn.protocol import jsontext
from forewarn.protocol.fields import ACTIONS, REASONS, Action, Reason, stable_id
from forewarn.protocol.timefmt import (
    format_time,
    parse_deadline,
    parse_duration,
    parse_time,
    utcnow,
)
from forewarn.protocol.wire import (
    MAX_CLIENT_ID_BYTES,
    MAX_REPLAY_TOKEN_LENGTH,
    MAX_TOKEN_BYTES,
    PROTOCOL_VERSION,
    TOKEN_FIELD,
    TOPIC_CLIENT_PREFIX,
    TOPIC_HEARTBEAT,
    TOPIC_NOTICE,
)
from forewarn.providers.report import Report, Timestamp, bounded_detail
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from .limits import (
    MANUAL_ID_PATTERN,
    MAX_ACK_NOTE_LENGTH,
    MAX_DEADLINE_AHEAD,
    MAX_FLUSH_SECONDS,
    MAX_ID_LENGTH,
    MAX_NOTE_LENGTH,
)


def _wire_time(value: Any) -> Any:
    """Times in requests are RFC 3339 strings: a JSON number is refused, not read as seconds
    since 1970."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise ValueError("expected an RFC 3339 time such as 2026-11-30T03:12:00Z")
    try:
        return parse_time(value)
    except OverflowError:
        raise ValueError(f"not a usable time: {value[:40]!r}") from None


WireTime = Annotated[Timestamp, BeforeValidator(_wire_time)]


def _exact_version(value: Any) -> Any:
    """Lax `Literal[1]` takes `true` and `1.0` (both equal 1 in Python) for protocol v1."""
    if type(value) is not int:
        raise ValueError(f"must be the integer {PROTOCOL_VERSION}, not a {type(value).__name__}")
    return value


Version = Annotated[Literal[1], BeforeValidator(_exact_version)]
# JSON Schema cannot refuse `1.0` here: its data model has one number 1, of which `1.0` is a
# spelling, and "integer" is any number without a fraction. The readers can, and do.
VERSION_DESCRIPTION = (
    "The protocol version: the JSON integer 1, written `1`. forewarn's readers (the Python "
    "client, forewarn watch, the C subscriber) drop a message whose v is anything else, "
    "`1.0` included, which JSON Schema validators take for the same number as `1`."
)

EVENT_FIELDS_DESCRIPTION = (
    "Fields not listed here are allowed, and readers ignore them: a field added to an event "
    "within protocol v1 is optional, so a reader older than the agent reads what it knows. "
    "forewarn's readers (the Python client, forewarn watch, the C subscriber) do; a reader "
    "that refused them would drop every message of a newer agent. The agent itself sends "
    "only the fields listed in the schema of its version."
)

REQUEST_FIELDS_DESCRIPTION = (
    "Fields not listed here are ignored (the agent logs each name once): a field added to a "
    "request within protocol v1 is optional, so a client newer than the agent is served with "
    "what the agent knows. Refused: `v` (a request carrying a protocol version is of a later "
    "one) and a name that looks like a misspelling of a listed field (`outcom`)."
)

# Fields of a request that the agent writes into its log lines: no control characters, so a
# request cannot forge a log line with a newline or send a terminal escape to whoever reads
# the log.
ONE_LINE = r"^[^\x00-\x1f\x7f]*$"
_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f]")


def _one_line(value: str) -> str:
    if _CONTROL_CHARACTER.search(value):
        raise ValueError("must be one line of text, without control characters")
    return value


_ONE_LINE_SCHEMA = Field(json_schema_extra={"pattern": ONE_LINE})
OneLine = Annotated[
    str, StringConstraints(max_length=200), AfterValidator(_one_line), _ONE_LINE_SCHEMA
]
OneLineNote = Annotated[
    str,
    StringConstraints(max_length=MAX_ACK_NOTE_LENGTH),
    AfterValidator(_one_line),
    _ONE_LINE_SCHEMA,
]


def _client_bytes(value: str) -> str:
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_CLIENT_ID_BYTES:
        raise ValueError(f"longer than {MAX_CLIENT_ID_BYTES} bytes in UTF-8 ({size})")
    return value


# An acking client's id: named in every heartbeat's `acked_by`, so bounded in bytes as well
# (`forewarn.protocol.wire.client_id_problem`, which a client checks).
ClientId = Annotated[OneLine, AfterValidator(_client_bytes)]


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Notice(_Message):
    """A normalized notice as published on the `notice` topic."""

    v: Version = 1
    id: str
    seq: int = Field(ge=0)
    action: Action
    reason: Reason
    provider: str
    deadline: Timestamp | None = None
    noticed_at: Timestamp
    sent_at: Timestamp
    detail: dict[str, Any] = Field(default_factory=dict)

    # JSON may escape half of a UTF-16 pair ("\ud83d", an emoji cut short): Python reads it as
    # a string no UTF-8 holds, and the publish (and the state file's save) raised. From a
    # provider's body or a state file, a notice with one was never sent, or stopped the agent.
    @field_validator("id", "provider")
    @classmethod
    def _utf8_text(cls, value: str) -> str:
        if not _encodable(value):
            raise ValueError("not UTF-8 text (a lone UTF-16 surrogate)")
        return value

    @field_validator("detail")
    @classmethod
    def _utf8_detail(cls, value: dict[str, Any]) -> dict[str, Any]:
        # Bounded first: a detail nested past what pydantic serializes was never sent.
        replaced: dict[str, Any] = _replace_surrogates(bounded_detail(value))
        return replaced


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _replace_surrogates(value: Any) -> Any:
    """`value` with each lone UTF-16 surrogate in its strings (keys too) made U+FFFD."""
    if isinstance(value, str):
        if _encodable(value):
            return value
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if isinstance(value, dict):
        return {_replace_surrogates(key): _replace_surrogates(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_replace_surrogates(item) for item in value)
    return value


class Heartbeat(_Message):
    """Sent every second on the `heartbeat` topic, so silence can be told from death."""

    v: Version = 1
    seq: int = Field(ge=0)
    agent: str
    version: str
    providers: list[str]
    active: list[str]
    sent_at: Timestamp
    # Active notices that some client has acked a saved flush for: a job that starts while
    # a terminate is in force can tell one already acted on from one nobody handled yet.
    acked: list[str] = Field(default_factory=list)
    # The agent's exit margin in seconds (its floor, or twice the slowest flush reported): a
    # job that inherits a terminate an earlier client acted on saves and exits at least this
    # long before its deadline, as the agent escalates drains this long before theirs.
    exit_margin: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    # Which clients acked each active notice (the `client` of their acks; at most
    # ACKED_BY_LISTED each, sorted): a `wait --client ID` loop passes by only a drain it
    # acked itself, not one another client saved for while it was saving for the one before.
    acked_by: dict[str, list[str]] = Field(default_factory=dict)
    # The tokens of the `replay/<token>` subscriptions this heartbeat's replay answers (empty on
    # a periodic one): a subscriber that listed its token knows that the notices this heartbeat
    # lists follow it, and that nothing else of what was active when it joined is to come. A
    # periodic heartbeat with nothing active was the replay of nothing to it, and it took a
    # notice raised a moment later, then its late replay, for two.
    replay_for: list[str] = Field(
        default_factory=list,
        description=(
            "The tokens of the `replay/<token>` subscriptions whose replay this heartbeat "
            "starts; empty on the heartbeats sent every second. A subscriber that also "
            "subscribes to `replay/<token>` (after `notice`; a token is 1 to "
            f"{MAX_REPLAY_TOKEN_LENGTH} ASCII letters, digits, `-`, `_` or `.`, of its own) "
            "knows, at the heartbeat listing "
            "its token, that the agent has read its subscriptions and that the notices this "
            "heartbeat's `active` lists follow, each with the next `seq`: the replay of what "
            "was in force when it joined. Nothing is published on that topic. An agent "
            "without this field in its heartbeats never answers so."
        ),
    )
    takes: list[str] = Field(
        default_factory=list,
        description=(
            "Request fields this agent takes that an agent before them did not, as "
            "`request.field`: `ack.action` (the action the client saved for; the agent then "
            "counts a drain's save for no terminate). A client sends such a field only to an "
            "agent that lists it; an agent without this field in its heartbeats takes none."
        ),
    )


# Control requests (REQ → REP).


class StatusRequest(_Message):
    op: Literal["status"]


class NotifyRequest(_Message):
    op: Literal["notify"]
    action: Literal["drain", "terminate"]
    reason: Reason = "manual"
    deadline: WireTime | None = None
    # A deadline given as a duration (`forewarn notify --deadline 15m`): seconds from this
    # request. The agent keeps it on the boot clock, so that a step of the wall clock (NTP's
    # first sync) moves the deadline with it; a `deadline` beside it, for agents older than
    # this field, is then not used.
    deadline_in: float | None = Field(
        default=None, gt=0, le=MAX_DEADLINE_AHEAD.total_seconds(), allow_inf_nan=False
    )
    note: str | None = Field(default=None, max_length=MAX_NOTE_LENGTH)
    # The pattern is for the schema: the agent refuses any other id naming the rule it breaks
    # (`id_problem`); without it the schema took "drill-1", which the agent refuses.
    id: Annotated[str, Field(json_schema_extra={"pattern": MANUAL_ID_PATTERN})] | None = Field(
        default=None, min_length=1, max_length=MAX_ID_LENGTH
    )

    @field_validator("deadline_in", mode="before")
    @classmethod
    def _json_number(cls, value: Any) -> Any:
        """A JSON number or null, as the schema says (lax, `true` was a second, "900" 900)."""
        return _json_number(value)


class ClearRequest(_Message):
    op: Literal["clear"]
    # Without an id every manual notice is withdrawn.
    id: OneLine | None = None


NUMBERS = (
    "step",
    "flush_seconds",
    "stall_seconds",
    "durable_seconds",
    "restore_seconds",
    "steps_lost",
)


class AckRequest(_Message):
    op: Literal["ack"]
    notice_id: OneLine | None = None
    client: ClientId | None = None
    step: int | None = Field(default=None, ge=0, le=2**63 - 1)
    # Bounded: the slowest flush sizes the exit margin, so an absurd value would turn every
    # drain into an immediate terminate (or, infinite, stop escalation altogether).
    flush_seconds: float | None = Field(
        default=None, ge=0, le=MAX_FLUSH_SECONDS, allow_inf_nan=False
    )
    outcome: Literal["saved", "failed", "resumed"] = "saved"
    # The action the client saved for (the notice's `action` when its save began, or when it
    # took the save for that action's): a drain's save, acked after the agent sent the notice
    # as terminate, is no terminate's ack (the job goes on and saves again for it). Sent only
    # to an agent whose heartbeat or status lists `ack.action` in `takes`; without it the ack
    # counts for the notice's action as it is when the ack arrives.
    action: Literal["drain", "terminate"] | None = Field(
        default=None,
        description=(
            "The action the client saved for: a `drain` ack of a notice the agent sends as "
            "terminate now counts for no terminate. Without it the ack counts for the "
            "notice's action when it arrives. Sent only to an agent whose `takes` lists "
            "`ack.action`."
        ),
    )
    # A background save (issue 20) reports apart what training waited (the snapshot) and the
    # time until the checkpoint was durable (LATEST moved); `flush_seconds` is then the
    # durable time, the figure the exit margin needs. An upload may outlast an hour.
    stall_seconds: float | None = Field(
        default=None, ge=0, le=MAX_FLUSH_SECONDS, allow_inf_nan=False
    )
    durable_seconds: float | None = Field(default=None, ge=0, le=86400, allow_inf_nan=False)
    # The final save of a terminate with a background save in flight: what the client chose
    # for that save and why (the figures it compared).
    choice: Literal["waited", "cancelled", "nothing in flight"] | None = None
    note: OneLineNote | None = None
    # For `resumed`: how long the restore took and how many steps were lost.
    restore_seconds: float | None = Field(default=None, ge=0, le=86400, allow_inf_nan=False)
    steps_lost: int | None = Field(default=None, ge=0, le=2**63 - 1)

    @field_validator(*NUMBERS, mode="before")
    @classmethod
    def _json_number(cls, value: Any) -> Any:
        """A JSON number or null, as the schema says: pydantic's lax mode took `true` as step
        1 and the string "4.2" as a flush of 4.2 s."""
        return _json_number(value)


def _json_number(value: Any) -> Any:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ValueError(f"expected a JSON number, got {json.dumps(value, default=repr)[:40]}")
    return value


class HoldRequest(_Message):
    """A job that is no subscriber (a shell job's `forewarn wait --client ID`, which ends as
    it returns the notice) received `notice_id` and will ack it as `client`: the notice counts
    as flushed by every client only once that client has acked it too, as for a subscriber
    that received it. Without it, the first shell job's ack released the notice (the flag
    file removed, Azure approving early) while a second one was still saving."""

    op: Literal["hold"]
    notice_id: OneLine
    client: ClientId
    # The process that will ack (`wait --pid`, the loop's shell): the agent lets go of the hold
    # once it is gone, and every process of its group (the save it started), where it can
    # tell (the same pid namespace; the start time tells a pid used again). Without them, the
    # hold lasts until the ack or the notice's retirement.
    pid: int | None = Field(default=None, ge=1, le=2**31 - 1)
    pid_start: int | None = Field(default=None, ge=0, le=2**63 - 1)
    pid_namespace: OneLine | None = None
    pgid: int | None = Field(default=None, ge=1, le=2**31 - 1)  # its process group


def client_id_problem(client: str) -> str | None:
    """Why an ack could never name `client` (a `client/<id>` subscription's id), or None."""
    if not client:
        return "empty"
    try:
        AckRequest(op="ack", client=client)
    except ValidationError as error:
        return "; ".join(str(problem["msg"]) for problem in error.errors())
    return None


ControlRequest = Annotated[
    StatusRequest | NotifyRequest | ClearRequest | AckRequest | HoldRequest,
    Field(discriminator="op"),
]
CONTROL_REQUEST: TypeAdapter[ControlRequest] = TypeAdapter(ControlRequest)


class AgentInfo(_Message):
    agent: str
    version: str
    pid: int
    providers: list[str]
    events: str
    control: str
    started_at: Timestamp
    seq: int
    subscribers: int
    # The agent's own standing problems, by kind (its state file cannot be written).
    conditions: dict[str, str] = Field(default_factory=dict)
    # As the heartbeat's `takes`: the request fields this agent takes that older ones did not
    # (`forewarn ack --action` sends `action` only to an agent listing `ack.action`).
    takes: list[str] = Field(default_factory=list)


class ProviderHealth(_Message):
    """One watcher as `forewarn status` shows it: `healthy` (its last poll succeeded),
    `degraded` (it failed; `last_error` says how) or `waiting` (no answer yet)."""

    name: str
    state: Literal["healthy", "degraded", "waiting"]
    last_success: Timestamp | None = None
    last_error: str | None = None  # the error's kind (`connect`, `http-500`)
    # What the last error said (one line, at most 300 characters): what failed, and where
    # the watcher knows it, what to do. None when healthy, and from an agent before it.
    last_error_message: str | None = None
    polls: int = 0
    errors: int = 0
    # Standing problems that hold until the watcher resolves them, by kind: a state file it
    # cannot write, Azure's VM name it cannot read. A poll that succeeds does not end them.
    conditions: dict[str, str] = Field(default_factory=dict)


class NotifierStatus(_Message):
    """What a notifier (`webhook`, `kubernetes`) did since the agent started: the webhook
    counts notices, the Kubernetes notifier requests (Events, cordons) and dropped notices."""

    delivered: int
    failed: int  # given up on: after the retries, or at an answer not retried
    dropped: int  # past the queue
    pending: int  # not delivered yet: waiting, or being delivered or retried


class StatusReply(_Message):
    ok: Literal[True] = True
    agent: AgentInfo
    active: list[Notice]
    health: list[ProviderHealth] = Field(default_factory=list)
    # By name; only the notifiers configured.
    notifiers: dict[str, NotifierStatus] = Field(default_factory=dict)
    # Each long-running part and whether it runs, as /healthz shows them: `forewarn status`
    # exits 1 when one is dead, as /healthz answers 503.
    parts: dict[str, bool] = Field(default_factory=dict)
    # Which clients acked each active notice, as in the heartbeat.
    acked_by: dict[str, list[str]] = Field(default_factory=dict)
    # The clients each active notice is held for (`hold`, `forewarn wait --client`) that have
    # not acked it: it is not flushed until they do. Each with the process the agent watches
    # for it (the hold goes once that is gone), null when none is watched.
    held_for: dict[str, dict[str, int | None]] = Field(default_factory=dict)
    # The notices that ended lately (cleared, withdrawn, retired; the last 64 since the agent
    # started), oldest first: `forewarn ack` of one is no mistyped id.
    ended: list[str] = Field(default_factory=list)
    # When each active notice was raised, where its `noticed_at` is not that (a notice changed
    # or escalated since carries the time of that report): `forewarn ack --client ID
    # --flush-seconds` tells by it whether a save began before the notice.
    raised: dict[str, Timestamp] = Field(default_factory=dict)
    # Seconds since each active notice was raised, by a clock no step of the wall clock
    # moves (none for a notice restored from an earlier boot): `forewarn ack --client ID
    # --flush-seconds` tells by it, where it can, whether a save began before the notice.
    ages: dict[str, Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(
        default_factory=dict
    )
    # The clients that received each active terminate now past its deadline and have not
    # acked it, those gone before their ack included (sorted, the first 16): the jobs to look
    # at after a lost step.
    unacked_past_deadline: dict[str, list[str]] = Field(default_factory=dict)
    # Of those, the clients that left before their ack (a subscriber gone, a hold whose
    # process ended; sorted, among the 16 listed): the job whose steps were lost, as the
    # agent's warning names it (kept across a restart of the agent).
    gone_before_ack: dict[str, list[str]] = Field(default_factory=dict)
    # Of those, the clients whose save failed (they acked `outcome=failed`, and no saved
    # flush since), each with its ack's note (blank when none): it tried, and the note says
    # why it failed (a full disk, a refused write). Not in `gone_before_ack`, left or not.
    # For each other active notice (before its deadline, a drain), the clients whose save for
    # it failed (the first ACKED_BY_LISTED): only in the log, it was shown as if saved.
    save_failed: dict[str, dict[str, str]] = Field(default_factory=dict)
    # The active terminates now past their deadline, not flushed, restored after a restart
    # from an older agent's state file, which did not say which clients had received them:
    # some may not have acked (sorted).
    past_deadline_receivers_unknown: list[str] = Field(default_factory=list)
    # The active notices past their deadline plus the grace that their provider still shows
    # (the machine not taken yet: AWS can be late), each with when it was first found so: kept
    # active and not sent again, where each grace was a clear and the same notice again.
    overdue: dict[str, Timestamp] = Field(default_factory=dict)


class NotifyReply(_Message):
    ok: Literal[True] = True
    notice: Notice
    # Why the notice could not be saved, when it could not: it is active and published, but
    # an agent restarted before a later save succeeds (retried at each heartbeat) forgets it.
    unsaved: str | None = None


class ClearReply(_Message):
    ok: Literal[True] = True
    cleared: list[str]
    # Why the clear could not be saved, when it could not: the clear is published, but an
    # agent restarted before a later save succeeds restores the notices the last saved state
    # holds, and sends them again.
    unsaved: str | None = None
    # With `unsaved`: the cleared notices that last saved state holds, which such a restart
    # sends again (the others were never saved, and stay gone); null where it cannot be read.
    saved_before: list[str] | None = None


class AckReply(_Message):
    ok: Literal[True] = True


class HoldReply(_Message):
    ok: Literal[True] = True
    # False: the notice is not active, or every client had flushed it already (nothing to
    # hold), or the client had acked it already.
    held: bool
    # The hold's process (`pid`) is watched: the hold goes once that process is gone. False
    # without one, or where the agent cannot see it (another pid namespace).
    watched: bool = False


class ErrorReply(_Message):
    ok: Literal[False] = False
    error: str


def encode(message: BaseModel) -> bytes:
    return message.model_dump_json().encode()


def _refuse_duplicated_keys(payload: bytes) -> None:
    """DuplicateKeyError (a ValueError) naming a key an object of `payload` names twice:
    pydantic keeps the last of them, the C subscriber read the first. JSON that does not
    parse is left to pydantic, whose ValidationError says where."""
    with contextlib.suppress(RecursionError, UnicodeDecodeError, json.JSONDecodeError):
        jsontext.loads(payload)


def decode_notice(payload: bytes) -> Notice:
    _refuse_duplicated_keys(payload)
    return Notice.model_validate_json(payload)


def decode_heartbeat(payload: bytes) -> Heartbeat:
    _refuse_duplicated_keys(payload)
    return Heartbeat.model_validate_json(payload)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of every message of protocol v1, for any language to validate with."""
    models: dict[str, type[BaseModel]] = {
        "Notice": Notice,
        "Heartbeat": Heartbeat,
        "StatusRequest": StatusRequest,
        "NotifyRequest": NotifyRequest,
        "ClearRequest": ClearRequest,
        "AckRequest": AckRequest,
        "HoldRequest": HoldRequest,
        "StatusReply": StatusReply,
        "NotifyReply": NotifyReply,
        "ClearReply": ClearReply,
        "AckReply": AckReply,
        "HoldReply": HoldReply,
        "ErrorReply": ErrorReply,
    }
    definitions: dict[str, Any] = {}
    for name, model in models.items():
        schema = model.model_json_schema(ref_template="#/$defs/{model}", mode="serialization")
        definitions.update(schema.pop("$defs", {}))
        if name.endswith("Request"):
            # The agent takes the token off a request before the model sees it; without it
            # here, every request on tcp:// or ipc://@ control failed this schema.
            schema["properties"][TOKEN_FIELD] = {
                "title": "Token",
                "description": (
                    "The control token, required when control listens on tcp:// or ipc://@: "
                    "the line the agent wrote to <runtime>/control-token"
                ),
                "type": "string",
                "maxLength": MAX_TOKEN_BYTES,
            }
            # A field added to a request within v1 is optional: an agent that does not know
            # it ignores it (`requestfields.py`). Not `v`: a request with one is of a later
            # protocol. A name a typo away from a field of the request is refused too.
            schema["additionalProperties"] = True
            schema["propertyNames"] = {"not": {"const": "v"}}
            schema["description"] = (
                f"{schema.get('description', '').rstrip()} " if schema.get("description") else ""
            ) + REQUEST_FIELDS_DESCRIPTION
        definitions[name] = schema
    for name in ("Notice", "Heartbeat"):
        # After the loop: the replies' own $defs hold a Notice too, which replaced this one.
        # The agent always sends `v` and every forewarn reader drops a message without it
        # (its default is for the state file): published optional, it said otherwise.
        definitions[name]["required"].insert(0, "v")
        definitions[name]["properties"]["v"]["description"] = VERSION_DESCRIPTION
        # The agent's models forbid unknown fields (it sends none), the readers ignore them:
        # the schema is for readers, and one that validated strictly dropped every message
        # of a newer agent that added an optional field within v1.
        definitions[name]["additionalProperties"] = True
        description = definitions[name].get("description", "").rstrip()
        definitions[name]["description"] = (
            f"{description} " if description else ""
        ) + EVENT_FIELDS_DESCRIPTION
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://forewarn.dev/schema/protocol-v1.json",
        "title": "forewarn protocol v1",
        "description": (
            "Events: ZeroMQ XPUB, two frames (topic `notice` or `heartbeat`, then UTF-8 JSON); "
            "a subscription to `notice` (or to `replay/<token>`: see Heartbeat.replay_for) "
            "makes the agent replay every active notice. "
            "Control: ZeroMQ REP, one JSON request and one JSON reply."
        ),
        "oneOf": [{"$ref": f"#/$defs/{name}"} for name in models],
        "$defs": definitions,
    }


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


__all__ = [
    "ACTIONS",
    "CONTROL_REQUEST",
    "PROTOCOL_VERSION",
    "REASONS",
    "TOPIC_CLIENT_PREFIX",
    "TOPIC_HEARTBEAT",
    "TOPIC_NOTICE",
    "AckReply",
    "AckRequest",
    "Action",
    "AgentInfo",
    "ClearReply",
    "ClearRequest",
    "ControlRequest",
    "ErrorReply",
    "Heartbeat",
    "HoldReply",
    "HoldRequest",
    "Notice",
    "NotifierStatus",
    "NotifyReply",
    "NotifyRequest",
    "Reason",
    "Report",
    "StatusReply",
    "StatusRequest",
    "client_id_problem",
    "decode_heartbeat",
    "decode_notice",
    "encode",
    "format_time",
    "json_schema",
    "parse_deadline",
    "parse_duration",
    "parse_time",
    "schema_text",
    "stable_id",
    "utcnow",
]
