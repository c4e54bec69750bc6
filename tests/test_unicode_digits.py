"""Numbers read from files, headers and documents: str.isdigit() is true for superscripts
('²') and other digits int() refuses or reads otherwise, so a ValueError escaped where a
parse error or a plain refusal was meant (a clean-clone run's property test found it in the
Azure parser)."""

from __future__ import annotations

from pathlib import Path

import pytest
from forewarn.agent.config import ConfigError, load_settings
from forewarn.agent.state import load_seq_mark
from forewarn.protocol.timefmt import parse_deadline, parse_time
from forewarn.protocol.wire import EndpointError, check_endpoint
from forewarn.providers.azure.events import parse_document
from forewarn.providers.base import ParseError

ODD_DIGITS = ["²", "①", "٣"]


@pytest.mark.parametrize("digits", ODD_DIGITS)
def test_an_azure_incarnation_in_odd_digits_is_a_parse_error(digits: str) -> None:
    with pytest.raises(ParseError, match="DocumentIncarnation must be an integer"):
        parse_document(f'{{"DocumentIncarnation": "{digits}", "Events": []}}')


@pytest.mark.parametrize("digits", ODD_DIGITS)
def test_a_seq_mark_in_odd_digits_reads_as_none(tmp_path: Path, digits: str) -> None:
    mark = tmp_path / "seq"
    mark.write_text(digits)
    assert load_seq_mark(mark) == 0


@pytest.mark.parametrize("digits", ODD_DIGITS)
def test_a_metrics_port_in_odd_digits_is_refused_naming_it(digits: str) -> None:
    with pytest.raises(ConfigError, match="metrics_address"):
        load_settings(metrics_address=f"127.0.0.1:{digits}")


@pytest.mark.parametrize("digits", ODD_DIGITS)
def test_a_tcp_port_in_odd_digits_is_refused_naming_the_endpoint(digits: str) -> None:
    # isdigit() took them: '²' was "unexpected ValueError" from int(), and '٣', which int()
    # reads as 3, reached zmq's bind as "unexpected ZMQError: Invalid argument".
    endpoint = f"tcp://127.0.0.1:{digits * 4}"
    with pytest.raises(
        EndpointError, match=r"control 'tcp://127\.0\.0\.1:.*expected tcp://HOST:PORT"
    ):
        check_endpoint(endpoint, what="control")


@pytest.mark.parametrize("digits", ODD_DIGITS)
def test_a_time_in_odd_digits_is_no_time(digits: str) -> None:
    # `\d` took '٣' (int() reads it as 3): "٣٣٣٣-12-06T09:00:00Z" was a deadline to the Python
    # client, and to the C subscriber, which reads ASCII, no time.
    for text in (f"{digits * 4}-12-06T09:00:00Z", f"2026-12-06T09:00:00+0{digits}:00"):
        with pytest.raises(ValueError, match="not an RFC 3339 time"):
            parse_time(text)
        with pytest.raises(ValueError, match=r"^not an RFC 3339 time"):
            parse_deadline(text)
