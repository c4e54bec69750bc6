"""What a long-polling observer published of a run of flips (`gcp_detection`): the flips it
published while in force, those merged (undone before its next answer), and whether it ever
published a wrong state. Stdlib only, so the suite can hold the counting to its word."""

from __future__ import annotations

import itertools


class Published:
    """What one long-polling observer published of the flips, against what was made."""

    def __init__(self, changes: list[float], notices: list[tuple[float, str]]) -> None:
        expected = ["drain" if index % 2 == 0 else "clear" for index in range(len(changes))]
        actions = [action for _, action in notices]
        alternating = all(a != b for a, b in itertools.pairwise(actions))
        # A wrong state, not a merge: the same action twice in a row, a first notice other
        # than the first flip's, or a last one other than the simulator's final value.
        self.wrong = not (
            alternating and actions[:1] == expected[:1] and actions[-1:] == expected[-1:]
        )
        # A flip is published if a notice of its action comes before the next flip.
        self.latencies: list[float] = []
        for index, change in enumerate(changes):
            until = changes[index + 1] if index + 1 < len(changes) else float("inf")
            seen = [t for t, action in notices if change <= t < until and action == expected[index]]
            if seen:
                self.latencies.append((seen[0] - change) * 1000)
        self.merged = len(changes) - len(self.latencies)
        # The longest time the published state (drained or not) differed from the made one.
        events = sorted(
            [(t, "made", index % 2 == 0) for index, t in enumerate(changes)]
            + [(t, "published", action == "drain") for t, action in notices]
        )
        made = published = False
        since: float | None = None
        self.longest_behind = 0.0
        for t, who, drained in events:
            if who == "made":
                made = drained
            else:
                published = drained
            if made != published and since is None:
                since = t
            elif made == published and since is not None:
                self.longest_behind = max(self.longest_behind, (t - since) * 1000)
                since = None
        if since is not None:
            self.longest_behind = float("inf")


__all__ = ["Published"]
