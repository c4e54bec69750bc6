"""Batch inference that survives a restart: a done-manifest of processed item ids, kept in
store generations, and outputs keyed by item id.

Each flush writes the new outputs as one JSON-lines shard under `outputs/` (beside the
generations, so retention never deletes them), then commits a generation whose `done.json`
maps every finished item id to its shard. An item counts as done only once such a generation
is committed, so a job killed between the two redoes exactly the items of the lost flush.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from .errors import CheckpointError, GenerationNotFoundError
from .generation import Generation
from .manifest import OUTPUTS, generation_name
from .store import CheckpointStore

log = logging.getLogger("forewarn.checkpoint")

DONE = "done.json"
FORMAT = "forewarn-batch/1"
T = TypeVar("T")


def item_key(item_id: str | int) -> str:
    if isinstance(item_id, bool) or not isinstance(item_id, (str, int)):
        raise TypeError(f"item ids are str or int, got {type(item_id).__name__}: {item_id!r}")
    return str(item_id)


class BatchProgress:
    """Which items are done; `add` records an output, `flush` commits a generation.

    Item ids are strings (ints are turned into their decimal string). Outputs are any
    JSON-serialisable value. One store (prefix) per job, or per rank of a job.
    """

    def __init__(self, store: CheckpointStore, *, flush_every: int | None = None) -> None:
        if flush_every is not None and flush_every < 1:
            raise ValueError(f"flush_every must be a positive integer, got {flush_every!r}")
        self.store = store
        self.flush_every = flush_every
        self._done: dict[str, str] = {}
        self._pending: dict[str, str] = {}
        self._shards: dict[str, dict[str, Any]] = {}
        # Flushes go above every committed generation resume passed over, so a fallback never
        # tries to commit a step that is taken (generations are immutable).
        self._first_step = 0
        self.resumed_from: Generation | None = self._resume()

    def _resume(self) -> Generation | None:
        """The newest committed generation whose done-manifest verifies and reads, newest
        first; each one passed over is logged, and its items are redone."""
        for step in reversed(self.store.steps()):
            try:
                generation = self.store.get(step)
                self._done = self._read_done(generation)
            except GenerationNotFoundError:
                continue  # a flush that never committed: its items were never done
            except (CheckpointError, ValueError, FileNotFoundError) as exc:
                log.warning(
                    "forewarn: batch progress %s in %s cannot be read, trying an older one: %s",
                    generation_name(step),
                    self.store.url,
                    exc,
                )
                self._first_step = max(self._first_step, step + 1)
                continue
            # Above a flush passed over the steps run ahead of the items done (14 items in
            # generation 15): counted from the items, the next flush took a committed step.
            self._first_step = max(self._first_step, step + 1)
            return generation
        return None

    @staticmethod
    def _read_done(generation: Generation) -> dict[str, str]:
        data = json.loads(generation.read_bytes(DONE))
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{generation.name}/{DONE} is not a forewarn batch done-manifest")
        items = data.get("items")
        if not isinstance(items, dict):
            raise ValueError(f"{generation.name}/{DONE} has no item map")
        return {str(key): str(value) for key, value in items.items()}

    def __len__(self) -> int:
        """How many items are committed as done."""
        return len(self._done)

    def __contains__(self, item_id: object) -> bool:
        return self.is_done(item_id)  # type: ignore[arg-type]

    def is_done(self, item_id: str | int) -> bool:
        """Whether the item is done, committed or waiting in the next flush."""
        key = item_key(item_id)
        return key in self._done or key in self._pending

    @property
    def done(self) -> frozenset[str]:
        """Ids of committed items."""
        return frozenset(self._done)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def remaining(
        self, items: Iterable[T], key: Callable[[T], str | int] | None = None
    ) -> Iterator[T]:
        """The items not yet done, in order; `key` gives an item's id (default: the item)."""
        for item in items:
            if not self.is_done(key(item) if key else item):  # type: ignore[arg-type]
                yield item

    def add(self, item_id: str | int, output: Any = None) -> None:
        """Record one processed item and its output (flushed at the next `flush`)."""
        key = item_key(item_id)
        if key in self._done or key in self._pending:
            raise ValueError(f"item {key!r} is already done")
        try:
            line = json.dumps({"id": key, "output": output}, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"output of item {key!r} is not JSON-serialisable: {exc}") from None
        self._pending[key] = line
        if self.flush_every is not None and len(self._pending) >= self.flush_every:
            self.flush()

    def flush(self) -> Generation | None:
        """Write the pending outputs, then commit the done-manifest; None when nothing pends."""
        if not self._pending:
            return None
        step = max(len(self._done) + len(self._pending), self._first_step)
        shard = f"{OUTPUTS}/{generation_name(step)}.jsonl"
        backend = self.store.backend
        done = dict(self._done)
        done.update(dict.fromkeys(self._pending, shard))
        body = json.dumps({"format": FORMAT, "items": done}, separators=(",", ":")).encode()
        # The shard only once the save has started: a step that is taken is refused there,
        # before its committed shard (the outputs of the items it holds) is rewritten.
        # This process's save alone, whatever RANK and WORLD_SIZE say (torchrun sets them):
        # each rank keeps its own store, and a multi-rank save there waits for ranks that
        # never write into it.
        with self.store.save(step, metadata={"items_done": len(done)}, rank=0, world_size=1) as gen:
            with backend.writer(shard) as stream:
                stream.write("".join(line + "\n" for line in self._pending.values()).encode())
            backend.make_durable(OUTPUTS)
            gen.write_bytes(DONE, body)
        self._done = done
        self._pending = {}
        self._first_step = step + 1
        return gen.committed

    def output(self, item_id: str | int) -> Any:
        """The committed output of one item."""
        key = item_key(item_id)
        try:
            shard = self._done[key]
        except KeyError:
            raise KeyError(f"item {key!r} has no committed output") from None
        return self._shard(shard)[key]

    def outputs(self) -> Iterator[tuple[str, Any]]:
        """Every committed (item id, output), shard by shard."""
        for shard in sorted(set(self._done.values())):
            for key, value in self._shard(shard).items():
                if self._done.get(key) == shard:
                    yield key, value

    def _shard(self, shard: str) -> dict[str, Any]:
        if shard not in self._shards:
            with self.store.backend.open_read(shard) as stream:
                lines = stream.read().decode().splitlines()
            records = (json.loads(line) for line in lines if line)
            self._shards = {shard: {record["id"]: record["output"] for record in records}}
        return self._shards[shard]

    def __enter__(self) -> BatchProgress:
        return self

    def __exit__(self, exc_type: object, *_rest: object) -> None:
        if exc_type is None:
            self.flush()
