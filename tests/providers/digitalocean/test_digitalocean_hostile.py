"""The IMAP session against a hostile or broken server on loopback: each test scripts what
the server answers to which command, over a real socket."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from forewarn.providers.digitalocean import watch
from forewarn.providers.digitalocean.imap import (
    _MAXLINE,
    Credentials,
    LoginRefused,
    MailboxError,
    MailboxSession,
)
from forewarn.providers.digitalocean.settings import Settings
from forewarn.testing.dovecot import Dovecot, MailUser
from forewarn.testing.waiting import stop_process
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_digitalocean_mailbox import reclaim, running, settings_for

# What the server does with one command: (the socket, the tag, the command in upper case).
PASSWORD = "pw-4711-secret"
Answer = Callable[[socket.socket, bytes, bytes], None]


def _standard(conn: socket.socket, tag: bytes, command: bytes) -> None:
    if command.startswith(b"CAPABILITY"):
        conn.sendall(b"* CAPABILITY IMAP4rev1 IDLE\r\n")
    elif command.startswith((b"EXAMINE", b"SELECT")):
        conn.sendall(b"* 1 EXISTS\r\n* OK [UIDVALIDITY 7] ok\r\n* OK [UIDNEXT 2] ok\r\n")
    elif command.startswith(b"UID SEARCH"):
        conn.sendall(b"* SEARCH 1\r\n")
    conn.sendall(tag + b" OK done\r\n")


@contextlib.contextmanager
def scripted(answers: dict[bytes, Answer]) -> Iterator[int]:
    """A server on 127.0.0.1 answering each command whose verb starts with a key of
    `answers` with it, any other as `_standard`; yields its port."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        buffer = bytearray()
        with contextlib.suppress(OSError), conn:
            conn.sendall(b"* OK ready\r\n")
            while True:
                while b"\n" not in buffer:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    buffer += chunk
                end = buffer.index(b"\n") + 1
                line = bytes(buffer[:end]).strip()
                del buffer[:end]
                tag, _, command = line.partition(b" ")
                command = command.upper()
                answer = next((a for k, a in answers.items() if command.startswith(k)), _standard)
                answer(conn, tag, command)

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


def opened(port: int, timeout: float = 5.0) -> MailboxSession:
    session = MailboxSession("127.0.0.1", port, "none", timeout=timeout)
    session.open(Credentials("ops@example.com", PASSWORD))
    return session


def _settings(tmp_path: Path, port: int, **changes: Any) -> Settings:
    credentials = tmp_path / "imap.env"
    credentials.write_text(
        f"FOREWARN_IMAP_USER=ops@example.com\nFOREWARN_IMAP_PASSWORD={PASSWORD}\n"
    )
    credentials.chmod(0o600)
    options: dict[str, Any] = {
        "url": "http://127.0.0.1:9",
        "droplet_id": "424242424",
        "droplet_name": "gpu-spot-1",
        "imap_host": "127.0.0.1",
        "imap_port": port,
        "imap_tls": "none",
        "credentials_file": credentials,
        "retry_max": 1.0,
    }
    return Settings(**{**options, **changes})


def test_a_literal_larger_than_any_answer_is_refused_before_it_is_read() -> None:
    # `{999999999}` before the mail: imaplib read the whole announced literal into memory
    # (a server streaming it took 1.9 GB in 5 s, then MemoryError, which no handler of the
    # watcher caught); one that sent less held the FETCH until imap_timeout.
    streamed = b"x" * 2_000_000  # made before memory is traced

    def huge(conn: socket.socket, tag: bytes, command: bytes) -> None:
        conn.sendall(b"* 1 FETCH (UID 1 BODY[]<0> {999999999}\r\n")
        conn.sendall(streamed)

    with scripted({b"UID FETCH": huge}) as port:
        session = opened(port, timeout=30)
        try:
            tracemalloc.start()
            started = time.monotonic()
            with pytest.raises(MailboxError, match="999999999"):
                session.fetch(1)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
            session.abort()
        assert time.monotonic() - started < 5
        assert peak < _MAXLINE


def test_an_answer_of_endless_lines_is_refused_once_past_the_answer_limit() -> None:
    # Lines each under the line limit, 40 MB of them to one command: all of them were kept
    # (imaplib's untagged answers) until the tagged end, or until memory ran out.
    def endless(conn: socket.socket, tag: bytes, command: bytes) -> None:
        line = b"* OK [ALERT] " + b"x" * 900_000 + b"\r\n"
        for _ in range(45):
            conn.sendall(line)
        conn.sendall(tag + b" OK done\r\n")

    with scripted({b"NOOP": endless}) as port:
        session = opened(port)
        try:
            with pytest.raises(MailboxError, match="more than"):
                session.new_uids(0)
        finally:
            session.abort()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(
        st.one_of(
            st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"")),
            st.sampled_from([b"* 1 EXISTS", b"* BYE going", b"* NO oops", b"+ go", b"* OK x"]),
            st.integers(min_value=0, max_value=10**12).map(lambda n: b"* 1 FETCH (BODY[] {%d}" % n),
        ),
        max_size=6,
    ),
    where=st.sampled_from([b"NOOP", b"UID SEARCH", b"UID FETCH", b"IDLE"]),
)
def test_any_lines_from_the_server_end_in_a_mailbox_error_or_an_answer(
    lines: list[bytes], where: bytes
) -> None:
    # Whatever the server writes where the session reads: an answer, or a MailboxError, in
    # bounded time and memory; never another exception, never a hang.
    def scripted_lines(conn: socket.socket, tag: bytes, command: bytes) -> None:
        conn.sendall(b"".join(line + b"\r\n" for line in lines))
        conn.close()

    with scripted({where: scripted_lines}) as port:
        session = opened(port, timeout=2)
        started = time.monotonic()
        try:
            if where == b"IDLE":
                session.wait(0.5, threading.Event())
            elif where == b"UID FETCH":
                session.fetch(1)
            else:
                session.new_uids(0)
        except MailboxError:
            pass
        finally:
            session.abort()
        assert time.monotonic() - started < 4 * 2 * 3


