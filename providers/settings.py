"""What every provider's settings section has in common."""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import string
import types
from pathlib import PurePath
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from forewarn.protocol.timefmt import parse_duration
from forewarn.protocol.wholenumber import number_hint, toml_number
from forewarn.protocol.wire import shell_variable_problem
from forewarn.providers.drillargs import check_url, name_arg
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError


class _WholeSecondsMark:
    """Marks an `int` setting that holds whole seconds (an API asks for an integer)."""


WholeSeconds = Annotated[int, _WholeSecondsMark()]
"""The type of a setting of whole seconds: it takes a duration too (`30s`, `5m`), which must
come to a whole number of seconds."""


def is_seconds(annotation: Any) -> bool:
    """Whether a field holds seconds: every `float` (or `float | None`) setting does."""
    if annotation is float:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        return args == [float]
    return False


class _ShownAsWritten:
    """A number read from a duration's text, shown as that text: a key out of its bounds
    said "less than or equal to 1.5 (got 300.0)" of `heartbeat_interval = "5m"`, a value
    nobody wrote. pydantic keeps a plain number of it in the settings, this only in its
    errors."""

    written: str

    def __repr__(self) -> str:
        return repr(self.written)

    __str__ = __repr__


class WrittenSeconds(_ShownAsWritten, float):
    """Seconds, shown as the duration written."""


class WrittenWholeSeconds(_ShownAsWritten, int):
    """Whole seconds (`WholeSeconds`), shown as the duration written."""


def shown_as_written(number: float, written: str) -> float:
    """`number`, shown in an error as `written`."""
    made = WrittenWholeSeconds(number) if isinstance(number, int) else WrittenSeconds(number)
    made.written = written
    return made


def written_number(text: str) -> float | None:
    """The number `text` writes as TOML writes one (`toml_number`), shown in an error as
    written; None when it is no such number. One rule for a bare number, whatever the source
    and whatever the key: a variable's `1_000` was refused for a duration and read for a
    size, and the file's `1e7` read where the same variable's was refused."""
    number = toml_number(text)
    if number is None:
        return None
    return shown_as_written(number, text.strip(string.whitespace))


def seconds(value: Any) -> Any:
    """A duration as people type it (`30s`, `15m`, `2h`) or a number, as seconds. Every
    seconds setting goes through this, so a duration reads the same in TOML, the
    environment, `--set` and the agent's flags. A bare number is read as TOML reads one
    (`written_number`), as the file's own numbers are: its sign and NaN are then the key's
    bounds' to refuse, from every source alike."""
    if isinstance(value, str) and value.strip():
        number = written_number(value)
        if number is not None:
            return number
        # With a unit: digits with `_` between them and a point, as every duration flag
        # reads one (`typed_duration`; no sign, no exponent).
        return shown_as_written(parse_duration(value, grouped=True), value)
    return value


def whole_seconds(value: Any) -> Any:
    """`seconds(value)` for a setting of whole seconds: `5m` is 300; `1.5s` is a ValueError."""
    converted = seconds(value)
    if isinstance(converted, float):
        whole = round(converted) if math.isfinite(converted) else None
        # `1.1m` comes to 66.00000000000001 in binary floating point: whole all the same.
        if whole is None or not math.isclose(converted, whole, rel_tol=1e-9):
            raise ValueError(f"expected a whole number of seconds, got {value!r}")
        return shown_as_written(whole, value) if isinstance(value, str) else whole
    return converted


def whole(value: Any) -> Any:
    """A key of whole numbers' `value` (a count, a port, bytes): a bare number as TOML reads
    one (`1_000`, `1e3`, `+5`, `0x10`), or the file's number, that is whole (`1.0`, `1e7`);
    a ValueError naming it otherwise. pydantic read `1.0` from the environment but refused
    `1e3`, and said "unable to parse string as an integer" of `1,000`. NaN and infinity go on
    for pydantic to refuse, as they do from the file."""
    written = value
    if isinstance(value, str) and value.strip(string.whitespace):
        value = written_number(value)
        if value is None:
            text = written.strip(string.whitespace)
            raise ValueError(f"not a whole number: {text!r}{number_hint(text)}")
    if isinstance(value, float) and math.isfinite(value):
        if value != int(value):
            raise ValueError(f"not a whole number (got {written!r})")
        number = int(value)
        if isinstance(written, str):
            return shown_as_written(number, written.strip(string.whitespace))
        return number
    return value


def _is_number(annotation: Any) -> bool:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        return len(args) == 1 and _is_number(args[0])
    return annotation in (int, float)


