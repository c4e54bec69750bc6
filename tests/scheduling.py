"""Orders the collected tests so that each xdist worker starts with its share of the long ones.

`--dist worksteal` hands each of W workers one contiguous slice of the collection at the start
and later lets idle workers take the back half of a busy worker's queue. Left in collection
order, the tests that take 20-60 s of wall time (the fault matrix's outages and fault holds,
the reclaim drill, the release build) tend to fall late in a slice, and the run ends with one
or two workers waiting out a 30 s outage while the cores sit idle. Placed first in the slices,
longest first and spread so each slice's total is even, those waits overlap the rest of the
suite. A test declares itself long with `@pytest.mark.slow(seconds)`: the wall time it takes
on the 2-core machine, measured, not a bound.

The slice sizes copy xdist's worksteal scheduler (`check_schedule`: the i-th of W idle workers
gets `len(pending) // (W - i)` tests). If xdist ever slices differently, only the speed-up is
lost: every test still runs exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def slice_sizes(total: int, workers: int) -> list[int]:
    """How many tests worksteal first sends to each of `workers` workers."""
    sizes = []
    left = total
    for i in range(workers):
        size = left // (workers - i)
        sizes.append(size)
        left -= size
    return sizes


def long_first(items: Sequence[T], workers: int, seconds: Callable[[T], float]) -> list[T]:
    """`items` reordered so that worker k's initial slice begins with the long tests assigned
    to it (`seconds(item) > 0`), each long test given to the slice with the least long work
    so far, longest first. The other tests keep their order, which keeps a module's tests
    (and its module-scoped fixtures) together."""
    if workers < 2 or not items:
        return list(items)
    sizes = slice_sizes(len(items), workers)
    long = sorted((item for item in items if seconds(item) > 0), key=seconds, reverse=True)
    rest = [item for item in items if seconds(item) <= 0]
    heads: list[list[T]] = [[] for _ in sizes]
    loads = [0.0 for _ in sizes]
    for item in long:
        # A slice cannot hold more long tests than its size.
        open_slices = [k for k in range(len(sizes)) if len(heads[k]) < sizes[k]]
        k = min(open_slices, key=lambda k: loads[k])
        heads[k].append(item)
        loads[k] += seconds(item)
    ordered: list[T] = []
    start = 0
    for k, size in enumerate(sizes):
        fill = size - len(heads[k])
        ordered += heads[k] + rest[start : start + fill]
        start += fill
    return ordered
