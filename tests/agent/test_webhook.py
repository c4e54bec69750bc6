"""Webhook notifications against a real receiver on loopback, from a real agent process."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from forewarn.agent.config import load_settings
from forewarn.agent.notifications.pending import (
    PendingFile,
    decode_done,
    decode_done_notices,
    decode_pending,
    done_key,
    encode_pending,
)
from forewarn.agent.notifications.settings import WebhookSettings, check_url
from forewarn.agent.notifications.webhook import (
    LATE_AFTER,
    RETRY_AFTER_CAP,
    WebhookObserver,
    retry_after,
    slack_text,
    span,
    visible,
)
from forewarn.agent.protocol import Notice
from forewarn.protocol import parse_time
from hypothesis import given
from hypothesis import strategies as st
from support import (
    AgentProcess,
    Subscriber,
    agent_env,
    eventually,
    eventually_async,
    local_notice,
    run_forewarn,
    self_signed_ca,
)
from webhook_receiver import Answer, receiver

# About thirty-five agents, each forked from a launcher that loaded the agent once
# (`forked_agents`, tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")

SECRET_PATH = "/hooks/T000/B000/s3cr3t-token"


def wait_for_heartbeat(sub: Subscriber) -> None:
    """A heartbeat arrived: the subscription has reached the agent."""
    while sub.recv()[0] != "heartbeat":
        pass


def agent_with_webhook(tmp_path: Path, url: str, **settings: str) -> AgentProcess:
    env = agent_env(tmp_path, FOREWARN_WEBHOOK_URL=url + SECRET_PATH, **settings)
    return AgentProcess(tmp_path, env=env)


def test_each_notice_is_delivered_within_a_second_as_protocol_json(tmp_path: Path):
    with receiver() as hook, agent_with_webhook(tmp_path, hook.url) as agent:
        with agent.subscriber(("notice", "heartbeat")) as sub:
            wait_for_heartbeat(sub)
            agent.control({"op": "notify", "action": "drain", "deadline": None, "note": "hi"})
            seen = sub.notice()
            seen_at = time.time()
        (delivery,) = hook.wait_for(1)
        assert delivery.path == SECRET_PATH
        assert delivery.body == seen
        assert delivery.headers["Content-Type"] == "application/json"
        sent_at = parse_time(seen["sent_at"]).timestamp()
        assert delivery.at - sent_at < 1.0, (delivery.at - sent_at, seen_at - sent_at)
    log = agent.output()
    assert "s3cr3t" not in log, "the webhook's secret path reached the log"
    assert "delivered drain" in log


def test_failures_are_retried_through_three_500s(tmp_path: Path):
    with receiver(script=[500, 500, 500]) as hook, agent_with_webhook(tmp_path, hook.url) as agent:
        agent.control({"op": "notify", "action": "drain"})
        (delivery,) = hook.wait_for(1, timeout=20)
        assert hook.attempts == 4
        assert delivery.body["action"] == "drain"


def test_every_5xx_is_retried_as_documented(tmp_path: Path):
    """Cloudflare's 520-524 (the receiver behind it down or slow) and a 507 are 5xx, which
    the docs say are retried: the notice was dropped at the first."""
    script: list[Answer] = [524, 520, 507]
    with receiver(script=script) as hook, agent_with_webhook(tmp_path, hook.url) as agent:
        agent.control({"op": "notify", "action": "terminate"})
        (delivery,) = hook.wait_for(1, timeout=20)
        assert hook.attempts == 4
    assert delivery.body["action"] == "terminate"


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_a_receiver_answering_an_endless_body_costs_no_memory(tmp_path: Path):
    """Only the status matters: the body of the answer is not read, so a receiver that
    streams one for ever neither grows the agent nor holds the delivery to its timeout."""
    with (
        receiver(script=["endless"]) as hook,
        agent_with_webhook(
            tmp_path, hook.url, FOREWARN_WEBHOOK_TIMEOUT="3s", FOREWARN_WEBHOOK_RETRIES="0"
        ) as agent,
    ):
        assert agent.proc is not None
        agent.control({"op": "notify", "action": "drain"})
        hook.wait_for(1)
        eventually(
            lambda: "delivered drain" in agent.output() or "deliver drain" in agent.output(),
            timeout=15,
            what="the delivery's outcome",
        )
        peak = peak_rss_mb(agent.proc.pid)
    assert "delivered drain" in agent.output()
    assert peak < 200, f"the agent peaked at {peak:.0f} MB"


def test_a_retry_waits_as_long_as_retry_after_says(tmp_path: Path):
    """A rate-limited receiver (429, Retry-After: 3) is not tried again before those 3 s,
    though the backoff alone would retry after about 0.5 s."""
    with (
        receiver(script=[(429, "3")]) as hook,
        agent_with_webhook(tmp_path, hook.url, FOREWARN_WEBHOOK_RETRIES="1") as agent,
    ):
        agent.control({"op": "notify", "action": "drain"})
        (delivery,) = hook.wait_for(1, timeout=20)
        first, second = hook.attempted_at
    assert delivery.body["action"] == "drain"
    assert second - first >= 2.9, second - first


def test_retry_after_reads_seconds_and_dates_and_is_capped():
    assert retry_after("2") == 2.0
    assert retry_after(None) == retry_after("") == retry_after("soon") == 0.0
    assert retry_after("-5") == retry_after("nan") == 0.0
    assert retry_after("86400") == RETRY_AFTER_CAP
    later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 20))
    assert 15 < retry_after(later) <= 20


@given(st.text(max_size=40))
def test_any_retry_after_gives_a_bounded_wait(value: str):
    assert 0.0 <= retry_after(value) <= RETRY_AFTER_CAP


def test_a_refusal_is_not_retried(tmp_path: Path):
    with receiver(script=[404]) as hook, agent_with_webhook(tmp_path, hook.url) as agent:
        agent.control({"op": "notify", "action": "drain"})
        agent.control({"op": "notify", "action": "drain", "note": "second"})
        (delivery,) = hook.wait_for(1)
        assert delivery.body["detail"]["note"] == "second"
        assert hook.attempts == 2
    assert "answered 404" in agent.output()


@pytest.mark.parametrize(
    ("location", "shown"),
    [
        ("https://hooks.example:8443/new/s3cr3t-moved", "https://hooks.example:8443"),
        ("/v2", None),
        # Written as a URL is: "http://fd00::7:8443" read as a host fd00 with a port of 0.
        ("http://[fd00::7]:8443/new/s3cr3t-moved", "http://[fd00::7]:8443"),
    ],
)
def test_a_redirect_is_logged_with_where_it_points(
    tmp_path: Path, location: str, shown: str | None
):
    """A receiver that moved (or redirects http to https) answered 308 to every notice, and
    the log said only 'answered 308'."""
    with (
        receiver(script=[(308, location)]) as hook,
        agent_with_webhook(tmp_path, hook.url) as agent,
    ):
        agent.control({"op": "notify", "action": "drain"})
        eventually(lambda: "gave up on drain" in agent.output(), timeout=10)
        assert hook.attempts == 1
    log = agent.output()
    where = shown or hook.url
    assert f"answered 308, a redirect to {where}, which is not followed: set webhook.url" in log
    assert "s3cr3t" not in log


def test_a_receiver_whose_certificate_is_not_trusted_is_named_as_such(tmp_path: Path):
    """An https receiver with a certificate of a private CA: the log said only
    "ConnectError", the same as for a receiver that is down."""
    with (
        receiver(tls=self_signed_ca(tmp_path, "private-ca")) as hook,
        agent_with_webhook(tmp_path, hook.url, FOREWARN_WEBHOOK_RETRIES="0") as agent,
    ):
        agent.control({"op": "notify", "action": "drain"})
        eventually(lambda: "could not deliver drain" in agent.output(), timeout=10)
    log = agent.output()
    assert f"{hook.url}: ConnectError: [SSL: CERTIFICATE_VERIFY_FAILED]" in log, log
    assert "s3cr3t" not in log


def test_a_receiver_with_a_private_ca_is_trusted_through_ca_file(tmp_path: Path):
    """An internal https receiver signed by the company's CA could not be used at all: the
    agent trusted only certifi's CAs, and neither the system store nor SSL_CERT_FILE."""
    cert, key = self_signed_ca(tmp_path, "private-ca")
    with (
        receiver(tls=(cert, key)) as hook,
        agent_with_webhook(tmp_path, hook.url, FOREWARN_WEBHOOK_CA_FILE=str(cert)) as agent,
    ):
        agent.control({"op": "notify", "action": "drain"})
        (delivery,) = hook.wait_for(1)
    assert delivery.body["action"] == "drain"


