"""Notices that reach people and the cluster: an HTTP webhook (JSON or Slack-compatible) and
Kubernetes Events with an optional cordon. Each is an observer fed from a bounded queue by its
own task, so it never delays the event socket.
"""

from .settings import WebhookSettings

__all__ = ["WebhookSettings"]
