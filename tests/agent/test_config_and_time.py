from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import string
import tempfile
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, cast

import annotated_types
import pytest
import zmq
from annotated_types import Ge, Gt, Le
from forewarn.agent.cli import apply_sets, build_parser
from forewarn.agent.config import ConfigError, Settings, load_settings, settings_model
from forewarn.agent.configdoc import settings_keys
from forewarn.protocol.errors import UsageError
from forewarn.protocol.timefmt import format_time, parse_deadline, parse_duration, parse_time
from forewarn.protocol.wire import (
    ConfigFileError,
    EndpointError,
    check_endpoint,
    default_endpoints,
    read_client_config,
    read_toml,
    resolve_endpoints,
    runtime_dir,
)
from forewarn.providers.registry import REGISTRY
from forewarn.providers.settings import as_seconds, is_seconds
from hypothesis import example, given, settings
from hypothesis import strategies as st
from other_user import call_as, other_user
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from support import examples


def test_precedence_flags_over_env_over_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "f.toml"
    config.write_text('exit_margin = 5\n[aws]\nurl = "http://127.0.0.1:1"\n')
    monkeypatch.setenv("FOREWARN_AWS_URL", "http://127.0.0.1:2")
    settings = load_settings(config)
    assert settings.exit_margin == 5 and settings.aws.url == "http://127.0.0.1:2"
    assert load_settings(config, exit_margin=7).exit_margin == 7


def test_env_names_for_sections_and_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOREWARN_PROVIDERS", "local, aws")
    monkeypatch.setenv("FOREWARN_LOCAL_FLAG_INTERVAL", "0.5")
    settings = load_settings()
    assert settings.providers == ["local", "aws"] and settings.local.flag_interval == 0.5


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"exit_margin": -1}, "exit_margin"),
        ({"providers": ["mars"]}, "providers"),
        ({"local": {"flag_interval": 0}}, "local.flag_interval"),
        ({"local": {"colour": "red"}}, "local.colour"),
        # The local provider watches a file, not an endpoint: it has no url to set.
        ({"local": {"url": "http://127.0.0.1:9"}}, "local.url"),
    ],
)
def test_invalid_values_name_their_key(overrides: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_settings(**overrides)


def test_missing_config_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "nope.toml")


def test_a_config_path_that_is_a_directory_or_not_utf8_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file \S+: is a directory"):
        load_settings(tmp_path)
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b"# caf\xe9\nexit_margin = 30\n")
    with pytest.raises(ConfigError, match=r"latin.toml: not UTF-8 text \(byte 5\)"):
        load_settings(latin)


def test_a_config_file_saved_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """Notepad and PowerShell's `Out-File -Encoding utf8` start the file with a UTF-8 BOM: it
    was 'not valid TOML: Invalid statement (at line 1, column 1)', naming nothing wrong that
    the file's author could see, for the agent and for the clients that read the same file."""
    config = tmp_path / "bom.toml"
    config.write_bytes(b"\xef\xbb\xbfexit_margin = 12\r\n[aws]\r\nurl = 'http://127.0.0.1:9'\r\n")
    settings = load_settings(config)
    assert settings.exit_margin == 12 and settings.aws.url == "http://127.0.0.1:9"
    client = tmp_path / "client.toml"
    client.write_bytes(b"\xef\xbb\xbfruntime_dir = 'run'\n")
    assert read_client_config(client).runtime_dir == tmp_path / "run"
    # A bad byte after the mark is still named by its place in the file.
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b"\xef\xbb\xbf# caf\xe9\nexit_margin = 30\n")
    with pytest.raises(ConfigError, match=r"latin.toml: not UTF-8 text \(byte 8\)"):
        load_settings(latin)


@settings(max_examples=examples(300), deadline=None)
@given(
    key=st.from_regex(r"\A[a-z_]{1,12}\Z"),
    value=st.from_regex(r"\A[0-9a-z.:]{0,6}[a-z:][0-9a-z.:]{0,6}\Z"),
    before=st.sampled_from(["", 'providers = ["local"]\n', "[aws]\n"]),
    text=st.text(max_size=30),
)
def test_a_bare_text_in_the_file_is_named_with_its_quoted_form(
    key: str, value: str, before: str, text: str
) -> None:
    """`exit_margin = 30s` was tomllib's "Expected newline or end of document" alone. Any
    document is a dict or a ConfigFileError (the hint never raises), and one refused for a
    bare text on a line says how to quote it."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "f.toml"
        for document in (f"{before}{key} = {value}\n", text):
            path.write_text(document)
            try:
                read_toml(path)
            except ConfigFileError as error:
                if document != text:
                    assert f'(a text is quoted in TOML: {key} = "{value}")' in str(error)


# Values TOML reads as they stand, each written as people write the key's value.
_TOML_VALUES = ["30", "1.5", "-0", "inf", "true", '"30s"', "'2m30s'", "2026-12-06T08:00:00Z"]


@settings(max_examples=examples(100), deadline=None)
@given(
    key=st.from_regex(r"\A[a-z_]{1,12}\Z"),
    first=st.sampled_from(_TOML_VALUES),
    second=st.sampled_from(_TOML_VALUES),
    section=st.sampled_from(["", "[aws]\n"]),
    between=st.sampled_from(["", "# a comment\n", "other = 1\n"]),
)
@example(key="exit_margin", first="30", second="40", section="", between="")
def test_a_key_set_twice_is_named_not_told_to_quote_its_value(
    key: str, first: str, second: str, section: str, between: str
) -> None:
    """`exit_margin = 30` and `exit_margin = 40` below it were refused "(a text is quoted in
    TOML: exit_margin = "40")": a number quoted is no fix, the second line is."""
    if key == "other" and between.startswith("other"):
        return
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "f.toml"
        path.write_text(f"{section}{key} = {first}\n{between}{key} = {second}\n")
        with pytest.raises(ConfigFileError) as refused:
            read_toml(path)
    assert f"({key} is set twice: keep one)" in str(refused.value), refused.value
    assert "quoted" not in str(refused.value), refused.value


@pytest.mark.parametrize("written", ["True", "False", "TRUE", "False  # off for now"])
def test_a_boolean_written_as_python_writes_it_is_named_with_its_toml_form(
    tmp_path: Path, written: str
) -> None:
    """`telemetry = True` (as Python writes it) was told to quote it, `telemetry = "True"`:
    TOML's own booleans are lower case, and the hint now names that form."""
    path = tmp_path / "f.toml"
    path.write_text(f"telemetry = {written}\n")
    with pytest.raises(ConfigFileError) as caught:
        read_toml(path)
    meant = written.split()[0].lower()
    assert f"(a boolean is lower case in TOML: telemetry = {meant})" in str(caught.value)


def test_a_config_file_it_cannot_read_is_one_error_naming_it() -> None:
    """Read as another user, a mode-0600 file (or one in a directory it cannot enter) was
    'unexpected PermissionError', exit 1."""
    uid, gid = other_user()
    with tempfile.TemporaryDirectory(dir="/tmp") as directory:
        open_dir, closed_dir = Path(directory, "open"), Path(directory, "closed")
        for folder, mode in ((Path(directory), 0o755), (open_dir, 0o755), (closed_dir, 0o700)):
            folder.mkdir(exist_ok=True)
            folder.chmod(mode)
        unreadable, hidden = open_dir / "forewarn.toml", closed_dir / "forewarn.toml"
        for config in (unreadable, hidden):
            config.write_text("exit_margin = 30\n")
            config.chmod(0o600)

        def load(config: Path) -> str:
            try:
                load_settings(config)
            except ConfigError as error:
                return f"ConfigError: {error}"
            except Exception as error:
                return f"{type(error).__name__}: {error}"
            return "loaded"

        for config in (unreadable, hidden):
            assert call_as(uid, gid, lambda config=config: load(config)) == (
                f"ConfigError: config file {config}: cannot read it (Permission denied)"
            )