def test_an_error_that_quotes_the_url_is_logged_without_its_secret():
    url = "https://bot:pa55w0rd@hooks.example.org" + SECRET_PATH + "?key=k3y"
    observer = WebhookObserver(WebhookSettings(url=url), url)
    why = observer._why(httpx.ConnectError(f"cannot reach {url} (or {SECRET_PATH}, key=k3y)"))
    assert why.startswith("ConnectError: cannot reach ")
    assert not any(secret in why for secret in ("s3cr3t", "pa55w0rd", "k3y", "bot:")), why


def test_a_full_queue_names_the_notice_it_drops(caplog: pytest.LogCaptureFixture):
    """Past `queue`, the oldest notice is dropped: the log said how many wait, not which
    notice the receiver will never get."""
    url = "https://hooks.example.org" + SECRET_PATH
    observer = WebhookObserver(WebhookSettings(url=url, queue=2), url)  # not started
    for seq in (1, 2, 3):
        observer.on_notice(local_notice(seq, "drain"), escalated=False)
    dropped = [r.getMessage() for r in caplog.records if "dropping" in r.getMessage()]
    assert dropped == [
        "webhook: 2 notices wait for https://hooks.example.org; dropping the oldest, drain local/1"
    ]


def test_a_hung_receiver_delays_no_subscriber(tmp_path: Path):
    """The receiver holds the first delivery for 60 s; notices published meanwhile reach a
    subscriber as fast as with no webhook at all."""
    latencies = []
    with (
        receiver(script=[60.0]) as hook,
        agent_with_webhook(tmp_path, hook.url, FOREWARN_WEBHOOK_TIMEOUT="30s") as agent,
    ):
        with agent.subscriber(("notice", "heartbeat")) as sub:
            wait_for_heartbeat(sub)
            # The first notice's delivery reaches the receiver and hangs there; only then are
            # the measured notices published (on a loaded machine they could otherwise all
            # pass before the webhook task even connects).
            agent.control({"op": "notify", "action": "drain", "note": "held"})
            sub.notice()
            eventually(lambda: hook.attempts == 1, timeout=15, what="the held delivery")
            for index in range(20):
                started = time.monotonic()
                agent.control({"op": "notify", "action": "drain", "note": str(index)})
                sub.notice()
                latencies.append(time.monotonic() - started)
        assert hook.attempts == 1, "the hung delivery should still be in progress"
    latencies.sort()
    median = latencies[len(latencies) // 2]
    # Generous bounds for a loaded CI machine; bench/webhook.py measures it against an agent
    # without a webhook. A delivery in the loop would take the 30 s timeout.
    assert latencies[-1] < 1.0 and median < 0.2, latencies


def test_notices_not_delivered_at_stop_are_named(tmp_path: Path):
    """The agent stops while a delivery hangs and another notice waits: both are logged as
    not delivered, not dropped without a word."""
    with (
        receiver(script=[60.0]) as hook,
        agent_with_webhook(tmp_path, hook.url, FOREWARN_WEBHOOK_TIMEOUT="30s") as agent,
    ):
        agent.control({"op": "notify", "action": "drain", "note": "held"})
        eventually(lambda: hook.attempts == 1, timeout=15, what="the held delivery")
        agent.control({"op": "notify", "action": "terminate", "deadline": None})
        assert agent.stop() == 0
    log = agent.output()
    assert "stopping with 2 notice(s) not delivered" in log, log
    assert "drain local/manual/" in log and "terminate local/manual/" in log


def test_slack_format_is_one_text_line(tmp_path: Path):
    with (
        receiver() as hook,
        agent_with_webhook(tmp_path, hook.url, FOREWARN_WEBHOOK_FORMAT="slack") as agent,
    ):
        agent.control({"op": "notify", "action": "terminate", "deadline": None, "note": "bye"})
        (delivery,) = hook.wait_for(1)
    assert set(delivery.body) == {"text"}
    text = delivery.body["text"]
    assert "TERMINATE" in text and "manual" in text and "note: bye" in text
    assert "\n" not in text


def test_slack_text_shows_time_left_and_no_deadline_on_clear():
    now = time.time()
    base = {
        "id": "aws/spot-itn/1",
        "seq": 1,
        "reason": "spot-interruption",
        "provider": "aws",
        "noticed_at": "2026-01-01T00:00:00Z",
        "sent_at": "2026-01-01T00:00:00Z",
    }
    deadline = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 120))
    terminate = Notice.model_validate({**base, "action": "terminate", "deadline": deadline})
    text = slack_text(terminate, "gpu-1")
    assert "on gpu-1" in text and "s left" in text and f"deadline {deadline}" in text
    cleared = Notice.model_validate({**base, "action": "clear", "deadline": deadline})
    assert "deadline" not in slack_text(cleared, "gpu-1")


