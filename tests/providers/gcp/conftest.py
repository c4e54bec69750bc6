"""Fixtures of the GCP tests: a metadata simulator on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.simulator import SimServer


@pytest.fixture
def sim() -> GcpSimulator:
    return GcpSimulator()


@pytest.fixture
def server(sim: GcpSimulator) -> Iterator[SimServer]:
    with SimServer(sim) as running:
        yield running