def test_endpoints_follow_the_runtime_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FOREWARN_RUNTIME_DIR", str(tmp_path))
    monkeypatch.delenv("FOREWARN_EVENTS", raising=False)
    assert runtime_dir() == tmp_path
    assert default_endpoints() == (f"ipc://{tmp_path}/events", f"ipc://{tmp_path}/control")
    monkeypatch.setenv("FOREWARN_EVENTS", "tcp://127.0.0.1:7000")
    assert default_endpoints()[0] == "tcp://127.0.0.1:7000"


@pytest.mark.parametrize(
    "endpoint",
    ["ipc:///run/forewarn/events", "tcp://127.0.0.1:5555", "tcp://[::1]:1", "tcp://localhost:9"],
)
def test_loopback_endpoints_pass(endpoint: str) -> None:
    assert check_endpoint(endpoint) == endpoint


@settings(max_examples=examples(100), deadline=None)
@given(upper=st.lists(st.booleans(), min_size=9, max_size=9))
def test_localhost_in_any_case_is_loopback(upper: list[bool]) -> None:
    """A host name is read in any case (RFC 4343): `tcp://LOCALHOST:5555` was refused as "not
    a loopback address; notices would leave this machine" and `LOCALHOST:9464` as a metrics
    address (`simulate --host LOCALHOST`: test_sim_cli.py)."""
    host = "".join(c.upper() if up else c for c, up in zip("localhost", upper, strict=True))
    assert check_endpoint(f"tcp://{host}:5555") == f"tcp://{host}:5555"
    assert load_settings(metrics_address=f"{host}:9464").metrics_address == f"{host}:9464"


def _zmq_binds(host: str) -> str | None:
    """The address ZeroMQ binds for `tcp://host:0`, or None when it refuses the host. Only
    numeric hosts reach here: a name could send a DNS query off this machine."""
    sock = zmq.Context.instance().socket(zmq.PUB)
    try:
        sock.bind(f"tcp://{host}:0")
        bound = sock.getsockopt(zmq.LAST_ENDPOINT)
        assert isinstance(bound, bytes)
        return bound.decode()[len("tcp://") :].rpartition(":")[0]
    except zmq.ZMQError:
        return None
    finally:
        sock.close(linger=0)


_IPV4_PART = st.one_of(
    st.integers(0, 255).map(str),
    st.integers(0, 255).map(lambda n: f"0x{n:x}"),
    st.integers(0, 255).map(lambda n: f"0{n:o}"),
)


@settings(max_examples=examples(60), deadline=None)
@given(
    st.one_of(
        st.builds(lambda *parts: ".".join(parts), st.just("127"), _IPV4_PART),
        st.builds(lambda *parts: ".".join(parts), st.just("127"), _IPV4_PART, _IPV4_PART),
        st.lists(_IPV4_PART, min_size=1, max_size=4).map(".".join),
        st.integers(0, 2**32 - 1).map(str),
    )
)
@example("127.1")
@example("127.0.1")
@example("0x7f.1")
@example("0177.0.0.1")
@example("2130706433")
@example("10.1")
def test_an_ipv4_address_in_short_form_is_loopback_where_zmq_binds_loopback(host: str) -> None:
    """`tcp://127.1:5555`, which ZeroMQ binds on 127.0.0.1 (it reads IPv4 as inet_aton does),
    was refused: "127.1 is not a loopback address; notices would leave this machine"."""
    bound = _zmq_binds(host)
    try:
        check_endpoint(f"tcp://{host}:5555")
    except EndpointError as error:
        assert "not a loopback address" in str(error)
        assert bound is None or not bound.startswith("127."), (host, bound)
    else:
        assert bound is not None and bound.startswith("127."), (host, bound)


@pytest.mark.parametrize("host", ["127.1 x", "127.1.", "0x", "127..1", "127.1\n", "127.1.2.3.4"])
def test_a_host_only_nearly_an_ipv4_address_is_refused(host: str) -> None:
    with pytest.raises(EndpointError, match=r"not a loopback address|expected tcp://HOST:PORT"):
        check_endpoint(f"tcp://{host}:5555")


@pytest.mark.parametrize(
    "endpoint",
    ["tcp://10.0.0.1:5555", "tcp://*:5555", "tcp://0.0.0.0:1", "udp://127.0.0.1:1", "ipc://"],
)
def test_other_endpoints_are_refused(endpoint: str) -> None:
    with pytest.raises(EndpointError):
        check_endpoint(endpoint)


@pytest.mark.parametrize(
    "endpoint", ["ipc:///tmp/fw/ev\x00x", "ipc://@fw\x00x", "tcp://127.0.0.1\x00x:5555"]
)
def test_an_endpoint_with_a_nul_is_refused_naming_it(endpoint: str) -> None:
    # A config file can hold one ("\u0000" in TOML): the agent stopped with "unexpected
    # ValueError: embedded null byte", and zmq connected a client to the path cut at the NUL.
    with pytest.raises(EndpointError, match=r"^events '.*': it holds a NUL character"):
        check_endpoint(endpoint, what="events")


_ENDPOINT_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=130)


@settings(max_examples=examples(300), deadline=None)
@given(
    endpoint=st.one_of(
        st.builds("ipc://{}".format, _ENDPOINT_TEXT),
        st.builds("ipc://@{}".format, _ENDPOINT_TEXT),
        st.builds("ipc:///tmp/{}".format, st.text("ab/", max_size=120)),
        st.builds("tcp://127.0.0.1:{}".format, st.integers(-5, 70000)),
        st.builds("tcp://{}:5".format, _ENDPOINT_TEXT),
    )
)
def test_an_endpoint_the_check_accepts_is_one_zmq_connects(endpoint: str) -> None:
    """A client's --events/--control is checked before zmq sees it: what zmq would refuse
    (an ipc path past 107 bytes, `ipc://@`) is an EndpointError naming it, never a ZMQError."""
    try:
        check_endpoint(endpoint, what="--events")
    except EndpointError as error:
        assert str(error).startswith(f"--events {endpoint!r}: ")
        return
    sock = zmq.Context.instance().socket(zmq.SUB)
    try:
        sock.connect(endpoint)
    finally:
        sock.close(linger=0)


@pytest.mark.parametrize(
    ("events", "control"),
    [
        ("ipc:///run/fw/events", "ipc:///run//fw/./events"),
        ("ipc://relative/x", f"ipc://{os.getcwd()}/relative/x"),
        ("ipc://@fw", "ipc://@fw"),
        ("tcp://127.0.0.1:5555", "tcp://127.0.0.1:5555"),
    ],
)
def test_events_and_control_on_one_endpoint_are_refused(events: str, control: str) -> None:
    """Bound twice, one ipc path kept only the control socket's file: the agent ran and
    served events no client could reach."""
    with pytest.raises(EndpointError, match="events and control are the same endpoint"):
        resolve_endpoints(Path("/run/fw"), events, control)
    assert resolve_endpoints(Path("/run/fw"), events, "ipc:///run/fw/other")


def test_remote_needs_the_explicit_flag() -> None:
    assert check_endpoint("tcp://10.0.0.1:5555", allow_remote=True)


