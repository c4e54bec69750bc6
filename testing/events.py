"""Every message the agent publishes, recorded by a subscriber on a background thread."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import zmq
from forewarn.protocol.fields import CLOCK_AHEAD
from forewarn.protocol.wire import TOPIC_HEARTBEAT, TOPIC_NOTICE, allow_ipv6

# What a replay changes: the agent sends each active notice again, numbered and stamped anew,
# to every subscriber when one joins.
_RESENT = ("seq", "sent_at")


def _as_sent(notice: dict[str, Any]) -> dict[str, Any]:
    """`notice` less what a replay of it may change without the agent sending it as news."""
    kept = {key: value for key, value in notice.items() if key not in _RESENT}
    detail = kept.get("detail")
    if isinstance(detail, dict):
        kept["detail"] = {key: value for key, value in detail.items() if key != CLOCK_AHEAD}
    return kept


def _replays(message: dict[str, Any], last: dict[str, Any] | None) -> bool:
    """`message`, in the place of a replay's notice, is the last notice of its id sent again,
    not news: news where the recorder missed it (it joined after it), or where a change came
    just after a periodic heartbeat, where a replay would be."""
    return last is not None and _as_sent(message) == _as_sent(last)


class EventRecorder:
    """A SUB socket on the agent's events endpoint. `notices` holds every notice in the order
    received, less replays (a notice sent again because a subscriber joined: a guard created
    just before a `notify`, a second rank, listed it twice). A replay is told by the heartbeat
    that starts it (the notices its `active` lists follow it, each with the next `seq`; its
    `replay_for` names only the subscribers that sent a replay token, so a raw SUB's replay
    starts with one like the periodic ones) and by its content less what a replay may change
    unsent: after NTP's step a replay carried a drain's new `clock_ahead_seconds`, which the
    agent sends to no one, and the recorder listed the drain twice. `first_heartbeat`
    is set once the agent has answered the subscription (it beats at once for each new
    subscriber), from when on nothing it publishes is missed."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.notices: list[dict[str, Any]] = []
        self._last: dict[str, dict[str, Any]] = {}  # the last notice of each id
        # The ids of the replay under way still to come, and the `seq` the next one takes.
        self._replaying: list[str] = []
        self._replay_seq = -1
        self.heartbeats = 0
        self.last_heartbeat: dict[str, Any] | None = None
        self.first_heartbeat = threading.Event()
        self.changed = threading.Condition()
        self._stop = threading.Event()
        self._context = zmq.Context()
        self._thread = threading.Thread(target=self._run, name="forewarn-testing-events")
        self._thread.daemon = True

    def start(self) -> EventRecorder:
        self._thread.start()
        return self

    def _run(self) -> None:
        sock = self._context.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        # The agent may not be bound yet: retry the connect often, so ready is seen at once.
        sock.setsockopt(zmq.RECONNECT_IVL, 10)
        for wanted in (TOPIC_NOTICE, TOPIC_HEARTBEAT):
            sock.setsockopt(zmq.SUBSCRIBE, wanted.encode())
        try:
            # Inside the try: a connect that fails (an ipc path too long) must still close
            # the socket, or the context's term() in close() waits for it for ever.
            allow_ipv6(sock, self.endpoint)
            sock.connect(self.endpoint)
            while not self._stop.is_set():
                if not sock.poll(50):
                    continue
                topic, payload = sock.recv_multipart()
                message = json.loads(payload)
                self.record(topic.decode(), message)
        finally:
            sock.close()

    def record(self, topic: str, message: dict[str, Any]) -> None:
        """Take one message as received on `topic` (the thread's, or a test's own)."""
        with self.changed:
            if topic == TOPIC_HEARTBEAT:
                self._heartbeat(message)
            else:
                self._notice(message)
            self.changed.notify_all()

    def _heartbeat(self, beat: dict[str, Any]) -> None:
        self.heartbeats += 1
        self.last_heartbeat = beat
        self.first_heartbeat.set()
        # Any heartbeat may start a replay: its notices follow it at once.
        active, seq = beat.get("active"), beat.get("seq")
        if isinstance(active, list) and isinstance(seq, int):
            self._replaying, self._replay_seq = [str(notice_id) for notice_id in active], seq + 1
        else:
            self._replaying = []

    def _notice(self, message: dict[str, Any]) -> None:
        notice_id = str(message.get("id"))
        replayed = bool(self._replaying) and (notice_id, message.get("seq")) == (
            self._replaying[0],
            self._replay_seq,
        )
        if replayed:
            self._replaying.pop(0)
            self._replay_seq += 1
        else:
            self._replaying = []  # a replay is over at the first notice that is not of it
        if replayed and _replays(message, self._last.get(notice_id)):
            return
        self._last[notice_id] = message
        self.notices.append(message)

    def wait(self, match: dict[str, Any], start: int, timeout: float) -> dict[str, Any] | None:
        """The first notice from index `start` on whose fields equal `match`, or None."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                for notice in self.notices[start:]:
                    if all(notice.get(key) == value for key, value in match.items()):
                        return notice
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.changed.wait(min(left, 0.1))

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self._context.term()


__all__ = ["EventRecorder"]
