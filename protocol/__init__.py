"""The contract the agent and its clients speak: protocol version, topics, endpoints and the
runtime directory, the time format, and the event's fields.

Standard library only (zmq is imported inside `request`, on first use), so that the training
process, the providers and the agent can all import it cheaply. Layering:
clients → protocol ← providers ← agent.
"""

from .errors import ConfigError, DrillError, ForewarnError, UsageError
from .fields import (
    ACTIONS,
    HEARTBEAT_FIELDS,
    NOTICE_FIELDS,
    REASONS,
    TAKES_ACK_ACTION,
    Action,
    Reason,
    stable_id,
)
from .timefmt import format_time, parse_deadline, parse_duration, parse_time, utcnow
from .wire import (
    PROTOCOL_VERSION,
    TOKEN_FIELD,
    TOKEN_FILE,
    TOPIC_CLIENT_PREFIX,
    TOPIC_HEARTBEAT,
    TOPIC_NOTICE,
    TOPIC_REPLAY_PREFIX,
    EndpointError,
    check_endpoint,
    default_endpoints,
    ipc_path,
    needs_token,
    read_token,
    request,
    resolve_endpoints,
    runtime_dir,
    with_token,
)

__all__ = [
    "ACTIONS",
    "HEARTBEAT_FIELDS",
    "NOTICE_FIELDS",
    "PROTOCOL_VERSION",
    "REASONS",
    "TAKES_ACK_ACTION",
    "TOKEN_FIELD",
    "TOKEN_FILE",
    "TOPIC_CLIENT_PREFIX",
    "TOPIC_HEARTBEAT",
    "TOPIC_NOTICE",
    "TOPIC_REPLAY_PREFIX",
    "Action",
    "ConfigError",
    "DrillError",
    "EndpointError",
    "ForewarnError",
    "Reason",
    "UsageError",
    "check_endpoint",
    "default_endpoints",
    "format_time",
    "ipc_path",
    "needs_token",
    "parse_deadline",
    "parse_duration",
    "parse_time",
    "read_token",
    "request",
    "resolve_endpoints",
    "runtime_dir",
    "stable_id",
    "utcnow",
    "with_token",
]