def test_a_refused_login_names_the_account() -> None:
    def refuse(conn: socket.socket, tag: bytes, command: bytes) -> None:
        conn.sendall(tag + b" NO [AUTHENTICATIONFAILED] Authentication failed.\r\n")

    with scripted({b"LOGIN": refuse}) as port, pytest.raises(LoginRefused) as refused:
        opened(port)
    assert "ops@example.com" in str(refused.value)
    assert PASSWORD not in str(refused.value)


def test_a_search_answered_without_its_search_line_finds_nothing_without_error() -> None:
    # RFC 3501 wants `* SEARCH` even when nothing matched; a server that leaves it out then
    # failed every pass with "invalid literal for int() with base 10: 'None'", reconnecting
    # forever with an error that said nothing of the server.
    def bare(conn: socket.socket, tag: bytes, command: bytes) -> None:
        conn.sendall(tag + b" OK Search completed.\r\n")

    with scripted({b"UID SEARCH": bare}) as port:
        session = opened(port)
        try:
            assert session.new_uids(0) == []
        finally:
            session.abort()


def test_a_search_answer_that_is_not_uids_is_an_error_that_says_so() -> None:
    def garbled(conn: socket.socket, tag: bytes, command: bytes) -> None:
        conn.sendall(b"* SEARCH 1 2 three\r\n" + tag + b" OK Search completed.\r\n")

    with scripted({b"UID SEARCH": garbled}) as port:
        session = opened(port)
        try:
            with pytest.raises(MailboxError, match="not a list of UIDs: '1 2 three'"):
                session.new_uids(0)
        finally:
            session.abort()


@pytest.mark.parametrize(
    "uid",
    [b"0", b"4294967296", b"9" * 40, b"9" * 5000],
    ids=["zero", "past-32-bits", "40-digits", "5000-digits"],
)
def test_a_search_answer_with_a_uid_no_mailbox_has_is_an_error_that_says_so(uid: bytes) -> None:
    # A UID is 1 to 2**32-1 (RFC 3501 nz-number). Taken, a 40-digit one became the watcher's
    # mark, above which the session found no later mail; 5,000 digits escaped as Python's
    # ValueError ("... use sys.set_int_max_str_digits()"), logged as state directory trouble
    # (found: adversarial pass H235).
    def odd(conn: socket.socket, tag: bytes, command: bytes) -> None:
        conn.sendall(b"* SEARCH 7 " + uid + b"\r\n" + tag + b" OK Search completed.\r\n")

    with scripted({b"UID SEARCH": odd}) as port:
        session = opened(port)
        try:
            with pytest.raises(MailboxError, match="not a list of UIDs") as refused:
                session.new_uids(0)
            assert len(str(refused.value)) < 300
        finally:
            session.abort()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.integers(min_value=0, max_value=10**60).map(lambda n: b"%d" % n)
        | st.binary(min_size=1, max_size=12).filter(lambda b: not any(c in b for c in b" \r\n")),
        max_size=6,
    )
)
def test_any_search_answer_is_uids_a_mailbox_has_or_an_error(words: list[bytes]) -> None:
    def answer(conn: socket.socket, tag: bytes, command: bytes) -> None:
        conn.sendall(b"* SEARCH " + b" ".join(words) + b"\r\n" + tag + b" OK done\r\n")

    with scripted({b"UID SEARCH": answer}) as port:
        session = opened(port)
        try:
            uids = session.new_uids(0)
        except MailboxError as error:
            assert "not a list of UIDs" in str(error)
            return
        finally:
            session.abort()
    assert all(1 <= uid < 2**32 for uid in uids)
    assert set(uids) == {int(word) for word in words}