def as_seconds(field: FieldInfo | None, value: Any) -> Any:
    """`value` for `field`: a duration becomes seconds when the field holds seconds (every
    `float` field, and `WholeSeconds`); anything else is left to the field's own type. A
    boolean is never a number: pydantic reads `exit_margin = false` in TOML as 0."""
    if field is None:
        return value
    numeric = _is_number(field.annotation) or is_seconds(field.annotation)
    if numeric and isinstance(value, str) and not value.strip(string.whitespace):
        # Blank in the config file (a variable or `--set` blank sets nothing before this):
        # unset, as a blank list or path is. `exit_margin = " "` was refused in pydantic's
        # words, "unable to parse string as a number (got ' ')".
        if field.is_required():
            raise ValueError("empty: give a number")
        return field.get_default(call_default_factory=True)
    if isinstance(value, bool) and _is_number(field.annotation):
        kind = "seconds or a duration such as 30s" if is_seconds(field.annotation) else "a number"
        raise ValueError(f"expected {kind}, not a boolean")
    if is_seconds(field.annotation):
        return seconds(value)
    if any(isinstance(item, _WholeSecondsMark) for item in field.metadata):
        return whole_seconds(value)
    if _is_number(field.annotation):
        return whole(value)
    return value


def _holds_path(annotation: Any) -> bool:
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_holds_path(arg) for arg in get_args(annotation))
    return isinstance(annotation, type) and issubclass(annotation, PurePath)


