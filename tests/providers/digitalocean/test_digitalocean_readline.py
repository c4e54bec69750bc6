"""The IMAP session's line reader over a real socket: lines are the same whatever the
network's chunks, and a line still incomplete past its deadline is an error."""

from __future__ import annotations

import imaplib
import socket
import threading
import time

import pytest
from forewarn.providers.digitalocean.imap import _Buffered
from hypothesis import given, settings
from hypothesis import strategies as st


class _Reader(_Buffered):
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._rbuf = bytearray()


@settings(max_examples=50, deadline=None)
@given(
    lines=st.lists(
        st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"") + b"\r\n"),
        min_size=1,
        max_size=6,
    ),
    cuts=st.lists(st.integers(min_value=1, max_value=30), max_size=10),
)
def test_lines_are_read_whole_whatever_the_chunks_within_their_deadline(
    lines: list[bytes], cuts: list[int]
) -> None:
    data = b"".join(lines)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.settimeout(5)
        start = 0
        for cut in cuts:  # sent in pieces, as a network may deliver them
            theirs.sendall(data[start : start + cut])
            start += cut
        theirs.sendall(data[start:])
        reader = _Reader(ours)
        until = time.monotonic() + 60
        assert [reader.readline(until) for _ in lines] == lines


def test_a_line_trickled_past_its_deadline_is_an_error() -> None:
    ours, theirs = socket.socketpair()
    stop = threading.Event()

    def trickle() -> None:
        while not stop.is_set():
            theirs.sendall(b"x")
            time.sleep(0.02)

    with ours, theirs:
        ours.settimeout(5)
        sender = threading.Thread(target=trickle, daemon=True)
        sender.start()
        try:
            started = time.monotonic()
            with pytest.raises(imaplib.IMAP4.error, match="in time"):
                _Reader(ours).readline(started + 0.2)
            assert time.monotonic() - started < 1.0
        finally:
            stop.set()
            sender.join()