@given(note=st.text(min_size=1, max_size=200), notice_id=st.text(min_size=1, max_size=40))
def test_slack_text_escapes_its_markup_and_reads_back_as_the_note(note: str, notice_id: str):
    """Slack reads `&`, `<` and `>` as markup: `--note "ETA <5 min"` showed mangled, and
    `<!channel>` in a note (or an id) notified the whole channel."""
    notice = Notice.model_validate(
        {
            "id": notice_id,
            "seq": 1,
            "action": "drain",
            "reason": "manual",
            "provider": "local",
            "noticed_at": "2026-01-01T00:00:00Z",
            "sent_at": "2026-01-01T00:00:00Z",
            "detail": {"note": note},
        }
    )
    text = slack_text(notice, "gpu-1")
    assert "<" not in text and ">" not in text
    assert re.sub(r"&(?!amp;|lt;|gt;)", "", text) == text  # every & starts an escape
    plain = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    # As typed, but for the characters that are not printable (a line break): escaped.
    assert f"; note: {visible(note)} [{notice_id}]" in plain


def test_url_from_a_file_keeps_the_secret_out_of_config(tmp_path: Path):
    with receiver() as hook:
        secret = tmp_path / "webhook-url"
        secret.write_text(hook.url + SECRET_PATH + "\n")
        env = agent_env(tmp_path, FOREWARN_WEBHOOK_URL_FILE=str(secret))
        with AgentProcess(tmp_path, env=env) as agent:
            status = agent.control({"op": "status"})
            agent.control({"op": "notify", "action": "drain"})
            (delivery,) = hook.wait_for(1)
        assert delivery.path == SECRET_PATH
        assert "s3cr3t" not in json.dumps(status)


@pytest.mark.parametrize(
    ("env", "complaint"),
    [
        ({"FOREWARN_WEBHOOK_URL": "ftp://example.org/x"}, "webhook.url"),
        ({"FOREWARN_WEBHOOK_URL": "https:///nohost/s3cr3t"}, "webhook.url"),
        ({"FOREWARN_WEBHOOK_URL": "http://127.0.0.1:99999/s3cr3t"}, "webhook.url"),
        ({"FOREWARN_WEBHOOK_URL": "http://127.0.0.1:s3cr3t/x"}, "webhook.url"),
        ({"FOREWARN_WEBHOOK_URL": "http://127.0.0 .1/s3cr3t"}, "webhook.url"),
        # A host httpx cannot decode (a malformed punycode label) stopped the webhook at start.
        ({"FOREWARN_WEBHOOK_URL": "https://xn--.example.org/s3cr3t"}, "webhook.url"),
        ({"FOREWARN_WEBHOOK_URL_FILE": "/nonexistent/url"}, "/nonexistent/url"),
        ({"FOREWARN_WEBHOOK_CA_FILE": "/nonexistent/ca.pem"}, "webhook.ca_file"),
        ({"FOREWARN_WEBHOOK_CA_FILE": __file__}, "webhook.ca_file: no certificate in"),
        ({"FOREWARN_WEBHOOK_FORMAT": "teams"}, "webhook.format"),
        ({"FOREWARN_WEBHOOK_TIMEOUT": "0"}, "webhook.timeout"),
    ],
)
def test_bad_webhook_settings_exit_2_naming_the_key(
    env: dict[str, str],
    complaint: str,
    tmp_path: Path,
    run_forewarn_forked: Callable[..., subprocess.CompletedProcess[str]],
):
    # The first case as the fresh `forewarn agent` a user starts; the others are about the
    # message, forked from a process that loaded the command line once (tests/conftest.py).
    run = (
        run_forewarn
        if env == {"FOREWARN_WEBHOOK_URL": "ftp://example.org/x"}
        else run_forewarn_forked
    )
    result = run("agent", "--provider", "local", env=agent_env(tmp_path, **env))
    assert result.returncode == 2, result.stderr
    assert complaint in result.stderr
    assert "s3cr3t" not in result.stderr


def test_settings_load_from_toml(tmp_path: Path):
    config = tmp_path / "forewarn.toml"
    config.write_text('[webhook]\nurl = "https://hooks.example.org/x"\nformat = "slack"\n')
    settings = load_settings(config_file=config)
    assert settings.webhook.resolved_url() == "https://hooks.example.org/x"
    assert settings.webhook.format == "slack"


