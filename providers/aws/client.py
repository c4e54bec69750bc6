"""An IMDS client: one reused HTTP connection, IMDSv2 tokens renewed before they expire and
replaced on 401, and IMDSv1 only when the settings allow it.

Every failure becomes an `ImdsError` with a short `kind` (what the health log groups by) and a
message that says what happened and, where there is a usual cause, what to do about it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from forewarn.protocol.errors import ForewarnError

from ..fetch import AnswerTooLarge
from .imds import TOKEN_HEADER, TOKEN_PATH, TTL_HEADER
from .settings import MAX_TOKEN_TTL, MIN_TOKEN_TTL
from .transport import ImdsTransport

log = logging.getLogger("forewarn.providers.aws")

HOP_LIMIT_HINT = (
    "the usual cause is a container that is not on the host network: IMDS answers the token "
    "PUT with IP TTL 1 (hop limit 1), so the answer never reaches the container. Fix: raise "
    "the hop limit to 2 (aws ec2 modify-instance-metadata-options --instance-id <id> "
    "--http-put-response-hop-limit 2 --http-endpoint enabled, or HttpPutResponseHopLimit: 2 in "
    "the launch template), or run the agent with host networking (Kubernetes hostNetwork: "
    "true, docker --network host)"
)
IMDSV1_HINT = (
    "if this metadata endpoint serves only IMDSv1 (a metadata proxy such as kube2iam answers "
    "the token PUT 403; an IMDS-compatible endpoint without tokens 404 or 405), set "
    "aws.imdsv1 = true (FOREWARN_AWS_IMDSV1=true) to read it without a token"
)
# Seconds between new tries of the token PUT once IMDSv1 has taken over.
V1_RETRY_SECONDS = 60.0
# Seconds between tries of a token renewal that failed while the token in hand is still good.
RENEW_RETRY_SECONDS = 1.0


class ImdsError(ForewarnError):
    """`hint`: the usual cause and its fix, for whoever reports the error to say once."""

    def __init__(self, kind: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.hint = hint

    def explained(self) -> str:
        return f"{self.message}: {self.hint}" if self.hint else self.message


@dataclass
class Answer:
    status: int
    body: bytes
    # The answer's `Date`: how far this instance's clock is off AWS's (`skew.py`).
    date: str | None = None


class ImdsClient:
    """GETs against IMDS with the token dance done for the caller."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float,
        token_ttl: int,
        imdsv1: bool,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not MIN_TOKEN_TTL <= token_ttl <= MAX_TOKEN_TTL:
            raise ValueError(f"token_ttl must be {MIN_TOKEN_TTL}-{MAX_TOKEN_TTL}, got {token_ttl}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.token_ttl = token_ttl
        self.imdsv1 = imdsv1
        self.clock = clock
        # trust_env=False: IMDS is link-local, and a proxy from the environment would
        # either fail or, worse, answer for it.
        transport = transport if transport is not None else ImdsTransport()
        self.http = httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout, trust_env=False, transport=transport
        )
        # The polls skip AsyncClient.send (auth and redirect flows, cookie extraction, a
        # Response) when the transport is ours: a third of a poll's CPU, four polls a second
        # for the machine's life. Token PUTs and other transports go through httpx as usual.
        self._direct = transport if isinstance(transport, ImdsTransport) else None
        # Renewals go out beside the polls, on a connection of their own: a renewal PUT that
        # hangs or is throttled must not hold the polls while the token in hand is good.
        self._renewal_http = (
            httpx.AsyncClient(
                base_url=self.base_url, timeout=timeout, trust_env=False, transport=ImdsTransport()
            )
            if self._direct is not None
            else self.http
        )
        self._renewal: asyncio.Task[None] | None = None
        self._renew_retry_at = 0.0
        self._renewal_failed = False  # since the last token: logged once
        self._token: str | None = None
        self._renew_at = 0.0
        self._usable_until = 0.0  # past this the token in hand may have expired at IMDS
        self._v1_until = 0.0  # while IMDSv1 stands in for a failed token PUT
        self._v1_announced = False
        self._requests: dict[tuple[str, str | None, float], httpx.Request] = {}
        self.tokens_fetched = 0

    async def aclose(self) -> None:
        if self._renewal is not None:
            self._renewal.cancel()
            with contextlib.suppress(BaseException):
                await self._renewal
        if self._renewal_http is not self.http:
            await self._renewal_http.aclose()
        await self.http.aclose()

    async def get(self, path: str, timeout: float | None = None) -> Answer:
        """GET `path`; a 401 gets a fresh token and one more try. Raises ImdsError on
        transport failures and on token trouble; any status is returned to the caller."""
        token = await self.token(timeout)
        answer = await self._get(path, token, timeout)
        if answer.status == 401 and token is None and self._v1_until:
            # IMDSv1 stood in for a failed token PUT, and this IMDS requires tokens: every
            # tokenless GET until the PUT's next try (a minute) would be a 401, a notice
            # raised meanwhile seen that late. Try the PUT again now.
            self._v1_until = 0.0
            token = await self.token(timeout)
            if token is not None:
                answer = await self._get(path, token, timeout)
        if answer.status == 401 and token is not None:
            self._token = None
            token = await self.token(timeout)
            answer = await self._get(path, token, timeout)
        if answer.status == 401:
            raise ImdsError(
                "unauthorized",
                f"GET {path}: 401 even with a fresh token"
                if token is not None
                else f"GET {path}: 401 without a token: this instance requires IMDSv2",
            )
        return answer

    async def _get(self, path: str, token: str | None, timeout: float | None) -> Answer:
        seconds = timeout or self.timeout
        request = self._request(path, token, seconds)
        try:
            if self._direct is not None:
                status, headers, body = await self._direct.exchange(request)
                return Answer(status, body, _date(headers))
            response = await self.http.send(request)
        except httpx.HTTPError as error:
            raise _transport_error(f"GET {path}", error, seconds) from None
        return Answer(response.status_code, response.content, response.headers.get("Date"))

    def _request(self, path: str, token: str | None, timeout: float) -> httpx.Request:
        """The same GET, built once: httpx spends more CPU building a request (URL parsing
        and validation) than this transport spends sending it, four times a second."""
        key = (path, token, timeout)
        request = self._requests.get(key)
        if request is None:
            if len(self._requests) > 32:  # old tokens' requests
                self._requests.clear()
            headers = {TOKEN_HEADER: token} if token is not None else {}
            request = self.http.build_request("GET", path, headers=headers, timeout=timeout)
            self._requests[key] = request
        return request

    async def token(self, timeout: float | None = None) -> str | None:
        """A valid IMDSv2 token, or None while IMDSv1 stands in (only when allowed)."""
        now = self.clock()
        if self._token is not None and now < self._renew_at:
            return self._token
        if self._token is not None and now < self._usable_until:
            # Due for renewal, still good: renewed beside the polls, which go on with it.
            self._start_renewal(timeout or self.timeout)
            return self._token
        if self.imdsv1 and now < self._v1_until:
            return None
        if self._renewal is not None:
            self._renewal.cancel()  # the token is needed now: asked for here instead
        try:
            return await self._fetch_token(timeout or self.timeout)
        except ImdsError as error:
            if not self.imdsv1 or error.kind == "connect":
                raise
            if not self._v1_announced:
                self._v1_announced = True
                log.warning("aws: %s; using IMDSv1 (tokenless) as configured", error.explained())
            self._v1_until = now + V1_RETRY_SECONDS
            return None

    def _start_renewal(self, timeout: float) -> None:
        if self._renewal is not None and not self._renewal.done():
            return
        if self.clock() < self._renew_retry_at:
            return
        self._renewal = asyncio.get_running_loop().create_task(self._renew(timeout))

    async def _renew(self, timeout: float) -> None:
        try:
            await self._fetch_token(timeout, self._renewal_http)
        except ImdsError as error:
            self._renew_retry_at = self.clock() + RENEW_RETRY_SECONDS
            if not self._renewal_failed:
                self._renewal_failed = True
                left = max(0.0, self._usable_until - self.clock())
                log.warning(
                    "aws: renewing the IMDSv2 token failed (%s); polling on with the current "
                    "one, good for %.0f s more, and trying again",
                    error.message,
                    left,
                )
        except Exception:  # a surprise must not end unseen in a task nobody awaits
            self._renew_retry_at = self.clock() + RENEW_RETRY_SECONDS
            log.exception("aws: renewing the IMDSv2 token failed")

    async def _fetch_token(self, timeout: float, http: httpx.AsyncClient | None = None) -> str:
        asked = self.clock()
        try:
            response = await (http or self.http).put(
                TOKEN_PATH, headers={TTL_HEADER: str(self.token_ttl)}, timeout=timeout
            )
        except httpx.TimeoutException:
            raise ImdsError(
                "token-timeout",
                f"PUT {TOKEN_PATH} timed out after {timeout:g}s",
                HOP_LIMIT_HINT,
            ) from None
        except httpx.HTTPError as error:
            raise _transport_error(f"PUT {TOKEN_PATH}", error, timeout) from None
        status = response.status_code
        if status != 200:
            # Off, IMDSv1 never stands in: the one setting that would read this endpoint is
            # named (a log saying only "no IMDSv2 here" left the agent blind for good).
            hint = IMDSV1_HINT if status in (403, 404, 405) and not self.imdsv1 else None
            raise ImdsError(f"token-http-{status}", _token_status_message(status), hint)
        token = response.text.strip()
        if not token:
            raise ImdsError("token-empty", f"PUT {TOKEN_PATH}: 200 with an empty token")
        ttl = self.token_ttl
        granted = response.headers.get(TTL_HEADER, "")
        if granted.isascii() and granted.isdigit() and 0 < int(granted) < ttl:
            ttl = int(granted)
        # Renew with a margin: a token must not expire between our check and IMDS's. Counted
        # from before the PUT, so IMDS's own clock for it started later still.
        margin = min(60.0, ttl / 5)
        self._token = token
        self._renew_at = asked + ttl - margin
        self._usable_until = asked + ttl - min(1.0, margin / 2)
        self._renewal_failed = False
        self.tokens_fetched += 1
        return token


