"""Fixtures of the AWS tests: a real IMDS simulator on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.simulator import SimServer


@pytest.fixture
def sim() -> ImdsSimulator:
    return ImdsSimulator()


@pytest.fixture
def server(sim: ImdsSimulator) -> Iterator[SimServer]:
    with SimServer(sim) as running:
        yield running
