"""What the agent tells the parts that watch it (metrics, telemetry, logs).

The runner calls every observer on each event. Observers must be quick and must not raise:
a failing observer is logged and never stops the agent.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from forewarn.protocol.errors import ConfigError
from forewarn.providers.kubernetes.settings import Settings as KubernetesSettings

from .observer import Deliveries, Observer
from .protocol import AckRequest, Notice

if TYPE_CHECKING:
    from forewarn.providers.registry import Registry

    from .config import Settings
    from .metrics import MetricsService

log = logging.getLogger("forewarn.agent")


class Observers(Observer):
    """Fans each call out to several observers, isolating their failures."""

    def __init__(self, observers: list[Observer]) -> None:
        self.observers = observers

    def _each(self, method: str, *args: object, **kwargs: object) -> None:
        for observer in self.observers:
            try:
                getattr(observer, method)(*args, **kwargs)
            except Exception:
                log.exception("observer %s failed in %s", type(observer).__name__, method)

    def on_start(self, providers: list[str]) -> None:
        self._each("on_start", providers)

    def on_notice(self, notice: Notice, *, escalated: bool) -> None:
        self._each("on_notice", notice, escalated=escalated)

    def on_restored(self, notice: Notice) -> None:
        self._each("on_restored", notice)

    def on_restore_done(self, next_seq: Callable[[], int]) -> None:
        self._each("on_restore_done", next_seq)

    def on_expired(self, notice: Notice) -> None:
        self._each("on_expired", notice)

    def on_overdue(self, notice: Notice) -> None:
        self._each("on_overdue", notice)

    def on_liveness(self, parts: dict[str, bool]) -> None:
        self._each("on_liveness", parts)

    def on_unacked(self, notice: Notice, clients: list[str]) -> None:
        self._each("on_unacked", notice, clients)

    def on_hold(self, notice_id: str, client: str) -> None:
        self._each("on_hold", notice_id, client)

    def watch_conditions(self, source: Callable[[], dict[str, dict[str, str]]]) -> None:
        self._each("watch_conditions", source)

    def on_poll(self, provider: str, ok: bool, error_kind: str | None) -> None:
        self._each("on_poll", provider, ok, error_kind)

    def on_approval(self, provider: str, outcome: str) -> None:
        self._each("on_approval", provider, outcome)

    def on_ack(self, ack: AckRequest, notice: Notice | None) -> None:
        self._each("on_ack", ack, notice)

    def on_subscribers(self, count: int) -> None:
        self._each("on_subscribers", count)

    def on_client_refused(self) -> None:
        self._each("on_client_refused")

    def on_stopping(self) -> None:
        self._each("on_stopping")

    def on_stop(self) -> None:
        self._each("on_stop")

    async def settle(self) -> None:
        results = await asyncio.gather(
            *(observer.settle() for observer in self.observers), return_exceptions=True
        )
        for observer, result in zip(self.observers, results, strict=True):
            if isinstance(result, Exception):
                log.error("observer %s failed in settle: %r", type(observer).__name__, result)

    def _merged(self, method: str, failed: object = None) -> dict[str, Any]:
        """Each observer's `method()` merged; an observer failing in it is logged, and
        stands as `observer/<class>: failed` when `failed` is given (a dead part)."""
        found: dict[str, Any] = {}
        for observer in self.observers:
            try:
                found.update(getattr(observer, method)())
            except Exception:
                log.exception("observer %s failed in %s", type(observer).__name__, method)
                if failed is not None:
                    found[f"observer/{type(observer).__name__}"] = failed
        return found

    def conditions(self) -> dict[str, str]:
        return self._merged("conditions")

    def deliveries(self) -> dict[str, Deliveries]:
        return self._merged("deliveries")

    def parts(self) -> dict[str, bool]:
        return self._merged("parts", failed=False)


def build_observers(settings: Settings) -> list[Observer]:
    """The observers the configuration asks for (metrics, telemetry).

    Raises ConfigError when metrics are asked for but cannot be served.
    """
    observers: list[Observer] = []
    listen = settings.metrics_listen()
    metrics = None if listen is None else _metrics_service(*listen, settings.registry)
    if metrics is not None:
        observers.append(metrics)
    if settings.telemetry:
        # Imported here: only an agent that writes telemetry needs it.
        from .telemetry import TelemetryObserver, TelemetryWriter, telemetry_path

        writer = TelemetryWriter(
            telemetry_path(settings.resolved_state_dir()), settings.telemetry_max_bytes
        )
        observers.append(TelemetryObserver(writer))
    notifiers = build_notifiers(settings)
    observers.extend(notifiers)
    if metrics is not None:
        metrics.watch_notifiers(notifiers)
    return observers


def build_notifiers(settings: Settings) -> list[Observer]:
    """The observers that tell people and the cluster: a webhook, Kubernetes Events."""
    notifiers: list[Observer] = []
    url = settings.webhook.resolved_url()
    if url is not None:
        from .notifications.proxy import ProxyError, webhook_proxy
        from .notifications.webhook import WebhookObserver

        try:
            proxy = webhook_proxy(settings.webhook.proxy, url, os.environ)
        except ProxyError as error:
            # At start (exit 2), not as a failure of every delivery.
            raise ConfigError(str(error)) from None
        notifiers.append(
            WebhookObserver(
                settings.webhook, url, state_dir=settings.resolved_state_dir(), proxy=proxy
            )
        )
    if "kubernetes" not in settings.registry:
        return notifiers
    kubernetes = settings.provider_settings("kubernetes")
    assert isinstance(kubernetes, KubernetesSettings)
    if kubernetes.events or kubernetes.cordon:
        from .notifications.kubernetes import KubernetesNotifier

        try:
            notifiers.append(
                KubernetesNotifier(kubernetes, state_dir=settings.resolved_state_dir())
            )
        except ConfigError as error:
            # Bad settings stop the agent at start (exit 2), not at the first notice.
            raise ConfigError(f"kubernetes.events/kubernetes.cordon: {error}") from None
    return notifiers


def _metrics_service(host: str, port: int, specs: Registry) -> MetricsService:
    from .config import ConfigError

    try:
        # prometheus-client comes with the `metrics` extra, so it is imported only when asked for.
        from .metrics import MetricsError, MetricsService
    except ImportError as error:
        from forewarn.protocol.install import extra_hint

        raise ConfigError(
            f"metrics_address is set but {error.name or 'prometheus_client'} is not installed: "
            f"{extra_hint('metrics')}, or unset metrics_address"
        ) from None
    try:
        return MetricsService(host, port, specs=specs)
    except MetricsError as error:
        raise ConfigError(str(error)) from None


__all__ = ["Observer", "Observers", "build_observers"]
