"""What the notifiers delivered, failed to deliver, dropped and still hold, in /metrics: a
webhook receiver refusing every notice was visible only in the agent's log."""

from __future__ import annotations

from pathlib import Path

from support import AgentProcess, agent_env, eventually
from test_metrics import metrics_url, scrape_url, value
from webhook_receiver import receiver

SERIES = "forewarn_notifier_deliveries_total"


def test_webhook_deliveries_and_failures_are_counted_in_metrics(tmp_path: Path):
    # The first notice is refused (404: not retried), the second delivered.
    with receiver(script=[404]) as hook:
        env = agent_env(
            tmp_path,
            FOREWARN_METRICS_ADDRESS="127.0.0.1:0",
            FOREWARN_WEBHOOK_URL=hook.url + "/hook",
        )
        with AgentProcess(tmp_path, env=env) as agent:
            url = metrics_url(agent)
            found = eventually(lambda: scrape_url(url))
            # At 0 from the start, so that increase() sees the first failure.
            for outcome in ("delivered", "failed", "dropped"):
                assert value(found, SERIES, notifier="webhook", outcome=outcome) == 0
            assert value(found, "forewarn_notifier_pending", notifier="webhook") == 0
            agent.control({"op": "notify", "action": "drain"})
            agent.control({"op": "notify", "action": "drain", "note": "second"})
            hook.wait_for(1)

            def counted() -> bool:
                found = scrape_url(url)
                return (
                    value(found, SERIES, notifier="webhook", outcome="delivered") == 1
                    and value(found, SERIES, notifier="webhook", outcome="failed") == 1
                )

            eventually(counted, what="the webhook's outcomes in /metrics")
            found = scrape_url(url)
            assert value(found, "forewarn_notifier_pending", notifier="webhook") == 0
