"""An ack's `client` is named in every heartbeat's `acked_by` (16 per notice, 64 manual
notices). At most 200 characters, but of any width: 200 four-byte characters made each name
800 bytes, a heartbeat of 855 kB, and a subscriber stopped with 1,000 of them queued took
the agent from 57 MB to 505 MB. The id is bounded in UTF-8 bytes (200), refused at the ack
with a reply naming the limit, by the client library and `forewarn ack --client` alike."""

from __future__ import annotations

import subprocess

from forewarn.agent.protocol import CONTROL_REQUEST, client_id_problem
from forewarn.protocol.wire import client_id_problem as wire_problem
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import ValidationError
from support import forewarn_cmd

_ONE_LINE = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), min_codepoint=0x20).filter(
        lambda char: char != "\x7f"
    ),
    min_size=1,
    max_size=200,
)


@given(_ONE_LINE)
@example("\U0001d538" * 50)
@example("\U0001d538" * 51)
@example("\u00e9" * 100 + "x")
@example("x" * 200)
def test_a_client_id_is_taken_exactly_when_its_utf8_fits_200_bytes(client: str) -> None:
    size = len(client.encode())
    request = {"op": "ack", "client": client}
    if size <= 200:
        assert client_id_problem(client) is None and wire_problem(client) is None
        CONTROL_REQUEST.validate_python(request)
        return
    for problem in (client_id_problem(client), wire_problem(client)):
        assert problem is not None and "200 bytes" in problem, problem
    try:
        CONTROL_REQUEST.validate_python(request)
    except ValidationError as error:
        assert "200 bytes" in str(error)
    else:
        raise AssertionError(f"{size} bytes taken")


def test_forewarn_ack_refuses_a_wide_client_naming_the_limit() -> None:
    done = subprocess.run(
        forewarn_cmd("ack", "--client", "\U0001d538" * 60, "--timeout", "1s"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "--client" in done.stderr and "200 bytes" in done.stderr, done.stderr
