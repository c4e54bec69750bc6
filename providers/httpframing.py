"""The numbers that frame an HTTP/1.1 message (RFC 9112): a chunk's size and a Content-Length,
read as the RFC writes them and in no other way. The hand-written readers (the AWS IMDS
transport, the simulators' server) read them with `int(text, 16)` and `str.isdigit`, which
also took `0x10`, `1_0`, a sign, space inside and digits other than 0-9: a body framed so is
read by no other HTTP implementation, and `²` passed `isdigit` only to fail in `int`."""

from __future__ import annotations

import re

from forewarn.protocol.errors import ForewarnError

__all__ = ["MOST_DIGITS", "FramingError", "chunk_size", "content_length"]

_HEXDIG = re.compile(rb"[0-9A-Fa-f]+")
_DIGIT = re.compile(rb"[0-9]+")
# More significant digits than any body these readers take (a megabyte is 6 hex, 7 decimal
# digits): said as too large without `int` of thousands of digits, which is slow and past
# 4,300 decimal ones a ValueError of its own.
MOST_DIGITS = 18
# What a refusal quotes of the text it names.
_QUOTED = 40


class FramingError(ForewarnError, ValueError):
    """A chunk size or Content-Length that is not one: a protocol error of the peer."""


def chunk_size(line: bytes) -> int:
    """The size a chunk's line gives (`1a\\r\\n`, `1a;name=value\\r\\n`): RFC 9112's
    chunk-size is 1*HEXDIG, followed by any extensions after `;` (space before it is BWS).
    FramingError naming the size otherwise."""
    size = line.rstrip(b"\r\n").split(b";", 1)[0].rstrip(b" \t")
    if not _HEXDIG.fullmatch(size):
        raise FramingError(
            f"bad chunk size {size[:_QUOTED]!r}: a chunk size is hexadecimal digits alone "
            "(0-9, a-f; RFC 9112)"
        )
    if len(size.lstrip(b"0")) > MOST_DIGITS:
        raise FramingError(f"chunk size {size[:_QUOTED]!r}... has too many digits")
    return int(size, 16)


def content_length(value: bytes | str) -> int:
    """A Content-Length field's value (space around it allowed, as around any field's):
    RFC 9110's 1*DIGIT, the digits 0-9 alone. FramingError naming it otherwise."""
    written = value.encode("latin-1", "replace") if isinstance(value, str) else value
    digits = written.strip(b" \t")
    if not _DIGIT.fullmatch(digits):
        raise FramingError(
            f"bad Content-Length {value[:_QUOTED]!r}: a length is the digits 0-9 alone (RFC 9110)"
        )
    if len(digits.lstrip(b"0")) > MOST_DIGITS:
        raise FramingError(f"Content-Length {value[:_QUOTED]!r}... has too many digits")
    return int(digits)