@given(host=st.text(max_size=12), port=st.text(max_size=7), path=st.text(max_size=12))
def test_a_webhook_url_passes_only_if_httpx_can_post_to_it(host: str, port: str, path: str):
    """What check_url accepts, httpx can address (a port it can connect to, no stray
    characters); what it refuses, it refuses without echoing the URL."""
    url = f"http://{host}:{port}/{path}" if port else f"http://{host}/{path}"
    try:
        check_url(url)
    except ValueError as error:
        assert url not in str(error)
        return
    parsed = httpx.URL(url)
    assert parsed.port is None or 1 <= parsed.port <= 65535
    assert not any(char.isspace() for char in url)


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_a_notice_not_delivered_before_a_restart_is_delivered_after_it(tmp_path: Path, stop: str):
    """The receiver was down (retrying) when the agent stopped: the notice was lost with the
    process. It is kept in the state directory and delivered by the restarted agent, once;
    delivered, it leaves the file."""
    pending = tmp_path / "state" / "webhook-pending.json"
    with receiver(script=[503] * 1000) as hook:
        first = agent_with_webhook(tmp_path, hook.url).start()
        try:
            notice = first.control({"op": "notify", "action": "drain", "note": "kept"})["notice"]
            eventually(lambda: hook.attempts >= 1, timeout=15, what="the first attempt")
            eventually(lambda: notice["id"] in pending_ids(pending), what="the pending file")
        finally:
            first.stop(signal.Signals[stop])
        assert pending_ids(pending) == [notice["id"]]
        with hook.lock:
            hook.script.clear()  # the receiver is back
        with AgentProcess(tmp_path, env=first.env) as agent:
            (delivery,) = hook.wait_for(1, timeout=15)
            assert delivery.body == notice
            eventually(lambda: pending_ids(pending) == [], what="the delivered notice removed")
            agent.control({"op": "notify", "action": "terminate", "deadline": None})
            hook.wait_for(2, timeout=15)
            # Delivered in order: a drain sent twice would have come before the terminate.
            assert [r.body["action"] for r in hook.received] == ["drain", "terminate"]
        assert "1 notice(s) not delivered before the agent stopped" in agent.output()


def kept_notice(seq: int, action: str, deadline_in: float) -> Notice:
    """A notice as a pending file keeps it, its deadline `deadline_in` seconds from now
    (negative: past)."""
    deadline = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + deadline_in))
    return local_notice(seq, action).model_copy(update={"deadline": parse_time(deadline)})


def test_a_kept_notice_long_expired_is_delivered_marked_late(tmp_path: Path):
    """A drain kept in the pending file while the agent was down for hours was delivered as if
    current: "deadline ... (0 s left)" in Slack. It is delivered, marked late; one whose
    deadline is still ahead reads as before."""
    expired = kept_notice(1, "drain", -3 * 3600 - 120)
    current = kept_notice(2, "terminate", 600)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "webhook-pending.json").write_bytes(encode_pending([expired, current]))
    with (
        receiver() as hook,
        agent_with_webhook(tmp_path, hook.url, FOREWARN_WEBHOOK_FORMAT="slack") as agent,
    ):
        late, fresh = (delivery.body["text"] for delivery in hook.wait_for(2, timeout=15))
    assert "LATE, expired while the agent was down: DRAIN (manual from local)" in late, late
    assert "3 h 2 min ago" in late and "left" not in late and "checkpoint" not in late
    assert late.endswith("[local/1]")
    assert "TERMINATE" in fresh and "checkpoint and exit now" in fresh and "LATE" not in fresh
    left = re.search(r"\((\d+) s left\)", fresh)
    assert left is not None and 500 < int(left.group(1)) <= 600, fresh
    logged = (
        "drain local/1 was kept while the agent was down and its deadline passed 3 h 2 min ago: "
        "delivered marked late"
    )
    assert logged in agent.output()


def test_only_a_kept_notice_past_the_bound_reads_late():
    """A notice delivered live (retried past its deadline), or kept but expired less than
    LATE_AFTER ago (the restart itself), reads as it always did."""
    long_ago = kept_notice(1, "terminate", -2 * LATE_AFTER)
    just_now = kept_notice(2, "terminate", -LATE_AFTER / 2)
    assert "LATE" not in slack_text(long_ago, "gpu-1")
    assert "(0 s left)" in slack_text(long_ago, "gpu-1")
    assert "(0 s left)" in slack_text(just_now, "gpu-1", kept=True)
    assert "LATE" in slack_text(long_ago, "gpu-1", kept=True)
    cleared = local_notice(3, "clear")
    assert slack_text(cleared, "gpu-1", kept=True) == slack_text(cleared, "gpu-1")
    spans = [span(s) for s in (61, 3599, 3600, 3 * 3600 + 150, 47 * 3600, 50 * 3600)]
    assert spans == ["1 min", "59 min", "1 h 0 min", "3 h 2 min", "47 h 0 min", "2 d 2 h"]


def pending_ids(path: Path) -> list[str]:
    try:
        return [notice["id"] for notice in json.loads(path.read_text())["notices"]]
    except (OSError, ValueError):
        return []


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@given(
    st.binary(max_size=64)
    | _json.map(lambda value: json.dumps(value).encode())
    | st.lists(_json | st.just(local_notice(3, "drain").model_dump(mode="json")), max_size=3).map(
        lambda items: json.dumps({"version": 1, "notices": items, "done_notices": items}).encode()
    )
)
def test_any_pending_file_reads_as_notices_or_a_value_error(data: bytes):
    done = decode_done(data)
    assert done is None or all(isinstance(a, str) and isinstance(b, str) for a, b in done)
    assert all(isinstance(notice, Notice) for notice in decode_done_notices(data))
    try:
        notices, problems = decode_pending(data)
    except ValueError as error:
        assert str(error)
        return
    assert all(isinstance(notice, Notice) for notice in notices)
    assert all(isinstance(problem, str) and problem for problem in problems)


