"""The fan-out of the agent's observers: one observer failing in what `status` and `/healthz`
read is logged and never hides what the others report."""

from __future__ import annotations

import logging

import pytest
from forewarn.agent.observer import Deliveries, Observer
from forewarn.agent.observers import Observers


class _Webhook(Observer):
    def conditions(self) -> dict[str, str]:
        return {"webhook-pending": "cannot save"}

    def deliveries(self) -> dict[str, Deliveries]:
        return {"webhook": Deliveries(delivered=2, failed=0, dropped=1, pending=0)}

    def parts(self) -> dict[str, bool]:
        return {"webhook": True}


class _Broken(Observer):
    def conditions(self) -> dict[str, str]:
        raise RuntimeError("conditions")

    def deliveries(self) -> dict[str, Deliveries]:
        raise RuntimeError("deliveries")

    def parts(self) -> dict[str, bool]:
        raise RuntimeError("parts")


def test_an_observer_failing_is_logged_and_the_others_still_report(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fan = Observers([_Broken(), _Webhook()])
    with caplog.at_level(logging.ERROR, logger="forewarn.agent"):
        assert fan.conditions() == {"webhook-pending": "cannot save"}
        assert fan.deliveries() == {
            "webhook": Deliveries(delivered=2, failed=0, dropped=1, pending=0)
        }
        # A part that cannot say whether it runs counts as dead, as /healthz answers 503.
        assert fan.parts() == {"observer/_Broken": False, "webhook": True}
    failed = [record.getMessage() for record in caplog.records]
    assert failed == [
        f"observer _Broken failed in {name}" for name in ("conditions", "deliveries", "parts")
    ]