async def test_a_server_silent_mid_idle_is_left_within_the_renewal_and_its_answers(
    tmp_path: Path,
) -> None:
    # The server's process hangs (stopped, deadlocked) with its connection open: keepalive
    # probes are answered by its kernel, so only the renewal finds it, and DONE's answer
    # is bounded by ANSWERS_PER_CALL imap_timeout. The watcher then reconnects.
    silent = threading.Event()
    connections: list[float] = []

    def hang(conn: socket.socket, tag: bytes, command: bytes) -> None:
        conn.sendall(b"+ idling\r\n")
        connections.append(time.monotonic())
        silent.wait(30)

    with scripted({b"IDLE": hang}) as port:
        settings = _settings(tmp_path, port, idle_renew=1.0, imap_timeout=0.5)
        try:
            async with running(settings, tmp_path / "s") as run:
                await run.until(lambda: len(connections) >= 1, what="the first IDLE")
                await run.until(lambda: len(connections) >= 2, timeout=20, what="a second IDLE")
                # The renewal (1 s), DONE's answers (4 x 0.5 s), and a backoff (<= 1 s).
                assert connections[1] - connections[0] < 1.0 + 2.0 + 1.2 + 2.0
                assert run.health.errors_by_kind.get("imap", 0) >= 1
        finally:
            silent.set()


async def test_dovecot_restarted_mid_idle_loses_no_mail_delivered_while_it_was_down(
    dovecot: Dovecot, tmp_path: Path
) -> None:
    # A server of its own, to restart: the shared one (`dovecot`) says it is installed.
    server = Dovecot(dovecot.binary).start()
    try:
        user = server.add_user()
        settings = settings_for(server, user, tmp_path, idle_renew=600, imap_timeout=2.0)
        async with running(settings, tmp_path / "s") as run:
            await run.idling()
            # Its master and every process it started (the session's imap process, which
            # may outlive the master), as a crash or `systemctl restart` with the
            # clients shut down ends them.
            assert server.proc is not None
            master = server.proc.pid
            children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
            stop_process(server.proc, 10)
            for child in map(int, children):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            # The mail is filed while the server is down: written to the Maildir, as a
            # delivery agent does, and read once the watcher is back in.
            new = Path(server.root, "mail", user.name, "new")
            new.mkdir(parents=True, exist_ok=True)
            (new / "1.delivered-while-down").write_bytes(reclaim())
            server.proc = subprocess.Popen(
                [server.binary, "-F", "-c", str(server.root / "dovecot.conf")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            await run.until(lambda: len(run.reports) == 1, timeout=30)
            await run.idling()
            assert run.health.errors_by_kind.get("imap", 0) >= 1
            assert len(run.reports) == 1
    finally:
        server.stop()


async def test_a_mail_deleted_between_search_and_fetch_is_passed_over_and_the_next_read(
    dovecot: Dovecot, mail_user: MailUser, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="forewarn")
    dovecot.append(mail_user, reclaim(subject="Weekly newsletter"))
    dovecot.append(mail_user, reclaim())
    fetch = MailboxSession.fetch
    deleted: list[int] = []

    def deleted_first(session: MailboxSession, uid: int) -> Any:
        if not deleted:
            deleted.append(uid)
            other = dovecot.connect(mail_user)
            try:
                other.select("INBOX")
                other.uid("STORE", str(uid), "+FLAGS", "(\\Deleted)")
                other.expunge()
            finally:
                other.logout()
        return fetch(session, uid)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MailboxSession, "fetch", deleted_first)
        async with running(settings_for(dovecot, mail_user, tmp_path), tmp_path / "s") as run:
            await run.until(lambda: len(run.reports) == 1, timeout=20)
            await run.idling()
        assert run.health.errors == 0, run.health.last_error
    assert deleted == [1]
    assert "mail UID 1 was gone when fetched; passed over" in caplog.text


async def test_the_imap_login_does_not_wait_for_the_rules_to_be_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Building the rules loads and compiles the mail parser (1.3 to 2.9 s at load 10); the
    # login waited for it, though it needs none of it. Here the rules are done only once
    # the server has seen the login: in that order the watcher never logged in.
    logged_in = threading.Event()

    def login(conn: socket.socket, tag: bytes, command: bytes) -> None:
        logged_in.set()
        conn.sendall(tag + b" OK logged in\r\n")

    build = watch.match_rules

    def rules_after_the_login(*args: Any) -> Any:
        assert logged_in.wait(10), "no login while the rules were being built"
        return build(*args)

    monkeypatch.setattr(watch, "match_rules", rules_after_the_login)
    with scripted({b"LOGIN": login}) as port:
        async with running(_settings(tmp_path, port), tmp_path / "s") as run:
            await run.until(lambda: run.health.successes >= 1, timeout=20, what="a pass")
            assert run.health.errors == 0, run.health.last_error


def test_a_bye_in_answer_to_a_search_is_said_as_a_bye() -> None:
    # It read "searching the mailbox failed: command: UID => shutting down": imaplib's
    # prefix, and no word that the server had ended the connection.
    def bye(conn: socket.socket, tag: bytes, command: bytes) -> None:
        conn.sendall(b"* BYE Server shutting down.\r\n")
        conn.close()

    with scripted({b"UID SEARCH": bye}) as port:
        session = opened(port)
        try:
            with pytest.raises(MailboxError) as failed:
                session.new_uids(0)
        finally:
            session.abort()
    assert str(failed.value) == (
        "searching the mailbox failed: the IMAP server said * BYE Server shutting down."
    )