def test_rfc3339_with_z_parses_on_every_python() -> None:
    assert parse_time("2026-11-30T03:12:00Z") == datetime(2026, 11, 30, 3, 12, tzinfo=timezone.utc)
    assert parse_time("2026-11-30T04:12:00.5+01:00") == datetime(
        2026, 11, 30, 3, 12, 0, 500000, tzinfo=timezone.utc
    )
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_time("21 Jan 2019 09:00:43 GMT")


@settings(max_examples=examples(300), deadline=None)
@given(
    text=st.text(max_size=30)
    | st.from_regex(r"\A\d{1,16}(\.\d{0,3})?(ms|s|m|h|d)?\Z")
    | st.from_regex(r"\A\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d)?(\.\d+)?(Z|[+-]\d\d:\d\d)?\Z")
)
def test_parse_deadline_raises_only_value_error_naming_the_text(text: str) -> None:
    """`99999999999999d` raised OverflowError ('Python int too large to convert to C int'),
    which `forewarn drill digitalocean --deadline` did not catch."""
    now = datetime(2026, 12, 1, tzinfo=timezone.utc)
    try:
        parse_deadline(text, now)
    except ValueError as error:
        assert repr(text) in str(error)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("99999999999999d", "past the last time a date can hold"),
        ("9999-12-31T23:59:59-01:00", "not an RFC 3339 time: '9999-12-31T23:59:59-01:00' (date"),
        ("2030-01-01T00:00:00", "needs seconds and a UTC offset"),
        ("2030-13-01T00:00:00Z", "month must be in 1..12"),
    ],
)
def test_a_deadline_that_is_not_usable_says_why(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        parse_deadline(text)


def test_durations_and_deadlines() -> None:
    assert parse_duration("90s") == 90 and parse_duration("15m") == 900
    assert parse_duration("2h") == 7200 and parse_duration("250ms") == 0.25
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert parse_deadline("2h", now) == now + timedelta(hours=2)
    with pytest.raises(ValueError, match="duration"):
        parse_deadline("soonish", now)


@given(st.datetimes(timezones=st.just(timezone.utc)))
def test_format_parse_roundtrip_to_the_millisecond(moment: datetime) -> None:
    # Years 1 to 999 too: a provider's zero time (Go's is 0001-01-01T00:00:00Z) was sent as
    # "1-01-01T00:00:00Z", which no client parses, and the notice was dropped.
    moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000)
    assert parse_time(format_time(moment)) == moment


@given(st.datetimes(timezones=st.just(timezone.utc)))
@example(datetime(2026, 12, 3, 13, 57, 40, 345, tzinfo=timezone.utc))
def test_a_time_is_written_the_same_after_a_round_trip(moment: datetime) -> None:
    """A time with microseconds but no whole millisecond went out as "...:40.000Z" and,
    read back from the agent's state after a restart, as "...:40Z": the same notice's body
    differed before and after (a webhook redelivery failed its equality, clean-clone run 31)."""
    written = format_time(moment)
    assert format_time(parse_time(written)) == written


@given(st.text(max_size=40))
def test_parse_time_raises_only_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        parse_time(text)


@pytest.mark.parametrize(
    ("overrides", "key", "text"),
    [
        # IMDS speaks plain http: an https url used to load and restart the watcher forever.
        ({"aws": {"url": "https://127.0.0.1:1338"}}, "aws.url", "http://"),
        ({"gcp": {"url": "https://127.0.0.1:1"}}, "gcp.url", "http://"),
        ({"azure": {"url": "127.0.0.1:1"}}, "azure.url", "expected a URL"),
        ({"kubernetes": {"url": "ftp://127.0.0.1"}}, "kubernetes.url", "https://"),
        ({"digitalocean": {"url": "http://127.0.0.1:99999"}}, "digitalocean.url", "bad port"),
        ({"aws": {"url": "http://127.0.0.1/?x=1"}}, "aws.url", "no query"),
    ],
)
def test_every_provider_url_is_checked_at_load(
    overrides: dict[str, object], key: str, text: str
) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as caught:
        load_settings(**overrides)
    assert text in str(caught.value)


def test_durations_read_the_same_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "f.toml"
    config.write_text('exit_margin = "45s"\n[aws]\nspot_interval = "250ms"\n')
    settings = load_settings(config)
    assert settings.exit_margin == 45 and settings.aws.spot_interval == 0.25
    monkeypatch.setenv("FOREWARN_EXIT_MARGIN", "2m")
    monkeypatch.setenv("FOREWARN_LOCAL_FLAG_INTERVAL", "1.5s")
    settings = load_settings(config)
    assert settings.exit_margin == 120 and settings.local.flag_interval == 1.5
    assert load_settings(config, exit_margin="30").exit_margin == 30
    with pytest.raises(ConfigError, match="exit_margin: not a duration"):
        load_settings(exit_margin="5x")


