"""The `seq` gap rule every reader of the agent's messages applies (the client library's
`Notices`, `forewarn wait`/`watch`; the C subscriber writes it again in C, and
tests/clients/test_seq_gap_readers.py holds the three to one table).

The agent numbers every message it sends, heartbeats and notices alike, one after the other.
Past the high-water marks (a reader stopped for hours) later ones are dropped: a new notice
lost there is caught by the heartbeats' `active`, but a change of one the reader has (a drain
escalated to terminate) is not, as the heartbeats list the same id. Only the numbers skipped
tell, and the reader then asks for the active notices again. A restarted agent numbers on
from a mark it reserved: that one jump, at its first heartbeat, is no loss.
"""

from __future__ import annotations

# The largest number a reader keeps: the C subscriber's is a signed 64-bit integer.
MAX_SEQ = 2**63 - 1


def seq_number(value: object) -> int | None:
    """`value` as a number the agent gives a message, or None when it is none: a JSON integer
    from 0 to MAX_SEQ. Read otherwise (12.0 or 1e1 as 12 and 10, -3 as a number), one reader
    asked for a replay where another did not."""
    if type(value) is int and 0 <= value <= MAX_SEQ:
        return value
    return None


class SeqGaps:
    """The numbers skipped since they were last asked for, as one range."""

    def __init__(self) -> None:
        self.last: int | None = None  # of the last numbered message read
        # The numbers never arrived, not yet asked for: noted at a notice too, since a notice
        # read after the lost one hides the gap from the next heartbeat.
        self.gap: tuple[int, int] | None = None
        # Separate gaps since the last heartbeat: at a restarted agent's first heartbeat, one
        # is the jump to its reserved mark.
        self.gaps = 0

    def note(self, value: object) -> bool:
        """Note a message's `seq`; True when numbers were skipped before it. A message without
        a number (see `seq_number`) is passed over."""
        seq = seq_number(value)
        if seq is None:
            return False
        last, self.last = self.last, seq
        if last is None or seq <= last + 1:
            return False
        self.gap = (last + 1 if self.gap is None else self.gap[0], seq - 1)
        self.gaps += 1
        return True

    def restarted(self) -> None:
        """At a restarted agent's first heartbeat, its `seq` noted: one gap since the last
        heartbeat is the jump to its mark, a second one is a loss (among its replay, or
        after it), and stays to be asked for."""
        if self.gaps < 2:
            self.gap = None

    def heartbeat_read(self) -> None:
        """A heartbeat was read: the gaps since the last one count from here."""
        self.gaps = 0

    def take(self) -> tuple[int, int] | None:
        """The range to ask for, forgotten here (asked for once)."""
        gap, self.gap = self.gap, None
        return gap