def test_pending_notices_read_back_and_a_broken_file_is_set_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    kept = [local_notice(1, "drain"), local_notice(2, "terminate")]
    path = tmp_path / "webhook-pending.json"
    path.write_bytes(encode_pending(kept))
    # As sent: times at the wire's millisecond precision.
    read = [notice.model_dump_json() for notice in PendingFile(path, list).load()]
    assert read == [notice.model_dump_json() for notice in kept]
    path.write_bytes(encode_pending([], [("local/1", "drain")], kept))
    done = [notice.model_dump_json() for notice in decode_done_notices(path.read_bytes())]
    assert done == [notice.model_dump_json() for notice in kept]
    path.write_text('{"version": 1, "notices": [{"id": "bad"}]}')
    assert PendingFile(path, list).load() == []
    assert "notice 0: " in caplog.text and path.exists()
    path.write_text("not json")
    assert PendingFile(path, list).load() == []
    assert not path.exists() and path.with_name(path.name + ".broken").exists()
    assert "webhook pending file" in caplog.text and "moved to" in caplog.text


def test_a_retried_slack_line_says_the_time_left_when_it_is_sent(tmp_path: Path):
    """A Slack line was written once, before the first attempt: after a 503 with Retry-After
    the receiver got "(100 s left)" although only about 95 s were left, and behind a few
    minutes of retries a terminate read as if there were still time."""
    with (
        receiver(script=[(503, "5")]) as hook,
        agent_with_webhook(tmp_path, hook.url, FOREWARN_WEBHOOK_FORMAT="slack") as agent,
    ):
        deadline = int(time.time()) + 100
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(deadline))
        agent.control({"op": "notify", "action": "terminate", "deadline": when})
        (delivery,) = hook.wait_for(1, timeout=20)
    assert hook.attempts == 2
    left = re.search(r"\((\d+) s left\)", delivery.body["text"])
    assert left is not None, delivery.body["text"]
    # The body was written just before it was read: at most a second or so earlier.
    assert int(left.group(1)) <= deadline - delivery.at + 1.5, (left.group(1), delivery.at)


def test_a_slack_line_says_when_a_clear_is_an_expiry(tmp_path: Path):
    """A notice retired past its deadline plus the grace went to Slack as a bare "clear", as
    if the provider had withdrawn it: the channel read "all clear" where the agent had only
    stopped waiting. The line says it expired and why, as `forewarn watch` does."""
    with (
        receiver() as hook,
        agent_with_webhook(
            tmp_path, hook.url, FOREWARN_WEBHOOK_FORMAT="slack", FOREWARN_NOTICE_GRACE="1s"
        ) as agent,
    ):
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1))
        agent.control({"op": "notify", "action": "terminate", "deadline": when})
        eventually(
            lambda: any("clear" in r.body["text"] for r in hook.wait_for(1)),
            timeout=15,
            what="the expiry's clear",
        )
    texts = [r.body["text"] for r in hook.received]
    (cleared,) = [text for text in texts if ": clear (" in text]
    assert "expired: past its deadline plus a grace of 1s" in cleared, cleared
    withdrawn = local_notice(3, "clear")
    assert "expired" not in slack_text(withdrawn, "gpu-1")


def test_a_redirect_to_a_malformed_host_ends_no_later_delivery(tmp_path: Path):
    """A 308 whose Location names a host that cannot be decoded (`xn--`, a malformed
    punycode label): httpx raised IDNAError reading it, the webhook's task died, and no later
    notice was ever delivered while the agent ran on (its /healthz said 503)."""
    with (
        receiver(script=[(308, "http://xn--/moved")]) as hook,
        agent_with_webhook(tmp_path, hook.url) as agent,
    ):
        agent.control({"op": "notify", "action": "drain", "note": "redirected"})
        eventually(lambda: "gave up on drain" in agent.output(), timeout=10)
        agent.control({"op": "notify", "action": "terminate", "deadline": None})
        (delivery,) = hook.wait_for(1, timeout=15)
    assert delivery.body["action"] == "terminate"
    assert "an answer that cannot be read: IDNAError" in agent.output()


def test_a_kept_notice_without_a_deadline_says_how_old_it_is(tmp_path: Path):
    """A drain without a deadline (a rebalance recommendation, a cordon) kept in the pending
    file while the agent was down for days was delivered as "DRAIN (...): checkpoint and
    continue", as if it were news: only a deadline could make a line read late. Its line says
    when it was sent and that it was kept; a kept one sent just now reads as before."""
    old = local_notice(1, "drain")
    old = old.model_copy(update={"sent_at": parse_time("2026-01-01T00:00:00Z")})
    fresh = local_notice(2, "drain")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "webhook-pending.json").write_bytes(encode_pending([old, fresh]))
    with (
        receiver() as hook,
        agent_with_webhook(tmp_path, hook.url, FOREWARN_WEBHOOK_FORMAT="slack") as agent,
    ):
        kept, current = (delivery.body["text"] for delivery in hook.wait_for(2, timeout=15))
    assert "OLD, kept while the agent was down: DRAIN (manual from local)" in kept, kept
    assert "sent 2026-01-01T00:00:00Z" in kept and "checkpoint" not in kept
    assert "OLD" not in current and "checkpoint and continue" in current
    assert "drain local/1 was kept while the agent was down and was sent" in agent.output()


def test_a_receiver_at_an_ipv6_address_is_logged_in_brackets():
    """The log named `http://[fd00::7]:8080/hook` as "http://fd00::7:8080": neither a URL
    nor clear about where the port begins."""
    url = "http://[fd00::7]:8080" + SECRET_PATH
    assert WebhookObserver(WebhookSettings(url=url), url).target == "http://[fd00::7]:8080"
    url = "https://bot:pa55w0rd@[fd00::7]" + SECRET_PATH
    assert WebhookObserver(WebhookSettings(url=url), url).target == "https://[fd00::7]"


def test_kept_notices_past_the_queue_are_named_as_dropped(tmp_path: Path):
    """The pending file holds the notice being delivered besides a full queue: read back
    into a queue of the same size, its oldest was dropped without a word."""
    kept = [local_notice(seq, "drain") for seq in (1, 2, 3)]
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "webhook-pending.json").write_bytes(encode_pending(kept))
    with (
        receiver() as hook,
        agent_with_webhook(tmp_path, hook.url, FOREWARN_WEBHOOK_QUEUE="2") as agent,
    ):
        delivered = hook.wait_for(2, timeout=15)
    assert [delivery.body["id"] for delivery in delivered] == ["local/2", "local/3"]
    assert "more than webhook.queue (2); dropping the oldest: drain local/1" in agent.output()