def _seconds_keys(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    """Every key of the configuration that holds seconds, dotted, with its field."""
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _seconds_keys(annotation, f"{prefix}{name}.")
        elif is_seconds(annotation) or _reads_a_minute(field):
            yield prefix + name, field


def _reads_a_minute(field: FieldInfo) -> bool:
    # A key of whole numbers that is no duration refuses `1m` (`whole`).
    try:
        return bool(as_seconds(field, "1m") == 60)
    except ValueError:
        return False


def _field(key: str) -> FieldInfo:
    model: Any = settings_model()
    *sections, leaf = key.split(".")
    for section in sections:
        model = model.model_fields[section].annotation
    return cast(FieldInfo, model.model_fields[leaf])


# The keys an API takes as an integer number of seconds.
WHOLE_SECONDS_KEYS = ["aws.token_ttl", "gcp.timeout_sec", "kubernetes.watch_timeout"]
SECONDS_KEYS = {
    **dict(_seconds_keys(settings_model())),
    **{key: _field(key) for key in WHOLE_SECONDS_KEYS},
}


def _whole_bounds(field: FieldInfo) -> tuple[int, int]:
    """The smallest and largest whole number of seconds the field takes."""
    low, high = 0, 10**7
    for item in field.metadata:
        if isinstance(item, Ge):
            low = max(low, math.ceil(float(item.ge)))  # type: ignore[arg-type]
        elif isinstance(item, Gt):
            low = max(low, math.floor(float(item.gt)) + 1)  # type: ignore[arg-type]
        elif isinstance(item, Le):
            high = min(high, math.floor(float(item.le)))  # type: ignore[arg-type]
    return low, high


# How people write a whole number of seconds: (text for a count, seconds per count).
_FORMS: list[tuple[Any, int]] = [
    (str, 1),
    ("{}s".format, 1),
    (lambda k: f" {k} s ", 1),
    (lambda k: f"{k * 1000}ms", 1),
    (lambda k: f"{k // 10}.{k % 10}m", 6),  # tenths of a minute: 1.1m is 66 s
    ("{}m".format, 60),
    (lambda k: f"{k // 100}.{k % 100:02d}h", 36),
    ("{}h".format, 3600),
    ("{}d".format, 86400),
]


@st.composite
def _whole_durations(draw: st.DrawFn, field: FieldInfo) -> tuple[str, int]:
    low, high = _whole_bounds(field)
    forms = [(text, per) for text, per in _FORMS if -(-low // per) <= high // per]
    text, per = draw(st.sampled_from(forms))
    count = draw(st.integers(-(-low // per), high // per))
    return text(count), count * per


def _load(source: str, key: str, text: str) -> Settings:
    """The configuration with `key` given as `text` by TOML, the environment or --set."""
    *section, leaf = key.split(".")
    if source == "toml":
        with tempfile.TemporaryDirectory() as directory:
            config = Path(directory) / "f.toml"
            header = f"[{section[0]}]\n" if section else ""
            config.write_text(f'{header}{leaf} = "{text}"\n')
            return load_settings(config)
    if source == "env":
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("FOREWARN_" + key.replace(".", "_").upper(), text)
            return load_settings()
    # --set section.key=VALUE reaches load_settings as a nested string, as the CLI builds it.
    return load_settings(**({section[0]: {leaf: text}} if section else {leaf: text}))


SOURCES = st.sampled_from(["toml", "env", "set"])


def test_every_int_key_of_seconds_takes_durations() -> None:
    found = {key for key, field in _seconds_keys(settings_model()) if field.annotation is int}
    assert found == set(WHOLE_SECONDS_KEYS)


@pytest.mark.parametrize("key", sorted(SECONDS_KEYS))
@settings(max_examples=25, deadline=None)
@given(data=st.data(), source=SOURCES)
def test_every_seconds_key_reads_a_duration_the_same_from_every_source(
    key: str, data: st.DataObject, source: str
) -> None:
    text, expected = data.draw(_whole_durations(SECONDS_KEYS[key]), label="duration")
    value = functools.reduce(getattr, key.split("."), _load(source, key, text))
    if key in WHOLE_SECONDS_KEYS:
        assert value == expected and type(value) is int
    else:
        assert value == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("key", WHOLE_SECONDS_KEYS)
@settings(max_examples=25, deadline=None)
@given(data=st.data(), source=SOURCES)
def test_a_whole_seconds_key_refuses_a_fraction_naming_the_key(
    key: str, data: st.DataObject, source: str
) -> None:
    low, high = _whole_bounds(SECONDS_KEYS[key])
    seconds = data.draw(st.integers(low, high - 1), label="seconds")
    millis = data.draw(st.integers(1, 999), label="milliseconds")
    text = data.draw(
        st.sampled_from(
            [f"{seconds}.{millis:03d}", f"{seconds}.{millis:03d}s", f"{seconds * 1000 + millis}ms"]
        ),
        label="text",
    )
    with pytest.raises(ConfigError, match=re.escape(key) + ": expected a whole number of seconds"):
        _load(source, key, text)


@pytest.mark.parametrize(
    ("overrides", "hint"),
    [
        ({"exit_margn": "3"}, "did you mean exit_margin?"),
        ({"provider": "local"}, "did you mean providers?"),
        ({"aws": {"spot_intervl": 1}}, "did you mean aws.spot_interval?"),
    ],
)
def test_unknown_keys_name_the_nearest(overrides: dict[str, object], hint: str) -> None:
    with pytest.raises(ConfigError, match="unknown key") as caught:
        load_settings(**overrides)
    assert hint in str(caught.value)


def test_a_secret_under_a_wrong_key_is_not_echoed(tmp_path: Path) -> None:
    config = tmp_path / "f.toml"
    config.write_text('[digitalocean]\npasword = "hunter2-secret"\n')
    with pytest.raises(ConfigError, match=r"digitalocean\.pasword: unknown key") as caught:
        load_settings(config)
    assert "hunter2" not in str(caught.value)


def _unbounded_numbers(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    for name, field in model.model_fields.items():
        if field.annotation not in (float, int, float | None, int | None):
            continue
        if not any(
            isinstance(rule, (annotated_types.Le, annotated_types.Lt)) for rule in field.metadata
        ):
            yield f"{prefix}{name}"


def test_every_duration_and_number_setting_has_an_upper_bound() -> None:
    """A value that loads is one the agent can run with: `exit_margin = 1e17` loaded, then
    stopped the agent at its first notice (OverflowError), and `digitalocean.lead = 1e15`
    failed every start of the watcher."""
    unbounded = list(_unbounded_numbers(Settings))
    for spec in REGISTRY:
        unbounded += _unbounded_numbers(spec.settings, f"{spec.name}.")
    # telemetry_max_bytes too: a huge one never rotated, and `forewarn plan` read it whole.
    assert unbounded == []


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"exit_margin": 1e17}, "exit_margin"),
        ({"digitalocean": {"lead": 1e15}}, "digitalocean.lead"),
        ({"digitalocean": {"max_age": 400 * 86400}}, "digitalocean.max_age"),
    ],
)
def test_a_value_past_its_bound_names_its_key(overrides: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.") + ".*less than or equal"):
        load_settings(**overrides)


_SET_KEYS = st.sampled_from(
    ["exit_margin", "aws", "aws.url", "aws.spot_interval", "webhook", "local.flag_interval", "x"]
)


@settings(max_examples=examples(200), deadline=None)
@given(
    items=st.lists(
        st.builds(
            "{}{}={}".format,
            st.lists(_SET_KEYS | st.text("ax.", max_size=4), min_size=1, max_size=3).map(".".join),
            st.sampled_from(["", "."]),
            st.sampled_from(["3", "30s", "http://127.0.0.1:9", "", "x"]),
        ),
        max_size=4,
    ),
    flag=st.sampled_from([None, 5.0]),
)
def test_any_set_flags_load_or_name_what_is_wrong(items: list[str], flag: float | None) -> None:
    """`--set` items, however they nest or clash with a flag's key, become a configuration or
    a UsageError/ConfigError: `exit_margin.x=3` indexed a float and crashed."""
    overrides: dict[str, Any] = {"exit_margin": flag, "log_level": None}
    try:
        apply_sets(overrides, items)
        load_settings(**overrides)
    except UsageError as error:  # ConfigError included
        assert str(error)


@settings(max_examples=examples(300), deadline=None)
@given(
    items=st.lists(
        st.tuples(
            st.sampled_from(["exit_margin", "providers", "aws.url", "local.flag_interval"]),
            st.sampled_from(["", " ", "5", "30s", "local", "http://127.0.0.1:9"]),
        ),
        max_size=4,
    ),
    margin=st.sampled_from([None, 5.0]),
    providers=st.sampled_from([None, ["local"]]),
)
def test_no_value_on_the_command_line_is_dropped_in_silence(
    items: list[tuple[str, str]], margin: float | None, providers: list[str] | None
) -> None:
    """Every value a flag or a `--set` gives (blank sets nothing) is the one the key gets,
    or the line is refused: `--exit-margin 10s --set exit_margin=20s` took 20 s without a
    word, and `--set exit_margin=` after the flag dropped the flag's 10 s for the default."""
    overrides: dict[str, Any] = {"exit_margin": margin, "providers": providers}
    given: dict[str, list[Any]] = {"exit_margin": [margin], "providers": [providers]}
    for key, value in items:
        given.setdefault(key, []).append(value)
    try:
        apply_sets(overrides, [f"{key}={value}" for key, value in items])
    except UsageError as error:
        assert "given twice on the command line" in str(error)
        return
    for key, values in given.items():
        meant = [value for value in values if value is not None and str(value).strip()]
        assert len(meant) <= 1, (key, values)
        *section, leaf = key.split(".")
        got = (overrides[section[0]] if section else overrides).get(leaf)
        if meant:
            assert got == meant[0], (key, values, got)
        else:
            assert got is None or not str(got).strip(), (key, values, got)


def _number_keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every key of the configuration that holds a number (seconds, a count, a size)."""
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _number_keys(annotation, f"{prefix}{name}.")
        elif annotation in (int, float, int | None, float | None):
            yield prefix + name


NUMBER_KEYS = sorted(_number_keys(settings_model()))


def test_the_number_keys_are_found() -> None:
    assert {"exit_margin", "aws.token_ttl", "webhook.retries", "telemetry_max_bytes"} <= set(
        NUMBER_KEYS
    )


@settings(max_examples=examples(60), deadline=None)
@given(key=st.sampled_from(NUMBER_KEYS), value=st.booleans())
def test_a_toml_boolean_is_not_a_number(key: str, value: bool) -> None:
    """`exit_margin = false` loaded as 0 (and `aws.spot_interval = false` turned the spot
    poll off): a boolean where a number belongs is an error naming the key."""
    *section, leaf = key.split(".")
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "f.toml"
        header = f"[{section[0]}]\n" if section else ""
        config.write_text(f"{header}{leaf} = {str(value).lower()}\n")
        with pytest.raises(ConfigError, match=re.escape(key) + ": expected .*not a boolean"):
            load_settings(config)


@settings(max_examples=examples(500), deadline=None)
@given(
    text=st.text(alphabet="0123456789.+-e _smhdwinfa", max_size=8)
    | st.from_regex(r"\A\s?\d{0,3}\.?\d{0,3}\s?(ms|s|m|h|d|w)?\s?\Z")
)
@example(text="1e3")
@example(text="+5")
@example(text="1_000")
def test_a_flag_and_a_config_key_read_a_duration_the_same(text: str) -> None:
    """README: durations read the same in flags, TOML, FOREWARN_* and --set. A key once read
    plain seconds with float(): `1e3`, `+5` and `nan` loaded from the environment while the
    flag refused them, and the flag refused `.5`. A bare number is the key's as TOML reads
    one, from every source (`1e3`, `+5`, `1_000`: test_config_numbers), and its sign and NaN
    its bounds' to refuse; the rest reads as a duration flag reads it."""
    from forewarn.protocol.wholenumber import toml_number
    from forewarn.providers.settings import seconds

    if not text.strip():
        return  # an empty value is the field's own error
    try:
        flag: float | None = parse_duration(text)
    except ValueError:
        flag = None
    number = toml_number(text)
    if number is not None:
        assert seconds(text) == number or math.isnan(number)
        return
    try:
        key: float | None = seconds(text)
    except ValueError:
        key = None
    assert flag == key


def test_half_a_second_reads_in_every_decimal_form() -> None:
    assert parse_duration(".5") == parse_duration("0.5") == parse_duration("0.5s") == 0.5
    assert parse_duration("5.") == 5 and parse_duration(".5m") == 30
    assert load_settings(exit_margin=".5").exit_margin == 0.5


# Each unit of a duration with every way it is written, and its seconds.
_UNIT_WORDS = [
    (["w", "wk", "wks", "week", "weeks"], 7 * 86400),
    (["d", "day", "days"], 86400),
    (["h", "hr", "hrs", "hour", "hours"], 3600),
    (["m", "min", "mins", "minute", "minutes"], 60),
    (["s", "sec", "secs", "second", "seconds"], 1),
    (["ms"], 0.001),
]


@st.composite
def _compound_durations(draw: st.DrawFn) -> tuple[str, list[str], float]:
    """A duration as people write it (`1h30m`, `2h 30m`, `1 min 30 sec`), its parts, and the
    seconds it means."""
    chosen = draw(st.lists(st.booleans(), min_size=6, max_size=6).filter(any))
    parts: list[str] = []
    seconds = 0.0
    for (words, per), used in zip(_UNIT_WORDS, chosen, strict=True):
        if used:
            count = draw(st.integers(0, 999))
            gap = draw(st.sampled_from(["", " "]))
            parts.append(f"{count}{gap}{draw(st.sampled_from(words))}")
            seconds += count * per
    joiner = draw(st.sampled_from(["", " ", "  "]))
    return joiner.join(parts), parts, seconds


@settings(max_examples=examples(300), deadline=None)
@given(_compound_durations())
def test_a_compound_duration_is_the_sum_of_its_parts(drawn: tuple[str, list[str], float]) -> None:
    """`1h30m`, `2h 30m`, `10min`, `10sec` and `90 s` were refused by every flag and key."""
    text, parts, seconds = drawn
    assert parse_duration(text) == pytest.approx(seconds, rel=1e-12, abs=1e-9)
    assert parse_duration(text) == pytest.approx(sum(map(parse_duration, parts)), rel=1e-12)


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(0, 10**7))
def test_whole_seconds_written_as_days_hours_minutes_read_back(total: int) -> None:
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{days}d{hours}h{minutes}m{secs}s"
    assert parse_duration(text) == total
    if total <= 86400:  # exit_margin's bound
        assert load_settings(exit_margin=text).exit_margin == total


@settings(max_examples=examples(200), deadline=None)
@given(weeks=st.integers(0, 10**4), word=st.sampled_from(["w", "wk", "week", "weeks", " W"]))
def test_a_week_is_seven_days_in_every_flag_and_key(weeks: int, word: str) -> None:
    """`--mtbi 1w` (an interruption a week) was refused: "unknown unit 'w'". A week is
    always 7 days (a month, 28 to 31, and a year are still no unit)."""
    assert parse_duration(f"{weeks}{word}") == parse_duration(f"{7 * weeks}d") == weeks * 604800
    assert parse_duration(f"{weeks}{word} 1d") == (7 * weeks + 1) * 86400


def test_a_month_or_a_year_is_still_no_unit() -> None:
    for text, says in (
        ("1M", "a minute or a month"),
        ("1mo", "unknown unit 'mo'"),
        ("1y", "unknown unit 'y'"),
    ):
        with pytest.raises(ValueError, match=re.escape(says)):
            parse_duration(text)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("1d1w", "largest unit down"),
        ("1m30", "needs its unit"),
        ("1h 30", "needs its unit"),
        ("30m1h", "largest unit down"),
        ("1m1m", "largest unit down"),
        ("10 mns", "unknown unit 'mns'"),
        ("1h,30m", "not a duration"),
        ("-1h30m", "not a duration"),
    ],
)
def test_an_ambiguous_or_malformed_duration_says_why(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        parse_duration(text)
    with pytest.raises(ConfigError, match="exit_margin: .*" + re.escape(says)):
        load_settings(exit_margin=text)


def _path_keys(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _path_keys(annotation, f"{prefix}{name}.")
        elif "Path" in str(annotation):
            yield prefix + name, field


PATH_KEYS = dict(_path_keys(settings_model()))


def test_the_path_keys_are_found() -> None:
    assert {"runtime_dir", "state_dir", "local.flag_file", "kubernetes.token_file"} <= set(
        PATH_KEYS
    )


@settings(max_examples=examples(60), deadline=None)
@given(key=st.sampled_from(sorted(PATH_KEYS)), source=SOURCES, blank=st.sampled_from(["", " "]))
def test_an_empty_path_is_the_keys_default_from_every_source(
    key: str, source: str, blank: str
) -> None:
    """`FOREWARN_RUNTIME_DIR=` (an env file's empty line) made the agent bind its sockets in
    its working directory, Path(""), while every client read the empty variable as unset
    and looked in the default runtime directory."""
    value = functools.reduce(getattr, key.split("."), _load(source, key, blank))
    assert value == PATH_KEYS[key].get_default(call_default_factory=True)


TOP_LEVEL = [
    name
    for name, field in Settings.model_fields.items()
    if not (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel))
]


@settings(max_examples=examples(80), deadline=None)
@given(data=st.data(), key=st.sampled_from(TOP_LEVEL))
def test_a_top_level_variable_one_typo_away_is_named_not_ignored(
    data: st.DataObject, key: str
) -> None:
    """pydantic-settings ignores an unknown FOREWARN_ variable, so FOREWARN_EXIT_MARGN=5
    left the margin at 30 s in silence."""
    name = key.upper()
    at = data.draw(st.integers(0, len(name) - 1), label="at")
    typo = data.draw(
        st.sampled_from([name[:at] + name[at + 1 :], name[:at] + "X" + name[at:]]), label="typo"
    )
    if typo in {other.upper() for other in Settings.model_fields}:
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(f"FOREWARN_{typo}", "5")
        with pytest.raises(ConfigError, match=rf"environment FOREWARN_{typo}: not a setting"):
            load_settings()


SECTION_VARIABLES = [
    env.removeprefix("FOREWARN_") for key, env, _, _ in settings_keys() if "." in key
]


@settings(max_examples=examples(100), deadline=None)
@given(data=st.data(), name=st.sampled_from(SECTION_VARIABLES))
def test_a_variable_with_a_typo_in_its_section_is_named_not_ignored(
    data: st.DataObject, name: str
) -> None:
    """A typo in a section's name was ignored in silence: FOREWARN_DIGITAL_OCEAN_IMAP_HOST
    left the mailbox unwatched, FOREWARN_KUBERNETS_EVENTS=true the Events off."""
    section = name.split("_")[0] if not name.startswith("DIGITALOCEAN") else "DIGITALOCEAN"
    at = data.draw(st.integers(0, len(section) - 1), label="at")
    edit = data.draw(
        st.sampled_from(
            [section[:at] + section[at + 1 :], section[:at] + "X" + section[at:], section + "S"]
        ),
        label="typo",
    )
    typo = edit + name[len(section) :]
    known = {env.removeprefix("FOREWARN_") for _, env, _, _ in settings_keys()}
    sections = {key.split(".")[0].upper() for key, *_ in settings_keys() if "." in key}
    if typo in known or any(typo.startswith(other + "_") for other in sections):
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("FOREWARN_CONFIG", raising=False)
        patch.setenv(f"FOREWARN_{typo}", "1")
        with pytest.raises(ConfigError, match=rf"environment FOREWARN_{typo}: not a setting"):
            load_settings()


def test_a_section_name_typo_names_the_variable_meant(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FOREWARN_CONFIG", raising=False)
    monkeypatch.setenv("FOREWARN_DIGITAL_OCEAN_IMAP_HOST", "127.0.0.1")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value) == (
        "environment FOREWARN_DIGITAL_OCEAN_IMAP_HOST: not a setting "
        "(did you mean FOREWARN_DIGITALOCEAN_IMAP_HOST?)"
    )


def test_variables_of_the_client_and_far_from_any_key_are_not_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("CHECKPOINT_URL", "CHECKPOINT_KEEP", "EXAMPLE_INTERVAL"):
        monkeypatch.setenv(f"FOREWARN_{name}", "x")
    monkeypatch.delenv("FOREWARN_CONFIG", raising=False)
    assert load_settings().exit_margin == 30


@pytest.mark.parametrize("name", ["CONFIG_FILE", "CONFIG_PATH", "CONFIGFILE", "config_file"])
def test_a_config_file_variable_misnamed_is_named_not_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Every FOREWARN_CONFIG... passed as the agent's own: FOREWARN_CONFIG_FILE (as other
    tools name theirs) started the agent without the file, in silence: its providers, webhook
    and mailbox unset, reclaim mails unwatched."""
    config = tmp_path / "forewarn.toml"
    config.write_text("exit_margin = 90\n")
    monkeypatch.delenv("FOREWARN_CONFIG", raising=False)
    monkeypatch.setenv(f"FOREWARN_{name}", str(config))
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"environment FOREWARN_{name}: not a setting (did you mean FOREWARN_CONFIG?)"
    )


@settings(max_examples=examples(150), deadline=None)
@given(
    value=st.sampled_from(["", " ", "~", "~/run", "~root/run", "~nobody-such/x", "run", "/r"])
    | st.text(st.characters(codec="utf-8", exclude_characters="\x00="), max_size=12)
)
def test_the_agent_and_its_clients_agree_on_the_runtime_directory(value: str) -> None:
    """FOREWARN_RUNTIME_DIR is read by the agent's configuration and by every client
    (`wire.runtime_dir`): a blank one, or one starting `~`, was read differently by each,
    so the agent served where no client looked."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FOREWARN_RUNTIME_DIR", value)
        if re.search(r"\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_])", value):
            # A shell variable nothing expands (`$HOME/run`): the agent refuses it, naming it
            # (test_path_variables.py), so no agent serves where a client would look.
            with pytest.raises(ConfigError, match="which nothing expands here"):
                load_settings()
            return
        assert load_settings().resolved_runtime_dir() == runtime_dir()


