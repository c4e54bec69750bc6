"""Every message the agent publishes, recorded by a subscriber on a background thread."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import zmq
from forewarn.protocol.wire import TOPIC_HEARTBEAT, TOPIC_NOTICE, allow_ipv6

# What a replay changes: the agent sends each active notice again, numbered and stamped anew,
# to every subscriber when one joins.
_RESENT = ("seq", "sent_at")


def _replays(message: dict[str, Any], last: dict[str, Any] | None) -> bool:
    """`message` is the last notice of its id sent again unchanged, not news."""
    if last is None:
        return False
    return {k: v for k, v in message.items() if k not in _RESENT} == {
        k: v for k, v in last.items() if k not in _RESENT
    }


class EventRecorder:
    """A SUB socket on the agent's events endpoint. `notices` holds every notice in the order
    received, less replays (a notice sent again unchanged because a subscriber joined: a
    guard created just before a `notify`, a second rank, listed it twice); `first_heartbeat`
    is set once the agent has answered the subscription (it beats at once for each new
    subscriber), from when on nothing it publishes is missed."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.notices: list[dict[str, Any]] = []
        self._last: dict[str, dict[str, Any]] = {}  # the last notice of each id
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
                with self.changed:
                    if topic.decode() == TOPIC_HEARTBEAT:
                        self.heartbeats += 1
                        self.last_heartbeat = message
                        self.first_heartbeat.set()
                    elif not _replays(message, self._last.get(message.get("id"))):
                        self._last[message.get("id")] = message
                        self.notices.append(message)
                    self.changed.notify_all()
        finally:
            sock.close()

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
