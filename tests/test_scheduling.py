"""The order that starts each xdist worker with its share of the long tests
(tests/scheduling.py), checked against xdist's own worksteal scheduler."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from scheduling import long_first, slice_sizes
from xdist.scheduler.worksteal import WorkStealingScheduling


@dataclass(eq=False)
class _Node:
    """The part of xdist's WorkerController the scheduler talks to."""

    name: str
    sent: list[int] = field(default_factory=list)
    shutting_down: bool = False

    @property
    def gateway(self) -> Any:
        return type("Gateway", (), {"id": self.name})()

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += indices

    def send_steal(self, indices: list[int]) -> None:
        pass

    def shutdown(self) -> None:
        self.shutting_down = True


class _Config:
    def __init__(self, workers: int) -> None:
        self.workers = workers

    def getvalue(self, name: str) -> Any:
        assert name == "tx"
        return [f"{self.workers}*popen"]


def _first_slices(total: int, workers: int) -> list[list[int]]:
    scheduler = WorkStealingScheduling(_Config(workers))  # type: ignore[arg-type]
    nodes = [_Node(f"gw{k}") for k in range(workers)]
    collection = [f"test_{i}" for i in range(total)]
    for node in nodes:
        scheduler.add_node(node)  # type: ignore[arg-type]
    for node in nodes:
        scheduler.add_node_collection(node, collection)  # type: ignore[arg-type]
    scheduler.schedule()
    return [node.sent for node in nodes]


@given(total=st.integers(0, 3000), workers=st.integers(1, 16))
def test_the_slices_are_the_ones_xdist_worksteal_sends_first(total: int, workers: int) -> None:
    sent = _first_slices(total, workers)
    assert slice_sizes(total, workers) == [len(indices) for indices in sent]
    # Each worker's slice is contiguous, in worker order: what long_first relies on.
    assert [index for indices in sent for index in indices] == list(range(total))


@given(
    seconds=st.lists(st.one_of(st.just(0.0), st.floats(1, 60)), max_size=200),
    workers=st.integers(0, 12),
)
def test_every_worker_starts_with_its_long_tests_and_nothing_is_lost(
    seconds: list[float], workers: int
) -> None:
    items = list(range(len(seconds)))
    ordered = long_first(items, workers, lambda i: seconds[i])
    assert sorted(ordered) == items
    short = [i for i in ordered if seconds[i] <= 0]
    assert short == sorted(short), "the short tests keep their collection order"
    if workers < 2:
        assert ordered == items
        return
    start = 0
    heads = []
    for size in slice_sizes(len(items), workers):
        chunk = ordered[start : start + size]
        start += size
        head = [i for i in chunk if seconds[i] > 0]
        assert chunk[: len(head)] == head, "a slice's long tests come first"
        assert [seconds[i] for i in head] == sorted((seconds[i] for i in head), reverse=True)
        heads.append(sum(seconds[i] for i in head))
    longest = max((s for s in seconds if s > 0), default=0.0)
    if sum(1 for s in seconds if s > 0) <= min(slice_sizes(len(items), workers)):
        # Greedy, longest first: no slice ends more than one long test above another.
        assert max(heads) - min(heads) <= longest + 1e-9


def test_ten_long_tests_of_one_module_are_spread_over_eight_workers() -> None:
    # As the fault matrix's ten tests are: not left in the one slice their module falls in.
    assert slice_sizes(1696, 8) == [212] * 8
    matrix = [f"matrix[{i}]" for i in range(10)]
    items = [f"t{i}" for i in range(1000)] + matrix + [f"u{i}" for i in range(686)]
    ordered = long_first(items, 8, lambda name: 30.0 if name.startswith("matrix") else 0.0)
    firsts = [ordered[k * 212] for k in range(8)]
    assert all(name.startswith("matrix") for name in firsts)