@pytest.mark.parametrize("blank", ["", " "])
@pytest.mark.parametrize("key", ["runtime_dir", "events", "control", "state_dir"])
def test_a_blank_variable_leaves_the_config_files_value_as_the_clients_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, blank: str
) -> None:
    """`FOREWARN_RUNTIME_DIR=` or `FOREWARN_EVENTS=` (a compose file's `${VAR}` left unset,
    an env file's empty line) beside a config file that sets the key: the clients read the
    blank variable as unset and used the file's value, the agent took it for the default and
    served in /run/forewarn, or on `<runtime>/events`, where no client looked: a drain
    published that no job heard. The state directory went back to the default too."""
    runtime = tmp_path / "from-file"
    config = tmp_path / "forewarn.toml"
    config.write_text(
        f'runtime_dir = "{runtime}"\nstate_dir = "{tmp_path / "state"}"\n'
        f'events = "ipc://{runtime}/ev"\ncontrol = "ipc://{runtime}/ctl"\n'
    )
    monkeypatch.setenv("FOREWARN_CONFIG", str(config))
    monkeypatch.setenv(f"FOREWARN_{key.upper()}", blank)
    settings = load_settings()
    assert settings.resolved_runtime_dir() == runtime_dir() == runtime
    endpoints = (f"ipc://{runtime}/ev", f"ipc://{runtime}/ctl")
    assert settings.resolved_endpoints() == default_endpoints() == endpoints
    assert settings.resolved_state_dir() == tmp_path / "state"
    assert settings.overridden == []


