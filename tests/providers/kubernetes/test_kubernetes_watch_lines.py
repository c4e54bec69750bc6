"""The watch stream's line reader (`fetch.lines`): lines as the server ended them, however
the bytes were cut into chunks, and a bounded cost for a hostile line."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator

import httpx
from forewarn.providers.fetch import AnswerTooLarge, StreamCut, lines
from hypothesis import given
from hypothesis import strategies as st


class Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


async def read(chunks: list[bytes], max_line: int) -> tuple[list[str], bool]:
    """The lines read, and whether the reader refused a line as too long. A stream cut in the
    middle of a line must raise StreamCut, after the whole lines."""
    out: list[str] = []
    try:
        async for line in lines(httpx.Response(200, stream=Chunks(chunks)), max_line):
            out.append(line)
    except AnswerTooLarge:
        return out, True
    except StreamCut:
        assert not b"".join(chunks).endswith(b"\n")
        assert b"".join(chunks).split(b"\n")[-1].strip()
        return out, False
    assert not b"".join(chunks).split(b"\n")[-1].strip(), "a cut stream read as whole"
    return out, False


def expected(data: bytes) -> list[str]:
    """The lines the server ended with a newline (a part after the last one is no line)."""
    parts = data.split(b"\n")
    parts.pop()
    return [part.decode("utf-8", errors="replace") for part in parts]


def cut(stream: bytes, data: st.DataObject) -> list[bytes]:
    """`stream` cut into chunks at drawn places (empty chunks included)."""
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)))))
    return [stream[a:b] for a, b in itertools.pairwise([0, *cuts, len(stream)])]


# Bytes heavy in newlines and multi-byte UTF-8 (cut across chunks), with a few invalid bytes.
pieces = st.lists(
    st.sampled_from([b"\n", b"a", b"{}", "é".encode(), "😀".encode(), b"\xff", b"\r\n"]),
    max_size=60,
)


@given(pieces, st.data())
def test_lines_are_the_stream_split_at_newlines_however_it_is_chunked(
    parts: list[bytes], data: st.DataObject
) -> None:
    stream = b"".join(parts)
    chunks = cut(stream, data)
    got, refused = asyncio.run(read(chunks, max_line=1 << 20))
    assert not refused
    assert got == expected(stream)


@given(pieces, st.data(), st.integers(1, 40))
def test_a_line_too_long_is_refused_and_the_lines_before_it_are_kept(
    parts: list[bytes], data: st.DataObject, max_line: int
) -> None:
    stream = b"".join(parts)
    chunks = cut(stream, data)
    got, refused = asyncio.run(read(chunks, max_line))
    whole = expected(stream)
    assert got == whole[: len(got)]  # never a line cut short, or made up
    longest = max((len(line) for line in stream.split(b"\n")), default=0)
    largest_chunk = max((len(chunk) for chunk in chunks), default=0)
    if refused:
        assert longest > max_line  # only for a line that is too long
    else:
        assert got == whole
    if longest > max_line + largest_chunk:
        assert refused  # the buffer is bounded by the limit and one chunk


def test_a_huge_line_dribbled_in_small_chunks_costs_linear_time() -> None:
    """A hostile (or badly proxied) server sends a 4 MiB node object a few bytes at a time.
    Found: each chunk searched the whole partial line again for its end, 0.8 CPU-seconds for
    250-byte chunks and over 10 for 16-byte ones, the agent's event loop busy all along."""
    size, chunk = 4 << 20, 16
    chunks = [b"x" * chunk] * (size // chunk) + [b"\n"]
    started = time.process_time()
    got, refused = asyncio.run(read(chunks, max_line=size + 1))
    spent = time.process_time() - started
    assert not refused and len(got) == 1 and len(got[0]) == size
    assert spent < 5.0, f"{spent:.1f} CPU-seconds to read one 4 MiB line in {chunk}-byte chunks"