def _is_word(annotation: Any) -> bool:
    """Whether a key holds a boolean or one of a few words (`Literal["drain", "ignore"]`)."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        return len(args) == 1 and _is_word(args[0])
    return annotation is bool or get_origin(annotation) is Literal


# The words a boolean key reads, in any case, as the docs name them; pydantic's lax mode
# also read `t`, `f`, `y` and `n`, which no doc names.
BOOLEAN_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "1", "0"})


def _is_boolean(annotation: Any) -> bool:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        return args == [bool]
    return annotation is bool


def _as_boolean(value: Any) -> Any:
    """A boolean key's `value`: a boolean as is, one of `BOOLEAN_WORDS` (without the space
    around it: a ConfigMap's YAML block ends `true` with a newline) for pydantic to read, and
    a number (TOML's `allow_remote = 1` or `1.0`, which pydantic read as true) or another
    word refused, as a TOML boolean where a number belongs is."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        shown = repr(value) if isinstance(value, float) else str(value)
        raise ValueError(f"{shown} is a number, not a boolean; write true or false")
    if isinstance(value, str):
        text = value.strip(string.whitespace)
        if text and text.lower() not in BOOLEAN_WORDS:
            raise PydanticCustomError("bool_parsing", "not a boolean")
        return text
    return value


def _choices(annotation: Any) -> tuple[Any, ...]:
    """The words a choice key takes (`("drain", "ignore")`); none for a boolean."""
    if get_origin(annotation) in (Union, types.UnionType):
        return tuple(
            word for arg in get_args(annotation) if arg is not type(None) for word in _choices(arg)
        )
    return get_args(annotation) if get_origin(annotation) is Literal else ()


def _as_word(annotation: Any, text: str) -> str:
    """`text` as the one of a choice key's words it names in another case
    (`FOREWARN_GCP_MIGRATE=DRAIN`, `approve = "After-Ack"`, `TLS`: each stopped the agent with
    exit 2 at every start, while `log_level = "INFO"` was read); anything else as is, for the
    field to accept or refuse."""
    words = [word for word in _choices(annotation) if isinstance(word, str)]
    if text in words:
        return text
    named = [word for word in words if word.casefold() == text.casefold()]
    return named[0] if len(named) == 1 else text


def _is_text(annotation: Any) -> bool:
    """Whether a key holds one piece of text: `str`, or `str | None`."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        return args == [str]
    return annotation is str


def _is_text_list(annotation: Any) -> bool:
    return get_origin(annotation) is list and get_args(annotation) == (str,)


def refuse_shell_variable(path: str) -> None:
    """A ValueError when `path` holds a shell variable (`wire.shell_variable`)."""
    problem = shell_variable_problem(path)
    if problem:
        raise ValueError(problem)


def _bare_as_text(value: Any) -> Any:
    """A TOML integer or date as its text (`3164444`, `2020-07-01`); anything else as is: a
    boolean, a fraction or a time is no text anyone meant, and stays for the key to refuse."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    return value


def read_value(field: FieldInfo | None, value: Any) -> Any:
    """`value` as a key of `field` reads it, whatever the source: an empty path is the key's
    default (`FOREWARN_STATE_DIR=` was Path("."), the working directory, while the clients
    read an empty FOREWARN_RUNTIME_DIR as unset), a path loses the space around it and one
    starting `~` is in a home directory (in a flag's Path too), as `wire.runtime_dir` reads
    it too; a boolean, a word or any text (a name, a host, an address, a URL, a pattern, and
    each text of a list) loses the space around it, and a `str` key left empty by that is a
    ValueError (a `str | None` key's own validator says what empty means); seconds as
    `as_seconds` reads them."""
    if field is not None and isinstance(value, str) and _is_text(field.annotation):
        # A ConfigMap's YAML block (`FOREWARN_DIGITALOCEAN_IMAP_HOST: |`) or a key made with
        # `kubectl create configmap --from-file` ends the value with a newline: kept, the host
        # `imap.example.com\n` did not resolve and the sender pattern `...\.com$\n` matched
        # no mail. No text key holds a secret that a space could belong to: the one secret
        # among them, `webhook.url`, is a URL, which holds no space. Secrets kept in files
        # have their own rules: a token (service account, control) is read without the space
        # around it, as none holds any; a password in `credentials_file` is read as systemd
        # reads an EnvironmentFile (quoted, exactly as written).
        text = value.strip(string.whitespace)
        if not text and field.annotation is str:
            raise ValueError("must not be empty")
        return text
    if field is not None and isinstance(value, list) and _is_text_list(field.annotation):
        # `taints = ["karpenter.sh/disrupted\n"]`, as for one text.
        return [item.strip(string.whitespace) if isinstance(item, str) else item for item in value]
    if field is not None and isinstance(value, PurePath) and _holds_path(field.annotation):
        # A flag's value: `--state-dir=~/fw` reaches here unexpanded, as no shell expands a
        # `~` after `=`, and made a directory named `~` while the clients looked in home.
        value = str(value)
    if field is not None and isinstance(value, str) and _holds_path(field.annotation):
        if not value.strip(string.whitespace):
            return field.get_default(call_default_factory=True)
        refuse_shell_variable(value)
        # `state_dir = "~/forewarn"` made a directory named `~` in the working directory; a
        # ConfigMap's YAML block (`FOREWARN_RUNTIME_DIR: |`) ends the value with a newline,
        # which made `/run/forewarn\n` beside the shared volume.
        return os.path.expanduser(value.strip(string.whitespace))
    if field is not None and _is_boolean(field.annotation):
        return _as_boolean(value)
    if field is not None and isinstance(value, str) and _is_word(field.annotation):
        # A ConfigMap's YAML block (`FOREWARN_KUBERNETES_CORDON: |`) or a file made with
        # `--from-file` ends `true` with a newline: pydantic refused `true\n`, and the agent
        # stopped with exit 2 at every start. Numbers and durations were read stripped already.
        return _as_word(field.annotation, value.strip(string.whitespace))
    return as_seconds(field, value)


def split_list(value: Any, field: FieldInfo | None, *, json_list: bool = False) -> Any:
    """A list key's `value` as the environment, the config file and `--set` write it: its
    items separated by commas or space (or, with `json_list`, a JSON list), each without the
    space around it. Blank, it is the key's default, as a blank text or path is:
    `FOREWARN_KUBERNETES_TAINTS=` (an empty value in a Helm or Kustomize env list) was an empty
    list and turned off every default drain taint without a word. Commas alone (`,`) name
    nothing, and are refused."""
    if not isinstance(value, str):
        return value
    text = value.strip(string.whitespace)
    if not text:
        return field.get_default(call_default_factory=True) if field is not None else value
    if json_list and text.startswith("["):
        try:
            return json.loads(text)
        # RecursionError: nested a few thousand deep, a traceback instead of exit 2.
        except (ValueError, RecursionError) as error:
            raise ValueError(f"not a JSON list ({error})") from None
    # By space as well as commas: no item of a list key (a provider, an EventType, a taint
    # key) holds one, and `FOREWARN_AZURE_APPROVE_TYPES="Preempt Terminate"` (an
    # Environment= line) was one EventType named 'Preempt Terminate'.
    items = [part.strip(string.whitespace) for part in re.split(r"[,\s]+", text)]
    if not any(items):
        none = " or [] for none" if json_list else ""
        raise ValueError(f"{value!r} names nothing; leave it unset for the default{none}")
    return [item for item in items if item]


class ProviderSettings(BaseModel):
    """The base of every `[<provider>]` section: unknown keys are errors, and every seconds
    setting (`float`, or `WholeSeconds`) also accepts a duration (`30s`, `15m`, `2h`)."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _seconds_accept_durations(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and _is_text(field.annotation):
            # A bare number or date, as TOML reads `droplet_id = 3164444` and
            # `api_version = 2020-07-01`, is its text: refused as "Input should be a valid
            # string (got datetime.date(2020, 7, 1))", it stopped the agent with exit 2. In
            # a provider's section alone: the top-level `events` and `control` are read by
            # the clients too, which take a string only, and must agree with the agent.
            value = _bare_as_text(value)
        return read_value(field, value)


class EndpointSettings(ProviderSettings):
    """A section whose watcher talks to an endpoint. `url` points it there (tests and
    simulators use loopback); None means the provider's real address. It is checked when
    the configuration loads, so a URL the watcher cannot use is an error naming the key."""

    # The schemes the watcher speaks, and whether a bare HOST[:PORT] means http.
    url_schemes: ClassVar[tuple[str, ...]] = ("http", "https")
    url_bare_host: ClassVar[bool] = False

    url: str | None = Field(default=None, description="Base URL of the notice endpoint.")

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return check_url(value, cls.url_schemes, cls.url_bare_host)


__all__ = [
    "EndpointSettings",
    "ProviderSettings",
    "WholeSeconds",
    "WrittenSeconds",
    "WrittenWholeSeconds",
    "as_seconds",
    "check_url",
    "is_seconds",
    "name_arg",
    "read_value",
    "refuse_shell_variable",
    "seconds",
    "shown_as_written",
    "split_list",
    "whole",
    "whole_seconds",
    "written_number",
]