def test_a_url_file_saved_with_a_byte_order_mark_is_read(tmp_path: Path):
    """A URL file written by Windows PowerShell (`Set-Content -Encoding UTF8`) or Notepad
    begins with a byte order mark: the agent refused it (exit 2) saying the file held no
    http(s) URL, though it showed one."""
    secret = tmp_path / "webhook-url"
    secret.write_bytes(b"\xef\xbb\xbfhttps://hooks.example.org" + SECRET_PATH.encode() + b"\r\n")
    settings = WebhookSettings(url_file=secret)
    assert settings.resolved_url() == "https://hooks.example.org" + SECRET_PATH


def test_a_note_with_line_breaks_stays_on_the_slack_line(tmp_path: Path):
    """A note is any text of `notify --note`: one with a line break split the Slack message,
    and its second line read as a message of its own (another notice, a clear)."""
    note = "disk full\nforewarn on gpu-7: clear (manual from local)\r\tend"
    with (
        receiver() as hook,
        agent_with_webhook(tmp_path, hook.url, FOREWARN_WEBHOOK_FORMAT="slack") as agent,
    ):
        agent.control({"op": "notify", "action": "drain", "note": note})
        (delivery,) = hook.wait_for(1)
    text = delivery.body["text"]
    assert text.isprintable(), text
    assert (
        "note: disk full\\u000aforewarn on gpu-7: clear (manual from local)\\u000d\\u0009end"
        in text
    )


def test_pending_notices_that_cannot_be_saved_are_a_condition_in_status(tmp_path: Path):
    """The state directory cannot take webhook-pending.json: the notices waiting for a
    receiver that is down are lost at the next restart, which one ERROR line said and
    `forewarn status` did not."""
    env = agent_env(tmp_path, FOREWARN_WEBHOOK_URL="http://127.0.0.1:9/hook")
    pending = Path(env["FOREWARN_STATE_DIR"]) / "webhook-pending.json"
    with AgentProcess(tmp_path, env=env) as agent:
        # After the start, which sets a pending file it cannot read aside.
        pending.mkdir()  # not a file: every save fails
        agent.control({"op": "notify", "action": "drain"})

        def condition() -> str:
            conditions = agent.control({"op": "status"})["agent"]["conditions"]
            return str(conditions.get("webhook-pending", ""))

        shown = eventually(condition, what="the condition in status")
        assert "cannot save the notices not delivered yet" in shown
        pending.rmdir()
        agent.control({"op": "notify", "action": "drain", "note": "again"})
        eventually(lambda: not condition(), what="the condition gone once saved")


def test_a_delivery_under_way_at_a_stop_is_given_time_to_finish(tmp_path: Path):
    """A reclaimed machine stops its agent moments after the terminate is published: the
    POST under way was cut at SIGTERM and the notice kept in a file on a disk about to go
    away, so the channel never heard of the reclaim. The stop now waits a little for it."""
    with receiver(script=[0.5]) as hook, agent_with_webhook(tmp_path, hook.url) as agent:
        agent.control({"op": "notify", "action": "terminate"})
        eventually(lambda: hook.attempts == 1, what="the POST under way")
        assert agent.stop() == 0
    log = agent.output()
    assert "delivered terminate" in log, log
    assert "not delivered" not in log


def run_observer(
    observer: WebhookObserver, until: Callable[[], bool], feed: Callable[[], None]
) -> None:
    """Start `observer` on a loop of its own, call `feed`, run until `until()` (10 s at
    most), then stop it."""
    import asyncio

    async def run() -> None:
        observer.on_start(["local"])
        feed()
        end = time.monotonic() + 10
        while not until() and time.monotonic() < end:
            await asyncio.sleep(0.01)
        observer.on_stop()

    asyncio.run(run())


def test_a_notice_given_up_while_the_agent_runs_is_tried_again_until_delivered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The receiver was down longer than the retries last (a Slack outage, a network cut of
    a minute): the notice was given up on and lost while the agent ran on, though the file
    that keeps notices for a restart was there. It is kept and tried again, less often,
    until delivered; notices after it are not held behind it."""
    from forewarn.agent.notifications import webhook

    monkeypatch.setattr(webhook, "KEPT_RETRY", (0.05, 0.2))
    with receiver(script=[503] * 5) as hook:
        url = hook.url + SECRET_PATH
        observer = WebhookObserver(WebhookSettings(url=url, retries=1), url, state_dir=tmp_path)
        first = local_notice(1, "drain")
        run_observer(
            observer,
            until=lambda: observer.delivered == 1,
            feed=lambda: observer.on_notice(first, escalated=False),
        )
    assert [r.body["id"] for r in hook.received] == [first.id]
    assert hook.attempts == 6
    assert (observer.delivered, observer.failed, observer.dropped) == (1, 0, 0)
    assert decode_pending((tmp_path / "webhook-pending.json").read_bytes())[0] == []


def test_a_kept_notice_is_superseded_by_a_newer_one_of_its_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A drain kept for a receiver that is down is replaced by the terminate of the same
    notice that follows it: delivered after it, it would read as the news of the moment."""
    from forewarn.agent.notifications import webhook

    monkeypatch.setattr(webhook, "KEPT_RETRY", (30.0, 30.0))
    with receiver(script=[503, 503]) as hook:
        url = hook.url + SECRET_PATH
        observer = WebhookObserver(WebhookSettings(url=url, retries=1), url, state_dir=tmp_path)
        drain = local_notice(1, "drain")
        terminate = local_notice(1, "terminate").model_copy(update={"seq": 2})

        def feed() -> None:
            observer.on_notice(drain, escalated=False)

        sent: list[Notice] = []

        def kept_then_superseded() -> bool:
            kept = hook.attempts == 2 and observer.deliveries()["webhook"].pending == 1
            if kept and not sent:
                sent.append(terminate)
                observer.on_notice(terminate, escalated=True)
            return len(hook.received) == 1 and observer.deliveries()["webhook"].pending == 0

        run_observer(observer, until=kept_then_superseded, feed=feed)
    assert [(r.body["action"], r.body["seq"]) for r in hook.received] == [("terminate", 2)]
    assert (observer.delivered, observer.failed, observer.dropped) == (1, 0, 1)


