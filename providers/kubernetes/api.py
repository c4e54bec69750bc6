"""The few node API calls forewarn makes, over httpx: list one node, watch it, cordon it."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import httpx
from forewarn.protocol.errors import ForewarnError

from ..fetch import AnswerTooLarge, fetch, lines
from ..httpdate import retry_after_seconds
from .config import Cluster
from .kubeconfig import off_loop
from .nodes import NodeList, WatchEvent, parse_event, parse_list

USER_AGENT = "forewarn-agent"
REQUEST_TIMEOUT = 10.0
# A watch is silent while nothing changes; the server closes it after timeoutSeconds, so the
# read timeout (and the stream's overall deadline) only has to catch a server that never ends
# the stream; keepalive (below) catches a connection that died without a FIN much sooner.
READ_MARGIN = 30.0


# The read timeout alone notices a watch whose connection died silently (a NAT or load
# balancer forgetting it, a partition: no FIN, no RST) only after timeoutSeconds plus the
# margin, 330 s by default, and a cordon or shutdown set meanwhile arrives that late. client-go
# keeps such a connection in check with TCP keepalive (30 s) and HTTP/2 pings (30 s idle, 15 s
# to answer); here the kernel probes a silent connection after KEEPALIVE_IDLE seconds and gives
# up after KEEPALIVE_COUNT unanswered probes, so a dead one fails the read within
# KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_COUNT = 60 s. A live server answers the
# probes in its kernel, so a quiet healthy watch is never cut.
KEEPALIVE_IDLE = 30
KEEPALIVE_INTERVAL = 10
KEEPALIVE_COUNT = 3
KEEPALIVE_DEAD_AFTER = KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_COUNT


def keepalive_options() -> list[tuple[int, int, int]]:
    """Socket options for the API server connection: keepalive, with the timings where the
    platform can set them (Linux can; elsewhere the system's defaults apply)."""
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    tcp = [
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
        ("TCP_KEEPCNT", KEEPALIVE_COUNT),
        # Keepalive does not probe while sent data awaits its ACK (the watch request itself):
        # this bounds that case by the same time instead of ~15 minutes of retransmissions.
        ("TCP_USER_TIMEOUT", KEEPALIVE_DEAD_AFTER * 1000),
    ]
    for name, value in tcp:
        option = getattr(socket, name, None)
        if option is not None:
            options.append((socket.IPPROTO_TCP, option, value))
    return options


def read_margin(timeout_seconds: int) -> float:
    """Seconds a watch may outlive its timeoutSeconds: READ_MARGIN, less for short watches."""
    return min(READ_MARGIN, max(5.0, float(timeout_seconds)))


# One Node (or a list holding one) is tens of kilobytes; these caps keep a broken or hostile
# server from growing the agent by its answer's size.
MAX_LIST_BODY = 4 << 20
MAX_EVENT_LINE = 4 << 20


class ApiError(ForewarnError):
    """The API server answered with an error; `kind` names it for PollHealth."""

    def __init__(
        self,
        kind: str,
        message: str,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retry_after = retry_after  # seconds the server asked to wait (429, 503)


def retry_after(value: str | None) -> float | None:
    """Seconds a Retry-After header asks to wait (seconds or an HTTP date; the API server
    sends seconds), None when absent or unreadable."""
    return retry_after_seconds(value)


class Gone(ApiError):
    """410: the resourceVersion is older than the server's history; list again."""

    def __init__(self, message: str) -> None:
        super().__init__("gone", message, 410)


class TooLarge(ApiError):
    """504 "Too large resource version": the resourceVersion is newer than the server's, as
    after an etcd restore (or from an API server whose watch cache lags); list again."""

    def __init__(self, message: str) -> None:
        super().__init__("resource-version-too-large", message, 504)


def too_large(status: object) -> bool:
    """Whether a Status says the resourceVersion asked for is ahead of the server's: code 504
    with the cause `ResourceVersionTooLarge` (storage's `NewTooLargeResourceVersionError`),
    or, from a server that leaves the cause out, its message."""
    if not isinstance(status, dict) or status.get("code") != 504:
        return False
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    if isinstance(causes, list) and any(
        isinstance(cause, dict) and cause.get("reason") == "ResourceVersionTooLarge"
        for cause in causes
    ):
        return True
    message = status.get("message")
    return isinstance(message, str) and "too large resource version" in message.lower()


def _status_object(body: bytes) -> object:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested a few thousand deep
        return None


def status_message(body: bytes) -> str:
    """The `message` of a Kubernetes Status body, else the start of the body."""
    try:
        payload = json.loads(body)
        if isinstance(payload, dict) and isinstance(payload.get("message"), str):
            return str(payload["message"])
    except (ValueError, RecursionError):  # RecursionError: nested a few thousand deep
        pass
    return body[:200].decode(errors="replace") or "(empty body)"


# What a 403 on each request says the identity needs, and the manifest that grants it: the
# drill's refused patch was told the watcher's "list and watch on nodes", which it had.
_READ_NODES = (
    "the identity needs list and watch on nodes (packaging/kubernetes/base/clusterrole.yaml)"
)
FORBIDDEN_HINTS = {
    "list": _READ_NODES,
    "watch": _READ_NODES,
    "patch": "the identity needs patch on nodes, as `kubectl cordon` does (for the agent: "
    "packaging/kubernetes/components/cordon)",
    "nodeclaim": "the identity needs get on nodeclaims.karpenter.sh "
    "(packaging/kubernetes/components/karpenter)",
}
FORBIDDEN_OTHER = "the identity lacks the RBAC permission for this request"
# A 403 whose body is no Kubernetes Status: the API server refuses with a Status naming the
# user and the verb, so this one came from something in between.
FORBIDDEN_ELSEWHERE = (
    "not the API server's refusal (its 403 is a Kubernetes Status naming the user and the "
    "verb; this answer is none): a proxy, gateway or load balancer between the agent and the "
    "API server refused it; check its rules, or that the URL is the API server's"
)

# The requests of the node itself (not Karpenter's NodeClaims, whose 404 means no CRD).
NODE_READS = frozenset({"list", "watch"})
NOT_THE_API_SERVER = (
    "not the API server's answer (it has the node list, and answers an error with a "
    "Kubernetes Status): check that {source} is the API server's URL"
)


def from_api_server(body: bytes) -> bool:
    """Whether an error's body is a Kubernetes Status, as the API server answers an error."""
    status = _status_object(body)
    return isinstance(status, dict) and status.get("kind") == "Status"


def error_for(
    status: int,
    body: bytes,
    what: str,
    source: str,
    headers: httpx.Headers | None = None,
) -> ApiError:
    message = status_message(body)
    if status == 410:
        return Gone(f"{what}: {message}")
    if status == 504 and too_large(_status_object(body)):
        return TooLarge(f"{what}: {message}")
    if status == 401:
        return ApiError(
            "unauthorized",
            f"{what}: 401 {message}: the API server refused the token of {source} "
            "(it is read again on the next attempt)",
            401,
        )
    if status == 403:
        # A proxy's page (no Status) was given the RBAC hint, sending the operator to a role
        # the identity had.
        hint = FORBIDDEN_HINTS.get(what, FORBIDDEN_OTHER)
        if not from_api_server(body):
            hint = FORBIDDEN_ELSEWHERE
        return ApiError("forbidden", f"{what}: 403 {message}: {hint}", 403)
    wait = retry_after(headers.get("Retry-After")) if headers is not None else None
    hint = ""
    if status == 404 and what in NODE_READS and not from_api_server(body):
        # The node list always exists on an API server, which answers errors with a Status:
        # this 404 (a web page, a gateway's) came from something else at that URL.
        hint = f": {NOT_THE_API_SERVER.format(source=source)}"
    return ApiError(f"http-{status}", f"{what}: {status} {message}{hint}", status, wait)


class NodeApi:
    """One node's slice of the API, on one reused httpx connection."""

    def __init__(
        self,
        cluster: Cluster,
        node_name: str,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.cluster = cluster
        self.node_name = node_name
        # The `Date` of the API server's last answer (None: it sent none): the cluster's
        # clock, which a NodeClaim's termination timestamp is on (the watcher's `clock`).
        self.date: str | None = None
        self.client = client or httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(
                verify=cluster.verify, trust_env=False, socket_options=keepalive_options()
            ),
            trust_env=False,
            timeout=REQUEST_TIMEOUT,
            headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
        )

    async def _headers(self) -> dict[str, str]:
        # Read every time: the file rotates. In a thread: a kubeconfig's exec plugin whose
        # token expired runs again here, and must not stall the other watchers.
        token = await off_loop(self.cluster.token)
        return {"Authorization": f"Bearer {token}"} if token else {}

    @property
    def nodes_url(self) -> str:
        return f"{self.cluster.server}/api/v1/nodes"

    def _selector(self) -> dict[str, str]:
        return {"fieldSelector": f"metadata.name={self.node_name}"}

    async def list_node(self) -> NodeList:
        try:
            response = await fetch(
                self.client,
                "GET",
                self.nodes_url,
                params=self._selector(),
                headers=await self._headers(),
                deadline=REQUEST_TIMEOUT,
                max_body=MAX_LIST_BODY,
            )
        except AnswerTooLarge as error:
            # Said as what was that large, as the watch's line cap is (it read "GET <url>:
            # answer of 5670314 bytes, more than 4194304"): the list holds one Node.
            raise AnswerTooLarge(
                f"list: the node list is over the {MAX_LIST_BODY >> 20} MiB cap ({error}): a "
                "Node object that large (thousands of taints, labels or annotations), or a "
                "broken server; listed again after the retry wait"
            ) from None
        self.date = response.headers.get("Date")
        if response.status_code != 200:
            raise error_for(
                response.status_code,
                response.content,
                "list",
                self.cluster.source,
                response.headers,
            )
        try:
            payload = json.loads(response.content)
        except (ValueError, RecursionError):  # RecursionError: nested a few thousand deep
            raise ApiError("parse", f"list: body is not JSON: {response.text[:200]!r}") from None
        return parse_list(payload)

    async def get_nodeclaim(self, name: str) -> dict[str, Any] | None:
        """The `karpenter.sh/v1` NodeClaim `name`, None when there is none (gone, or no
        Karpenter in the cluster). Raises ApiError for any other refusal (403: the identity
        lacks `get` on nodeclaims)."""
        url = f"{self.cluster.server}/apis/karpenter.sh/v1/nodeclaims/{quote(name, safe='')}"
        response = await fetch(
            self.client,
            "GET",
            url,
            headers=await self._headers(),
            deadline=REQUEST_TIMEOUT,
            max_body=MAX_LIST_BODY,
        )
        self.date = response.headers.get("Date")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise error_for(
                response.status_code, response.content, "nodeclaim", self.cluster.source
            )
        try:
            payload = json.loads(response.content)
        except (ValueError, RecursionError):  # RecursionError: nested a few thousand deep
            raise ApiError(
                "parse", f"nodeclaim: body is not JSON: {response.text[:200]!r}"
            ) from None
        return payload if isinstance(payload, dict) else None

    @asynccontextmanager
    async def watch(
        self, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[AsyncIterator[WatchEvent]]:
        """Open a watch from `resource_version`; yields an iterator of events that ends when
        the server closes the stream (its timeout). Raises Gone on 410, as a status or as an
        in-stream ERROR."""
        params = {
            **self._selector(),
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        timeout = httpx.Timeout(
            REQUEST_TIMEOUT, read=timeout_seconds + read_margin(timeout_seconds)
        )
        async with self.client.stream(
            "GET", self.nodes_url, params=params, headers=await self._headers(), timeout=timeout
        ) as response:
            self.date = response.headers.get("Date")
            if response.status_code != 200:
                body = await _head_of(response)
                raise error_for(
                    response.status_code, body, "watch", self.cluster.source, response.headers
                )
            yield self._events(response)

    @staticmethod
    async def _events(response: httpx.Response) -> AsyncIterator[WatchEvent]:
        try:
            async for event in NodeApi._parsed(response):
                yield event
        except AnswerTooLarge:
            raise AnswerTooLarge(
                f"watch: an event line longer than {MAX_EVENT_LINE >> 20} MiB (a Node object "
                "that large, or a broken server); listing the node again"
            ) from None

    @staticmethod
    async def _parsed(response: httpx.Response) -> AsyncIterator[WatchEvent]:
        async for line in lines(response, MAX_EVENT_LINE):
            if not line.strip():
                continue
            event = parse_event(line)
            if event.type == "ERROR":
                if event.status_code == 410:
                    raise Gone(f"watch: {event.message}")
                if too_large(event.object):
                    raise TooLarge(f"watch: {event.message}")
                code = event.status_code
                raise ApiError(f"watch-error-{code or 'status'}", f"watch: {event.message}", code)
            yield event

    async def aclose(self) -> None:
        await self.client.aclose()


async def _head_of(response: httpx.Response, limit: int = 64 << 10) -> bytes:
    """The start of an error answer, enough for its message; the rest is not read."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= limit:
            break
    return bytes(body[:limit])


def cordon_request(
    cluster: Cluster, node_name: str, unschedulable: bool, uid: str | None = None
) -> dict[str, Any]:
    """What `kubectl cordon` (or `uncordon`) sends: a strategic merge patch of the node. With
    `uid`, the patch holds only for that Node object: metadata.uid is immutable, so the API
    server refuses it (422) on a Node deleted and created again under the name since."""
    body: dict[str, Any] = {"spec": {"unschedulable": unschedulable}}
    if uid:
        body["metadata"] = {"uid": uid}
    return {
        "method": "PATCH",
        "url": f"{cluster.server}/api/v1/nodes/{quote(node_name, safe='')}",
        "headers": {"Content-Type": "application/strategic-merge-patch+json"},
        "body": body,
    }


def uid_refused(status: int, body: bytes) -> bool:
    """Whether a PATCH's answer is the API server refusing its metadata.uid: the Node is
    another object than the one the patch was for. The uid is immutable (422 Invalid,
    `metadata.uid: ... field is immutable`); a server checking it as a precondition says 409
    `Precondition failed: UID in precondition: ...`, as it does for a PUT."""
    message = status_message(body)
    return (status == 422 and "metadata.uid" in message) or (
        status == 409 and "UID in precondition" in message
    )


__all__ = [
    "ApiError",
    "Gone",
    "NodeApi",
    "TooLarge",
    "cordon_request",
    "error_for",
    "from_api_server",
    "keepalive_options",
    "retry_after",
    "status_message",
    "too_large",
    "uid_refused",
]