@pytest.mark.parametrize("around", ["\n", "\r\n", " "])
def test_a_path_or_endpoint_loses_the_newline_a_configmap_block_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, around: str
) -> None:
    """A ConfigMap written as a YAML block (`FOREWARN_RUNTIME_DIR: |`, or a key made with
    `--from-file`) ends its value with a newline: the agent and the clients took it as part of
    the path, and in a pod each made `/run/forewarn\\n` in its own container instead of using
    the shared volume at /run/forewarn: the job never heard the agent. The state went to a
    directory of the container's own, lost with it at a restart."""
    runtime, state = tmp_path / "run", tmp_path / "state"
    monkeypatch.setenv("FOREWARN_RUNTIME_DIR", f"{runtime}{around}")
    monkeypatch.setenv("FOREWARN_STATE_DIR", f"{state}{around}")
    settings = load_settings()
    assert settings.resolved_runtime_dir() == runtime_dir() == runtime
    assert settings.resolved_state_dir() == state
    for key in ("events", "control"):
        monkeypatch.setenv(f"FOREWARN_{key.upper()}", f"ipc://{runtime}/{key}-x{around}")
    endpoints = (f"ipc://{runtime}/events-x", f"ipc://{runtime}/control-x")
    assert load_settings().resolved_endpoints() == default_endpoints() == endpoints