def _token_status_message(status: int) -> str:
    what = {
        400: "the TTL header was refused (IMDS allows 1-21600 s)",
        403: "IMDS refuses tokens here: the metadata endpoint may be disabled "
        "(http-endpoint disabled) or the request passed through a proxy (X-Forwarded-For)",
        404: "no IMDSv2 here: this endpoint is not EC2's IMDS or is too old",
        405: "no IMDSv2 here: this endpoint is not EC2's IMDS or is too old",
    }.get(status, "unexpected status")
    return f"PUT {TOKEN_PATH}: {status}: {what}"


def _date(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The `Date` of a raw answer's headers; None without one."""
    for name, value in headers:
        if name.lower() == b"date":
            return value.decode("latin-1")
    return None


def _transport_error(what: str, error: httpx.HTTPError, timeout: float) -> ImdsError:
    if isinstance(error, httpx.TimeoutException):
        # The setting is named: IMDS answers within milliseconds, and one slower than the
        # timeout failed every poll with nothing saying which setting waits longer.
        return ImdsError(
            "timeout",
            f"{what} timed out after {timeout:g}s (IMDS answers within milliseconds; a slower "
            "one needs a longer aws.timeout, FOREWARN_AWS_TIMEOUT)",
        )
    if isinstance(error, httpx.ConnectError):
        return ImdsError("connect", f"{what}: cannot connect: {error or type(error).__name__}")
    if isinstance(error, AnswerTooLarge):
        return ImdsError("too-large", f"{what}: {error}")
    if isinstance(error, (httpx.RemoteProtocolError, httpx.ReadError)):
        return ImdsError(
            "broken-response", f"{what}: the answer broke off: {error or type(error).__name__}"
        )
    return ImdsError("transport", f"{what}: {type(error).__name__}: {error}")


__all__ = ["HOP_LIMIT_HINT", "IMDSV1_HINT", "Answer", "ImdsClient", "ImdsError"]
