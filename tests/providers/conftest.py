"""Fixtures the provider tests share."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from forewarn.providers.simulator import SimServer, Simulator


@pytest.fixture
def serve() -> Iterator[Callable[[Simulator], SimServer]]:
    """Starts simulators on 127.0.0.1 (port 0) and stops every one at the test's end."""
    servers: list[SimServer] = []

    def start(sim: Simulator) -> SimServer:
        servers.append(SimServer(sim).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()