def test_a_kept_back_notice_delivered_past_its_deadline_reads_late(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A terminate held back while the receiver did not answer, delivered once it answers
    again long past its deadline, read `checkpoint and exit now ... (0 s left)` in Slack: as
    if it were happening now. Its line says it is late, and why."""
    from forewarn.agent.notifications import webhook

    monkeypatch.setattr(webhook, "KEPT_RETRY", (0.05, 0.2))
    with receiver(script=[503, 503]) as hook:
        url = hook.url + SECRET_PATH
        settings = WebhookSettings(url=url, retries=0, format="slack")
        observer = WebhookObserver(settings, url, state_dir=tmp_path)
        notice = kept_notice(1, "terminate", deadline_in=-300)
        run_observer(
            observer,
            until=lambda: observer.delivered == 1,
            feed=lambda: observer.on_notice(notice, escalated=False),
        )
    (delivery,) = hook.received
    text = delivery.body["text"]
    assert "LATE, expired while the receiver did not answer: TERMINATE" in text, text
    assert "exit now" not in text and "s left" not in text


def test_a_kept_notice_the_receiver_keeps_failing_holds_back_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Two notices kept while the receiver was down; back up, it answers 503 to the first
    one only (a payload its handler trips on): the first was tried again and again at the
    head of the kept ones, and the second, which it would take, never went."""
    from forewarn.agent.notifications import webhook

    monkeypatch.setattr(webhook, "KEPT_RETRY", (0.02, 0.05))
    calls: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        notice_id = json.loads(request.content)["id"]
        calls.append(notice_id)
        down = len(calls) <= 2
        return httpx.Response(503 if down or notice_id == "local/1" else 200)

    url = "http://127.0.0.1:9" + SECRET_PATH
    observer = WebhookObserver(
        WebhookSettings(url=url, retries=0),
        url,
        transport=httpx.MockTransport(answer),
        state_dir=tmp_path,
    )

    def feed() -> None:
        for seq in (1, 2):
            observer.on_notice(local_notice(seq, "drain"), escalated=False)

    run_observer(observer, until=lambda: observer.delivered == 1, feed=feed)
    assert observer.delivered == 1, calls
    assert calls[:2] == ["local/1", "local/2"]
    assert "local/2" in calls[2:]
    assert [n.id for n in decode_pending((tmp_path / "webhook-pending.json").read_bytes())[0]] == [
        "local/1"
    ]


def test_a_notice_in_the_state_but_not_yet_in_the_pending_file_is_delivered(tmp_path: Path):
    """The state is written before the pending file (each in its own thread): an agent
    killed between the two left the notice in state.json and not in webhook-pending.json,
    and the restarted agent restored it and never delivered it (restored notices were not
    the webhook's business). The same when the pending file cannot be written, as here."""
    env = agent_env(tmp_path, FOREWARN_WEBHOOK_URL="http://127.0.0.1:9" + SECRET_PATH)
    pending = Path(env["FOREWARN_STATE_DIR"]) / "webhook-pending.json"
    first = AgentProcess(tmp_path, env=env).start()
    try:
        pending.mkdir()  # every save of the pending file fails; the state's succeed
        notice = first.control({"op": "notify", "action": "drain", "note": "kept"})["notice"]
        state = Path(env["FOREWARN_STATE_DIR"]) / "state.json"
        eventually(lambda: notice["id"] in state.read_text(), what="the notice in the state")
    finally:
        first.stop(signal.SIGKILL)
    pending.rmdir()
    with receiver() as hook:
        env = {**env, "FOREWARN_WEBHOOK_URL": hook.url + SECRET_PATH}
        with AgentProcess(tmp_path, env=env):
            (delivery,) = hook.wait_for(1, timeout=15)
            assert (delivery.body["id"], delivery.body["action"]) == (notice["id"], "drain")
            eventually(lambda: delivered_ids(pending) == [[notice["id"], "drain"]])


def test_a_clear_published_but_not_yet_in_the_pending_file_is_delivered_after_a_restart(
    tmp_path: Path,
):
    """The state is written before a clear goes out, the pending file after: an agent killed
    between the two left a delivered drain gone from state.json and no clear in
    webhook-pending.json, and the restarted agent had nothing to send the clear from: the
    receiver's drain never ended. The pending file's done record keeps the notice itself."""
    env = agent_env(tmp_path, FOREWARN_WEBHOOK_URL="http://127.0.0.1:9" + SECRET_PATH)
    state_dir = Path(env["FOREWARN_STATE_DIR"])
    pending = state_dir / "webhook-pending.json"
    with receiver() as hook:
        env = {**env, "FOREWARN_WEBHOOK_URL": hook.url + SECRET_PATH}
        first = AgentProcess(tmp_path, env=env).start()
        notice = first.control({"op": "notify", "action": "drain", "note": "n"})["notice"]
        hook.wait_for(1, timeout=15)
        eventually(lambda: delivered_ids(pending) == [[notice["id"], "drain"]])
    try:
        # The receiver is gone (the clear stays queued); the pending file as it was at the
        # kill: every later save of it fails, the state's succeed.
        saved = pending.read_bytes()
        pending.unlink()
        pending.mkdir()
        assert first.control({"op": "clear", "id": notice["id"]})["cleared"] == [notice["id"]]
        state = state_dir / "state.json"
        eventually(lambda: notice["id"] not in state.read_text(), what="the clear in the state")
    finally:
        first.stop(signal.SIGKILL)
    pending.rmdir()
    pending.write_bytes(saved)
    with receiver() as hook:
        env = {**env, "FOREWARN_WEBHOOK_URL": hook.url + SECRET_PATH}
        with AgentProcess(tmp_path, env=env) as agent:
            (delivery,) = hook.wait_for(1, timeout=15)
            assert (delivery.body["id"], delivery.body["action"]) == (notice["id"], "clear")
            assert delivery.body["provider"] == notice["provider"]
            eventually(lambda: delivered_ids(pending) == [], what="the clear recorded")
        # Delivered once: a restart after it does not send it again.
        with AgentProcess(tmp_path, env=env) as agent:
            agent.control({"op": "notify", "action": "drain", "note": "next"})
            hook.wait_for(2, timeout=15)
        assert [r.body["action"] for r in hook.received] == ["clear", "drain"]


def test_a_restored_notice_delivered_before_the_restart_is_not_delivered_again(tmp_path: Path):
    with receiver() as hook:
        with agent_with_webhook(tmp_path, hook.url) as first:
            first.control({"op": "notify", "action": "drain", "note": "once"})
            hook.wait_for(1, timeout=15)
            pending = Path(first.env["FOREWARN_STATE_DIR"]) / "webhook-pending.json"
            eventually(lambda: len(delivered_ids(pending)) == 1, what="the delivery recorded")
        with AgentProcess(tmp_path, env=first.env) as agent:
            agent.control({"op": "notify", "action": "terminate", "deadline": None})
            hook.wait_for(2, timeout=15)
        assert [r.body["action"] for r in hook.received] == ["drain", "terminate"]


def test_a_done_notice_gets_one_clear_at_start_unless_restored_or_its_clear_is_kept(
    tmp_path: Path,
):
    """At start, a notice the pending file names done gets a clear when its id was neither
    restored nor published (the state dropped it, the clear never reached the file); not a
    second one when the file keeps its clear queued, none when the id was restored."""
    posted: list[tuple[str, str, int]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        posted.append((body["id"], body["action"], body["seq"]))
        return httpx.Response(200)

    restored, dropped, queued = (local_notice(n, "drain") for n in (1, 2, 3))
    queued_clear = queued.model_copy(update={"action": "clear", "seq": 4})
    done = [done_key(notice) for notice in (restored, dropped, queued)]
    path = tmp_path / "webhook-pending.json"
    path.write_bytes(encode_pending([queued_clear], done, [restored, dropped, queued]))

    async def run() -> None:
        url = "http://127.0.0.1:9" + SECRET_PATH
        observer = WebhookObserver(
            WebhookSettings(url=url), url, transport=httpx.MockTransport(answer), state_dir=tmp_path
        )
        observer.on_start(["other"])  # no watcher of `local`: its clears are not held
        observer.on_restored(restored)
        observer.on_restore_done(iter(range(10, 20)).__next__)
        await eventually_async(lambda: len(posted) == 2, what="the clears")
        await observer.settle()
        observer.on_stop()

    asyncio.run(run())
    assert posted == [("local/3", "clear", 4), ("local/2", "clear", 10)]
    assert delivered_ids(path) == [["local/1", "drain"]]
    assert decode_pending(path.read_bytes())[0] == []


def delivered_ids(path: Path) -> list[list[str]]:
    try:
        return list(json.loads(path.read_text()).get("delivered", []))
    except (OSError, ValueError):
        return []


def test_a_notice_restored_and_escalated_at_start_is_delivered_once(tmp_path: Path):
    """A drain whose deadline came inside the exit margin while the agent was down is both
    restored and sent as an escalation at start: delivered once, not twice."""
    posted: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        posted.append(json.loads(request.content)["action"])
        return httpx.Response(200)

    async def run() -> None:
        url = "http://127.0.0.1:9" + SECRET_PATH
        observer = WebhookObserver(
            WebhookSettings(url=url), url, transport=httpx.MockTransport(answer), state_dir=tmp_path
        )
        observer.on_start(["local"])
        notice = local_notice(4, "terminate")
        observer.on_restored(notice)
        observer.on_notice(notice, escalated=True)
        await observer.settle()
        observer.on_stop()

    asyncio.run(run())
    assert posted == ["terminate"]
    assert delivered_ids(tmp_path / "webhook-pending.json") == [["local/4", "terminate"]]


def test_a_done_notice_reported_again_after_the_restart_gets_no_clear(tmp_path: Path):
    """A provider notice delivered just before a SIGKILL that the state had not taken yet:
    the restarted agent owes it a clear (its files cannot tell it from one cleared), and its
    watcher reports it again at its first answer. The receiver read drain, clear, drain: a
    reclaim called off that was not. The clear waits for a report of the id until the
    provider has answered twice."""
    posted: list[tuple[str, str]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        posted.append((body["id"], body["action"]))
        return httpx.Response(200)

    again, gone = local_notice(1, "drain"), local_notice(2, "drain")
    path = tmp_path / "webhook-pending.json"
    path.write_bytes(encode_pending([], [done_key(again), done_key(gone)], [again, gone]))

    async def run() -> None:
        url = "http://127.0.0.1:9" + SECRET_PATH
        observer = WebhookObserver(
            WebhookSettings(url=url), url, transport=httpx.MockTransport(answer), state_dir=tmp_path
        )
        observer.on_start(["local"])
        observer.on_restore_done(iter(range(10, 20)).__next__)
        observer.on_poll("local", True, None)  # its first answer: the one report again
        observer.on_notice(again.model_copy(update={"seq": 20}), escalated=False)
        await eventually_async(lambda: posted == [("local/1", "drain")], what="the drain")
        observer.on_poll("local", True, None)
        # Both holds end together, the one reported again first: its clear, were it sent,
        # would come before the other's.
        await eventually_async(lambda: ("local/2", "clear") in posted, what="the owed clear")
        await observer.settle()
        observer.on_stop()

    asyncio.run(run())
    # The one reported again: delivered again (at least once), never cleared; the other,
    # not reported again, gets its clear once the hold is over.
    assert posted == [("local/1", "drain"), ("local/2", "clear")]
