"""A chunk's size and a Content-Length are read as RFC 9112 and RFC 9110 write them, and any
other text is refused naming it: `int(text, 16)` took `0x10`, `1_0`, a sign and space."""

from __future__ import annotations

import re

import pytest
from forewarn.providers.httpframing import FramingError, chunk_size, content_length
from hypothesis import example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from support import examples

_HEX = re.compile(rb"[0-9A-Fa-f]{1,18}")
_DIGITS = re.compile(rb"[0-9]{1,18}")
# The bytes a size is made of, and those that pass for one to `int`.
_NEAR = st.binary(max_size=30) | st.text(
    alphabet="0123456789abcdefABCDEFxX_+- \t\r\n;=\u0665\u00b2", max_size=30
).map(lambda text: text.encode())


@hypothesis_settings(max_examples=examples(300))
@given(_NEAR)
@example(b"0x10")
@example(b"1_0")
@example(b"+a")
@example(b"-0")
@example(b" 5")
@example(b"f" * 400)
def test_a_chunk_size_is_hex_digits_before_its_extensions(line: bytes) -> None:
    size = line.rstrip(b"\r\n").split(b";", 1)[0].rstrip(b" \t")
    digits = size.lstrip(b"0") or b"0"
    try:
        read = chunk_size(line)
    except FramingError as error:
        assert "chunk size" in str(error)
        assert len(str(error)) < 200
        assert not (_HEX.fullmatch(digits) and re.fullmatch(rb"[0-9A-Fa-f]+", size))
    else:
        assert re.fullmatch(rb"[0-9A-Fa-f]+", size), line
        assert read == int(size, 16)


@pytest.mark.parametrize(
    ("line", "size"),
    [(b"1a\r\n", 26), (b"5;ext=1\r\n", 5), (b"5 ;ext\r\n", 5), (b"0\r\n", 0), (b"00ff\n", 255)],
)
def test_a_chunk_size_as_servers_write_it_is_read(line: bytes, size: int) -> None:
    assert chunk_size(line) == size


@hypothesis_settings(max_examples=examples(300))
@given(_NEAR | st.text(max_size=30))
@example("\u00b2")
@example("\u0661\u0662")
@example("+2")
@example("2_0")
@example(" 12 ")
@example("9" * 5000)
def test_a_content_length_is_the_digits_0_to_9(value: bytes | str) -> None:
    written = value.encode("latin-1", "replace") if isinstance(value, str) else value
    digits = written.strip(b" \t")
    try:
        read = content_length(value)
    except FramingError as error:
        assert "Content-Length" in str(error)
        assert len(str(error)) < 200
        assert not _DIGITS.fullmatch(digits.lstrip(b"0") or b"0") or not digits.isdigit()
    else:
        assert re.fullmatch(rb"[0-9]+", digits), value
        assert read == int(digits)