def test_a_path_key_starting_with_a_tilde_is_in_the_home_directory(tmp_path: Path) -> None:
    config = tmp_path / "f.toml"
    config.write_text('state_dir = "~/forewarn-state"\n[local]\nflag_file = "~/flag"\n')
    settings = load_settings(config)
    assert settings.state_dir == Path.home() / "forewarn-state"
    assert settings.local.flag_file == Path.home() / "flag"


@settings(max_examples=examples(60), deadline=None)
@given(
    key=st.sampled_from(["runtime_dir", "state_dir"]),
    # A path loses the space around it (a ConfigMap's newline): the tail has none.
    tail=st.text(st.characters(codec="utf-8", exclude_characters="\x00/"), min_size=1, max_size=12)
    .map(lambda text: text.strip(string.whitespace))
    .filter(bool),
)
def test_a_path_flag_starting_with_a_tilde_is_in_the_home_directory(key: str, tail: str) -> None:
    """No shell expands the `~` of `--state-dir=~/fw`: the flag's Path reached the agent as
    `~/fw`, a directory named `~` in its working directory, while TOML, FOREWARN_* and the
    clients read the same text as the home directory."""
    settings = load_settings(**{key: Path("~") / tail})
    assert getattr(settings, key) == Path.home() / tail


def test_a_config_file_named_with_a_tilde_is_in_the_home_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`FOREWARN_CONFIG=~/forewarn.toml` (systemd's Environment=, docker -e: no shell) and
    `--config=~/forewarn.toml` were 'not found'."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "forewarn.toml").write_text("exit_margin = 7\n")
    monkeypatch.setenv("FOREWARN_CONFIG", "~/forewarn.toml")
    assert load_settings().exit_margin == 7
    monkeypatch.delenv("FOREWARN_CONFIG")
    assert load_settings(Path("~/forewarn.toml")).exit_margin == 7


@pytest.mark.parametrize(
    ("toml", "key"), [("aws = 5", "aws"), ('webhook = "x"', "webhook"), ("local = [1]", "local")]
)
def test_a_value_where_a_section_belongs_says_it_is_a_section(
    tmp_path: Path, toml: str, key: str
) -> None:
    """The message was pydantic's 'a valid dictionary or instance of Settings': a class."""
    config = tmp_path / "f.toml"
    config.write_text(toml + "\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    text = str(caught.value)
    said = f"config file {config}: config key {key}: a section, not a value: set its keys"
    assert text.startswith(f"{said} ([{key}]")
    assert "instance of" not in text


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("FOREWARN_WEBHOOK", "https://hooks.example.org/s3cr3t"),
        ("FOREWARN_AWS", "http://[::1]:1338"),
    ],
)
def test_a_variable_where_a_section_belongs_says_it_is_a_section(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    """`FOREWARN_WEBHOOK=<url>` got 'error parsing value for field "webhook" from source
    "EnvSettingsSource"', which says neither that it is a section nor which variable to set."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    key = variable.removeprefix("FOREWARN_").lower()
    section = settings_model().model_fields[key].annotation
    first = next(iter(section.model_fields)).upper()  # type: ignore[union-attr]
    assert str(caught.value) == (
        f"environment {variable}: {key} is a section, not a value: set its keys "
        f"({variable}_<KEY>, such as {variable}_{first})"
    )
    assert "s3cr3t" not in str(caught.value)


def test_a_file_key_a_variable_or_flag_overrides_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The systemd unit sets FOREWARN_STATE_DIR and FOREWARN_METRICS_ADDRESS, the image more:
    the same key edited in the config file was ignored without a word."""
    config = tmp_path / "f.toml"
    config.write_text(
        'state_dir = "/x"\nExit_Margin = 20\nheartbeat_interval = 1.5\n'
        '[webhook]\nurl = "http://u:pw@127.0.0.1:9/secret"\nretries = 2\n'
        "[aws]\ntimeout = 3\n"
    )
    monkeypatch.setenv("FOREWARN_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("FOREWARN_WEBHOOK_URL", "http://127.0.0.1:9/y")
    settings = load_settings(config, exit_margin=5, aws={"timeout": "4"})
    assert settings.overridden == [
        f"config key state_dir: the environment variable FOREWARN_STATE_DIR overrides its "
        f"value in {config}",
        f"config key Exit_Margin: a command-line option overrides its value in {config}",
        f"config key webhook.url: the environment variable FOREWARN_WEBHOOK_URL overrides its "
        f"value in {config}",
        f"config key aws.timeout: a command-line option overrides its value in {config}",
    ]
    assert "pw" not in " ".join(settings.overridden)
    monkeypatch.delenv("FOREWARN_STATE_DIR")
    monkeypatch.delenv("FOREWARN_WEBHOOK_URL")
    assert load_settings(config).overridden == []


def test_a_variable_that_gives_the_files_own_value_is_not_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Kubernetes manifests set FOREWARN_RUNTIME_DIR, _STATE_DIR and _LOG_FORMAT to what
    the image's config file says: a warning that each overrides the file at every start,
    where nothing changed. A different value is still named."""
    config = tmp_path / "f.toml"
    config.write_text(
        f'runtime_dir = "{tmp_path}"\nlog_format = "json"\nallow_remote = true\n'
        "exit_margin = 20\n[aws]\ntimeout = 3\n"
    )
    for variable, value in [
        ("FOREWARN_RUNTIME_DIR", f"{tmp_path}\n"),
        ("FOREWARN_LOG_FORMAT", "json"),
        ("FOREWARN_ALLOW_REMOTE", "true"),
        ("FOREWARN_EXIT_MARGIN", "20"),
        ("FOREWARN_AWS_TIMEOUT", "3"),
    ]:
        monkeypatch.setenv(variable, value)
    assert load_settings(config).overridden == []
    monkeypatch.setenv("FOREWARN_LOG_FORMAT", "text")
    assert load_settings(config).overridden == [
        f"config key log_format: the environment variable FOREWARN_LOG_FORMAT overrides its "
        f"value in {config}"
    ]


def _other_case(draw: st.DrawFn, key: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(key), max_size=len(key)))
    mangled = "".join(c.swapcase() if flip else c for c, flip in zip(key, flips, strict=True))
    return mangled if mangled != key else key.upper()


SECTIONS = [name for name in settings_model().model_fields if name not in TOP_LEVEL]


@settings(max_examples=examples(60), deadline=None)
@given(data=st.data(), section=st.sampled_from(SECTIONS))
def test_a_section_key_in_another_case_names_the_key(data: st.DataObject, section: str) -> None:
    """`[webhook] URL = ...` was 'unknown key' with no suggestion: difflib finds nothing
    close to `URL` in `url`."""
    leaf = data.draw(st.sampled_from(sorted(_field_names(section))), label="leaf")
    wrong = data.draw(st.composite(lambda draw: _other_case(draw, leaf))(), label="wrong")
    with pytest.raises(ConfigError) as caught:
        load_settings(**{section: {wrong: "1"}})
    assert f"config key {section}.{wrong}: unknown key (did you mean {section}.{leaf}?)" in str(
        caught.value
    )


def _field_names(section: str) -> list[str]:
    annotation = settings_model().model_fields[section].annotation
    assert isinstance(annotation, type) and issubclass(annotation, BaseModel)
    return list(annotation.model_fields)


@settings(max_examples=examples(60), deadline=None)
@given(
    data=st.data(),
    key=st.sampled_from([*TOP_LEVEL, *SECTIONS]),
    source=st.sampled_from(["toml", "set"]),
)
def test_a_key_given_twice_in_different_case_is_refused(
    data: st.DataObject, key: str, source: str
) -> None:
    """Top-level keys and section names are read in any case; `[AWS]` then `[aws]` (or
    `exit_margin` then `EXIT_MARGIN`) kept one of the two in silence."""
    other = data.draw(st.composite(lambda draw: _other_case(draw, key))(), label="other")
    section = key in SECTIONS
    if source == "set":
        value: object = {"x": "1"} if section else "1"
        given = {key: value, other: value}
        with pytest.raises(ConfigError, match=f"config key {other}: set twice in the command"):
            load_settings(**given)
        return
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "f.toml"
        if section:
            config.write_text(f"[{key}]\n[{other}]\n")
        else:
            config.write_text(f'{key} = "1"\n{other} = "1"\n')
        with pytest.raises(ConfigError, match=f"config key {other}: set twice in config file"):
            load_settings(config)


def test_a_top_level_key_or_section_in_another_case_is_read(tmp_path: Path) -> None:
    config = tmp_path / "f.toml"
    config.write_text("Exit_Margin = 5\n[AWS]\ntimeout = 3\n")
    settings = load_settings(config)
    assert settings.exit_margin == 5 and settings.aws.timeout == 3


@pytest.mark.parametrize(
    ("written", "level"),
    [("INFO", "info"), ("Warning", "warning"), ("WARN", "warning"), ("debug\n", "debug")],
)
def test_a_log_level_is_read_as_people_write_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written: str, level: str
) -> None:
    """`FOREWARN_LOG_LEVEL=INFO` (and `--log-level INFO`, `log_level = "WARN"`) stopped the
    agent with exit 2 at every start, for its case alone, while `providers` took any case."""
    monkeypatch.setenv("FOREWARN_LOG_LEVEL", written)
    monkeypatch.setenv("FOREWARN_LOG_FORMAT", written.replace(written.strip(), "JSON"))
    settings = load_settings()
    assert (settings.log_level, settings.log_format) == (level, "json")
    monkeypatch.delenv("FOREWARN_LOG_LEVEL")
    config = tmp_path / "forewarn.toml"
    config.write_text(f"log_level = {json.dumps(written)}\n")  # a TOML basic string
    assert load_settings(config).log_level == level
    args = build_parser("agent").parse_args(["agent", "--log-level", written.strip()])
    assert args.log_level == level


@settings(max_examples=examples(200), deadline=None)
@given(
    seconds=st.floats(min_value=0, max_value=10, allow_nan=False).map(lambda s: f"{s:.3f}"),
    unit=st.sampled_from(["", "s", "ms"]),
    command=st.sampled_from(["wait", "watch"]),
)
def test_an_agent_timeout_is_forever_or_longer_than_a_heartbeat(
    seconds: str, unit: str, command: str
) -> None:
    """`--agent-timeout` within the agent's heartbeat interval (at most 1.5 s) called a live
    agent gone at each late beat: it is refused; 0 waits forever; any longer one is taken."""
    text = seconds + unit
    wanted = parse_duration(text)
    try:
        # The parser `forewarn wait` and `watch` build (only their own arguments): the whole
        # one took 11 ms a build, 2.2 of this test's 2.6 CPU-s.
        args = build_parser(command).parse_args([command, "--agent-timeout", text])
    except UsageError as error:
        assert 0 < wanted <= 1.5, (text, str(error))
        assert "--agent-timeout" in str(error)
        return
    assert args.agent_timeout == wanted and (wanted == 0 or wanted > 1.5)


@settings(max_examples=examples(150), deadline=None)
@given(
    key=st.sampled_from(["exit_margin", "aws.url", "local.flag_interval"]),
    pads=st.lists(st.text(st.sampled_from(" \t"), max_size=2), min_size=4, max_size=4),
)
def test_a_set_key_reads_the_same_with_space_around_its_parts(key: str, pads: list[str]) -> None:
    """`--set "exit_margin = 30"`, as TOML writes a key, set the key `exit_margin `."""
    parts = key.split(".")
    padded = ".".join(
        f"{pads[2 * i % 4]}{part}{pads[(2 * i + 1) % 4]}" for i, part in enumerate(parts)
    )
    plain: dict[str, Any] = {"exit_margin": None}
    spaced: dict[str, Any] = {"exit_margin": None}
    apply_sets(plain, [f"{key}=30"])
    apply_sets(spaced, [f"{padded}= 30"])
    assert spaced.keys() == plain.keys()
    section = spaced[parts[0]] if len(parts) == 2 else spaced
    assert section.keys() == (plain[parts[0]] if len(parts) == 2 else plain).keys()
    assert section[parts[-1]].strip() == "30"


@pytest.mark.parametrize("header", ["agent", "forewarn", "settings"])
def test_top_level_keys_under_a_header_of_their_own_say_to_drop_the_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, header: str
) -> None:
    """`[forewarn]` or `[agent]` above the agent's own keys, as many programs' files have it,
    was 'config key forewarn: unknown key' alone: nothing said the keys themselves exist."""
    monkeypatch.delenv("FOREWARN_CONFIG", raising=False)
    path = tmp_path / "forewarn.toml"
    path.write_text(f'[{header}]\nexit_margin = "2m"\nproviders = ["aws"]\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert str(caught.value) == (
        f"config file {path}: config key {header}: unknown key (exit_margin, providers are "
        "top-level keys: write "
        f"them without the [{header}] header, above any [section])"
    )


@pytest.mark.parametrize("key", ["enabled", "enable", "Enabled", "disabled"])
def test_a_providers_enabled_key_says_providers_chooses_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """`[gcp] enabled = true` was 'unknown key' alone: a watcher runs when `providers` names
    it, and nothing said so."""
    monkeypatch.delenv("FOREWARN_CONFIG", raising=False)
    path = tmp_path / "forewarn.toml"
    path.write_text(f"[gcp]\n{key} = true\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert str(caught.value) == (
        f"config file {path}: config key gcp.{key}: unknown key (a watcher runs when the "
        "top-level key providers "
        'names it: providers = ["gcp"], or "auto")'
    )


@settings(max_examples=examples(60), deadline=None)
@given(
    depth=st.integers(1, 3000),
    shape=st.sampled_from(["array", "table"]),
    key=st.sampled_from(["exit_margin", "providers", "x"]),
)
def test_a_config_file_nested_any_depth_is_read_or_refused_naming_it(
    depth: int, shape: str, key: str
) -> None:
    """tomllib recurses once per level of an inline array or table: a few hundred levels
    (`x = [[[...]]]`) raised RecursionError, and `forewarn agent --config` (and every client
    command that reads the file) ended with a traceback, not a line naming the file."""
    text = (
        f"{key} = " + "[" * depth + "]" * depth
        if shape == "array"
        else f"{key} = " + "{a = " * depth + "1" + "}" * depth
    )
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "deep.toml"
        config.write_text(text + "\n")
        try:
            document = read_toml(config)
        except ConfigFileError as error:
            assert str(error).startswith(f"config file {config}: "), error
            assert "\n" not in str(error), error
        else:
            assert key in document
