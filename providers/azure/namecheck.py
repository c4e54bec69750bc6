"""Whether a configured `azure.vm_name` is this VM's name in Scheduled Events.

A configured name replaces the instance-metadata lookup. Set to the node's host name
(`aks-gpu-12345678-vmss000003`, what `hostname` and Kubernetes show) where events name the
scale-set instance (`aks-gpu-12345678-vmss_3`), it matched no event: every notice was ignored
and the watcher looked healthy. This keeps what the watcher needs to say so: events are
listed, none has ever named the configured name, and instance metadata's name is among them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .events import ScheduledEvent

# Polls in a row that list events none of which is this VM's before instance metadata is
# asked: one document may hold another VM's event an instant before this VM's own.
UNMATCHED_POLLS = 2


@dataclass
class NameCheck:
    """The configured name (lower-cased) and what the events said of it."""

    configured: str
    matched: bool = False  # an event has named the configured name: it is right
    unmatched_polls: int = 0
    others: frozenset[str] = frozenset()  # resources of the last events that were not ours
    looked_up: frozenset[str] | None = None  # instance metadata's names, once read
    _asked_for: set[frozenset[str]] = field(default_factory=set)

    def saw(self, events: Iterable[ScheduledEvent]) -> None:
        """One good poll's events (whether the document changed or not)."""
        if self.matched:
            return
        resources = {resource.lower() for event in events for resource in event.resources}
        if self.configured in resources:
            self.matched = True
            self.others = frozenset()
            return
        self.others = frozenset(resources)
        self.unmatched_polls = self.unmatched_polls + 1 if resources else 0

    def lookup_due(self) -> bool:
        """Whether instance metadata is to be asked now: events not ours for a while, no name
        read yet, and not already asked for these same events (a failed lookup is tried once
        more when other events come, not at every poll)."""
        return (
            not self.matched
            and self.looked_up is None
            and self.unmatched_polls >= UNMATCHED_POLLS
            and self.others not in self._asked_for
        )

    def asked(self) -> None:
        self._asked_for.add(self.others)

    def mismatch(self) -> str | None:
        """What to say when the configured name is wrong, else None."""
        if self.matched or self.looked_up is None or self.configured in self.looked_up:
            return None
        named = sorted(self.looked_up & self.others)
        if not named:
            return None
        return (
            f"azure.vm_name is {self.configured!r}, but instance metadata names this VM "
            f"{' or '.join(repr(name) for name in sorted(self.looked_up))} and Scheduled "
            f"Events lists events for {', '.join(repr(name) for name in named)}, which are "
            f"ignored: set azure.vm_name to {named[0]!r} (for a scale-set instance "
            "<vmss>_<instance id>, not the host name), or unset it to read it from instance "
            "metadata"
        )


__all__ = ["UNMATCHED_POLLS", "NameCheck"]
