"""A blocking IMAP session over the standard library's imaplib, meant for a worker thread.

It reads the mailbox read-only (EXAMINE, BODY.PEEK), so the user's mail keeps its flags.
New mail is awaited with IDLE when the server offers it (RFC 2177), else the caller polls.
imaplib has no IDLE before Python 3.14, so this module sends it itself and reads the
socket through its own buffer, which tells whether a line is waiting without blocking.
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import imaplib
import logging
import re
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from forewarn.protocol.errors import ForewarnError

from .envfile import parse_env_with_notes

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

log = logging.getLogger("forewarn.providers.digitalocean")

TlsMode = Literal["tls", "starttls", "none"]
USER_KEYS = ("FOREWARN_IMAP_USER", "IMAP_USER")
PASSWORD_KEYS = ("FOREWARN_IMAP_PASSWORD", "IMAP_PASSWORD")
# A reclaim notice is a short mail; reading only its first 256 KiB bounds the memory a huge
# attachment could take.
FETCH_LIMIT = 262144
_MAXLINE = 1_000_000
# Bytes the server may send in answer to one command, its lines and literals together: a
# server announcing a literal of `{999999999}` had imaplib read it whole (1.9 GB in 5 s from
# one on loopback, then a MemoryError), and one sending line after line under _MAXLINE had
# them all kept until its tagged end. The largest real answers are a search span (600 KB)
# and a mail (FETCH_LIMIT); a literal may be no longer than a line.
_MAXANSWER = 16 * _MAXLINE
# UIDs searched at once: an answer listing every UID of a mailbox of 100,000 mails is over
# _MAXLINE (a UID takes up to 11 bytes), and the search failed on every connection, so no
# mail was read at all. 50,000 UIDs of 11 bytes keep each answer under 600 KB.
SEARCH_SPAN = 50_000
# IMAP dates use English month names whatever the locale.
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# A NAT or firewall that forgets an idle connection drops it without a word: the watcher
# sat in IDLE on a connection no mail could come through until the next renewal (25 min)
# found it dead. TCP keepalive probes it after 60 s of silence, every 15 s, and after 4
# unanswered probes the kernel ends it with an error (about 2 minutes): the watcher then
# reconnects. Probing every 60 s also keeps most NAT mappings from expiring at all.
KEEPALIVE_IDLE = 60
# IMAP answers a session call may wait for, each up to imap_timeout: connecting takes the
# most (connect, greeting, TLS, login, CAPABILITY, EXAMINE), and a call is given that many;
# a line in IDLE, and DONE's answer, are given as long.
ANSWERS_PER_CALL = 4
# Seconds from the start of an IDLE the server ended itself to the next search: one that
# ends every IDLE at once is searched no more than once a second.
IDLE_PAUSE = 1.0
KEEPALIVE_INTERVAL = 15
KEEPALIVE_PROBES = 4


class MailboxError(ForewarnError):
    """A failure worth one clear line; `kind` groups repeats in PollHealth."""

    kind = "imap"


class CredentialsError(MailboxError):
    kind = "credentials"


class LoginRefused(MailboxError):
    kind = "auth"


class TlsFailure(MailboxError):
    kind = "tls"


class ServerFailure(MailboxError):
    kind = "imap"


class FetchRefused(ServerFailure):
    """The server answered the FETCH of one mail with an error (NO, BAD, BYE), not with the
    mail: Dovecot does so for a mail file it cannot read, every time it is asked."""


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str = field(repr=False)

    def __repr__(self) -> str:
        return "Credentials(user=<hidden>, password=<hidden>)"

    __str__ = __repr__


def load_credentials(path: Path) -> Credentials:
    """Read `KEY=VALUE` lines as systemd reads an EnvironmentFile (`envfile.py`: comments,
    quotes, backslashes; an optional `export `). Errors name the file and the key or line,
    never a value."""
    try:
        text = _decoded(path, path.read_bytes())
        _warn_if_readable_by_others(path)
    except FileNotFoundError:
        raise CredentialsError(f"credentials_file {path}: not found") from None
    except OSError as error:
        raise CredentialsError(
            f"credentials_file {path}: cannot read it ({error.strerror})"
        ) from None
    try:
        values, backslash_unquoted = parse_env_with_notes(text)
    except ValueError as error:
        raise CredentialsError(f"credentials_file {path}: {error}") from None
    if backslash_unquoted and path not in _warned_backslash:
        # Read as systemd does (a backslash keeps the next character, and goes), which a
        # file that kept its backslashes before may not expect: said once, never the value.
        _warned_backslash.add(path)
        log.warning(
            "digitalocean: credentials_file %s: a backslash in an unquoted value escapes the "
            "character after it, as systemd reads it; put the value in single quotes to keep "
            "every character as written",
            path,
        )
    user = next((values[key] for key in USER_KEYS if values.get(key)), None)
    password = next((values[key] for key in PASSWORD_KEYS if values.get(key)), None)
    if user is None:
        raise CredentialsError(f"credentials_file {path}: no {USER_KEYS[0]}= line")
    if password is None:
        raise CredentialsError(f"credentials_file {path}: no {PASSWORD_KEYS[0]}= line")
    return Credentials(user, password)


def _decoded(path: Path, raw: bytes) -> str:
    # Notepad saves with a byte order mark (UTF-8, or UTF-16 as "Unicode"): read as it
    # was, the mark became part of the first key, and the user line was "not found".
    encoding = "utf-8"
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    try:
        return raw.removeprefix(codecs.BOM_UTF8).decode(encoding)
    except UnicodeDecodeError as error:
        raise CredentialsError(
            f"credentials_file {path}: not {encoding.upper()} text (byte {error.start}); "
            "save it as UTF-8"
        ) from None


_warned: set[Path] = set()
_warned_backslash: set[Path] = set()


def _warn_if_readable_by_others(path: Path) -> None:
    if path not in _warned and path.stat().st_mode & 0o077:
        _warned.add(path)
        log.warning("digitalocean: credentials_file %s is readable by others; chmod 600 it", path)


def keep_alive(sock: socket.socket) -> None:
    """Turn on TCP keepalive with the timings above, where the platform has the options
    (Linux and Windows name the idle time TCP_KEEPIDLE, macOS TCP_KEEPALIVE)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    idle = getattr(socket, "TCP_KEEPIDLE", None) or getattr(socket, "TCP_KEEPALIVE", None)
    for option, value in (
        (idle, KEEPALIVE_IDLE),
        (getattr(socket, "TCP_KEEPINTVL", None), KEEPALIVE_INTERVAL),
        (getattr(socket, "TCP_KEEPCNT", None), KEEPALIVE_PROBES),
    ):
        if option is not None:
            # An option the running kernel refuses leaves its default: keepalive is on.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, option, value)


def tls_context(ca_file: Path | None) -> ssl.SSLContext:
    """A client context trusting `ca_file` (else the system store); TlsFailure naming the file
    when it cannot be read. The OSError alone said "cannot connect to IMAP server ...: [Errno
    2] No such file or directory", naming neither the key nor the file."""
    try:
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file is not None else None)
    except ssl.SSLError:
        raise TlsFailure(f"imap_ca_file {ca_file}: no certificate in it (expected PEM)") from None
    except OSError as error:
        raise TlsFailure(
            f"imap_ca_file {ca_file}: cannot read it ({error.strerror or error})"
        ) from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class _Buffered(imaplib.IMAP4):
    """Overrides imaplib's documented `read`/`readline` to read through a buffer this
    module can inspect: `waiting(timeout)` must know whether a line is already buffered
    (the file object imaplib makes cannot say so without blocking). What imaplib reads in
    answer to one command (until the next `send`) is held to _MAXANSWER bytes."""

    sock: socket.socket
    _rbuf: bytearray
    _answered = 0  # bytes imaplib read since the last command was sent

    def send(self, data: ReadableBuffer) -> None:
        self._answered = 0
        super().send(data)

    def _take(self, size: int) -> None:
        self._answered += size
        if self._answered > _MAXANSWER:
            raise imaplib.IMAP4.error(
                f"the server's answer to one command is more than {_MAXANSWER} bytes"
            )

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        if not chunk:
            return False
        self._rbuf += chunk
        return True

    def readline(self, until: float | None = None) -> bytes:
        """One line; with `until` (a time.monotonic() deadline), an error once it has passed
        with the line still incomplete: each read is bounded by the socket's timeout, the
        line not (a server sending a byte every second holds it for as long as it likes)."""
        while True:
            if until is not None and time.monotonic() > until:
                raise imaplib.IMAP4.error("no complete line from the server in time")
            end = self._rbuf.find(b"\n")
            # The limit holds for a line that came in one read too (as it does for one of
            # many), so that it is the same whatever the network's chunks.
            if end >= _MAXLINE or (end < 0 and len(self._rbuf) > _MAXLINE):
                raise imaplib.IMAP4.error(f"got more than {_MAXLINE} bytes")
            if end >= 0:
                if until is None:  # imaplib's, kept until the command's end
                    self._take(end + 1)
                line = bytes(self._rbuf[: end + 1])
                del self._rbuf[: end + 1]
                return line
            if not self._fill():
                line = bytes(self._rbuf)
                self._rbuf.clear()
                return line

    def read(self, size: int) -> bytes:
        """A literal of `size` bytes (imaplib reads one after a line ending in `{size}`)."""
        if size > _MAXLINE:
            raise imaplib.IMAP4.error(
                f"the server announced a literal of {size} bytes, more than the {_MAXLINE} "
                "any answer needs"
            )
        self._take(size)
        while len(self._rbuf) < size and self._fill():
            pass
        data = bytes(self._rbuf[:size])
        del self._rbuf[:size]
        return data

    def waiting(self, timeout: float) -> bool:
        if self._rbuf:
            return True
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return True
        readable, _, _ = select.select([self.sock], [], [], timeout)
        return bool(readable)


class _Dialing(_Buffered):
    """Connects as `socket.create_connection` does, but hands each socket to `_watch`
    before connecting it: imaplib connects and reads the greeting (and IMAP4_SSL shakes
    hands) inside its constructor, before the session holds the connection, and only a
    socket the session holds can be shut down by `abort` from another thread."""

    _watch: Callable[[socket.socket], None]
    _resolve: Callable[[str | None, int], list[Any]]
    _connected: Callable[[], None]

    def _dial(self, host: str, port: int, timeout: float | None) -> socket.socket:
        failure: OSError | None = None
        for family, kind, proto, _, address in self._resolve(host or None, port):
            sock = socket.socket(family, kind, proto)
            try:
                self._watch(sock)
                keep_alive(sock)
                sock.settimeout(timeout)
                sock.connect(address)
                self._connected()
                return sock
            except OSError as error:
                sock.close()
                failure = error
        raise failure or OSError(f"{host}: no address to connect to")


class _Plain(_Dialing, imaplib.IMAP4):
    def __init__(self, host: str, port: int, timeout: float, session: MailboxSession) -> None:
        self._rbuf = bytearray()
        self._watch = session._watch
        self._resolve = session._resolve
        self._connected = session._connected
        super().__init__(host, port, timeout=timeout)

    def _create_socket(self, timeout: float | None = None) -> socket.socket:
        return self._dial(self.host, self.port, timeout)


class _Tls(_Dialing, imaplib.IMAP4_SSL):
    def __init__(
        self,
        host: str,
        port: int,
        context: ssl.SSLContext,
        timeout: float,
        session: MailboxSession,
    ) -> None:
        self._rbuf = bytearray()
        self._watch = session._watch
        self._resolve = session._resolve
        self._connected = session._connected
        super().__init__(host, port, ssl_context=context, timeout=timeout)

    def _create_socket(self, timeout: float | None = None) -> ssl.SSLSocket:
        sock = self._dial(self.host, self.port, timeout)
        try:
            return self.ssl_context.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise


_Connection = _Plain | _Tls
_EXISTS = re.compile(rb"^\* \d+ (EXISTS|RECENT)\b", re.IGNORECASE)
_COUNT = re.compile(rb"^\* (\d+) (EXISTS|EXPUNGE)\b", re.IGNORECASE)
_UID = re.compile(rb"\bUID (\d+)", re.IGNORECASE)
# An untagged NO or BAD without a response code: `* NO [ALERT] ...` is a warning for the user.
_TROUBLE = re.compile(rb"^\* (NO|BAD) (?!\[)", re.IGNORECASE)


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def mailbox_name(name: str) -> str:
    """A folder name as IMAP writes it (RFC 3501 5.1.3, modified UTF-7): `&` is `&-` and
    other than printable ASCII is UTF-16 in base64 between `&` and `-`. Sent as typed, a
    folder named with a non-ASCII letter failed in imaplib, one with `&` at the server."""
    out: list[str] = []
    run = ""

    def flush() -> None:
        nonlocal run
        if run:
            encoded = base64.b64encode(run.encode("utf-16-be")).decode("ascii")
            out.append("&" + encoded.rstrip("=").replace("/", ",") + "-")
            run = ""

    for char in name:
        if " " <= char <= "~":
            flush()
            out.append("&-" if char == "&" else char)
        else:
            run += char
    flush()
    return "".join(out)


def _reason(data: object) -> str:
    if isinstance(data, (list, tuple)) and data:
        data = data[-1]
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    text = str(data)
    # imaplib puts the server's bytes into its messages as a repr: b'...'
    if len(text) > 3 and text[:2] in ("b'", 'b"') and text[-1] == text[1]:
        text = text[2:-1]
    return text


def _trouble(said: str) -> ServerFailure:
    """An untagged NO or BAD: the session is in trouble. Dovecot says only "* NO Internal
    error occurred" to a session whose folder was deleted, and then answers its searches
    with nothing: taken for a warning, the watcher polled the deleted folder, healthy, and
    never read the mail of the folder made again under its name. A new connection opens the
    folder as it is now."""
    return ServerFailure(f"the IMAP server said {said!r}; opening the mailbox again")


def _failure(conn: imaplib.IMAP4, error: Exception) -> str:
    """What went wrong with a command, as said to the user: a BYE as the server said it
    (imaplib gave "command: UID => Server shutting down.", its prefix and no word of the
    BYE), else the error without imaplib's prefix."""
    if isinstance(error, imaplib.IMAP4.abort) and conn.untagged_responses.get("BYE"):
        return f"the IMAP server said * BYE {_said(error)}"
    if isinstance(error, imaplib.IMAP4.error):
        return _said(error)
    return str(error)


def _uids_of(data: list[Any]) -> list[int]:
    """The UIDs of a UID SEARCH answer as imaplib gives it: the words of its `* SEARCH`
    lines, or [None] when there was none (RFC 3501 wants one even when nothing matched; a
    server leaving it out failed every pass with "invalid literal for int() ... 'None'")."""
    words = b" ".join(item for item in data if isinstance(item, bytes)).split()
    if not all(_a_uid(word) for word in words):
        shown = b" ".join(words)[:80].decode("ascii", "replace")
        raise ServerFailure(f"the server's UID SEARCH answer is not a list of UIDs: {shown!r}")
    return [int(word) for word in words]


# The largest UID (RFC 3501: a non-zero 32-bit number).
MAX_UID = 2**32 - 1


def _a_uid(word: bytes) -> bool:
    """Whether `word` is a UID a mailbox can have: 1 to MAX_UID, in ASCII digits. A 40-digit
    one became the watcher's mark (`SeenMail.last_uid`): the session's later searches found
    no mail above it until a new connection's UIDNEXT undid it. 5,000 digits ended the
    search with Python's advice to raise its digit limit."""
    return word.isdigit() and len(word) <= 10 and 0 < int(word) <= MAX_UID


def _said(error: imaplib.IMAP4.error) -> str:
    """What the server said, without the command imaplib puts before it."""
    return re.sub(r"^command: \S+ => ", "", str(error))


def message_of(data: list[Any], uid: int) -> bytes | None:
    """The message in a UID FETCH answer as imaplib splits it: `(b'1 (UID 5 BODY[]<0>
    {n}', message)`, and then the rest of the line. The UID may come after the message
    (`* 1 FETCH (BODY[]<0> {n} ... UID 5)`, as some servers order it): read only before
    it, every mail of such a server was taken for expunged and passed over unread."""
    for at, item in enumerate(data):
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], bytes)):
            continue
        head = item[0] if isinstance(item[0], bytes) else b""
        tail = data[at + 1] if at + 1 < len(data) and isinstance(data[at + 1], bytes) else b""
        if b"BODY[" not in head.upper():
            continue
        if any(int(found) == uid for found in _UID.findall(head + b" " + tail)):
            return item[1]
    return None


# INTERNALDATE (RFC 3501 date-time): when the server received the mail.
_INTERNALDATE = re.compile(
    rb'\bINTERNALDATE "(?P<day>[ 0-9]?[0-9])-(?P<month>[A-Za-z]{3})-(?P<year>[0-9]{4}) '
    rb"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2}) "
    rb'(?P<sign>[+-])(?P<zh>[0-9]{2})(?P<zm>[0-9]{2})"',
    re.IGNORECASE,
)


def received_of(data: list[Any], uid: int) -> datetime | None:
    """When the server received mail `uid`, from a UID FETCH answer that asked for
    INTERNALDATE (before or after the message, as `message_of` reads the UID); None when
    the answer gives none, or one that is no moment."""
    for at, item in enumerate(data):
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], bytes)):
            continue
        head = item[0] if isinstance(item[0], bytes) else b""
        tail = data[at + 1] if at + 1 < len(data) and isinstance(data[at + 1], bytes) else b""
        line = head + b" " + tail
        if not any(int(found) == uid for found in _UID.findall(line)):
            continue
        written = _INTERNALDATE.search(line)
        if written is None:
            return None
        month = written.group("month").decode().title()
        if month not in _MONTHS:
            return None
        parts = [int(written.group(k)) for k in ("year", "day", "hour", "minute", "second")]
        sign = -1 if written.group("sign") == b"-" else 1
        zh, zm = int(written.group("zh")), int(written.group("zm"))
        try:
            zone = timezone(sign * timedelta(hours=zh, minutes=zm))
            year, day, hour, minute, second = parts
            return datetime(year, _MONTHS.index(month) + 1, day, hour, minute, second, tzinfo=zone)
        except ValueError:  # 31 February, hour 24, an offset of a day or more, year 0
            return None
    return None


@dataclass(frozen=True)
class Fetched:
    """A mail as fetched: its bytes, and when the server received it (None when the server
    did not say): a mail without a Date header is read from then."""

    raw: bytes
    received: datetime | None


class MailboxSession:
    """One connection to one mailbox. Every method blocks; `abort` may be called from
    another thread to end a blocked call at once."""

    def __init__(
        self,
        host: str,
        port: int,
        tls: TlsMode,
        *,
        ca_file: Path | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.host, self.port, self.tls, self.ca_file, self.timeout = (
            host,
            port,
            tls,
            ca_file,
            timeout,
        )
        self.conn: _Connection | None = None
        self.uidvalidity = 0
        self.uidnext: int | None = None  # the UID the server will give the next mail
        self.capabilities: frozenset[str] = frozenset()
        self.idling = False  # in IDLE, with everything before it read
        # The server announced mail (EXISTS) along with a SEARCH or FETCH answer: it will
        # not announce it again in IDLE, so the next wait must not wait.
        self.announced = False
        self.exists = 0  # the message count the server last told of
        self._aborted = False
        # A duplicate of the connection's socket from before it connects: `abort` shuts the
        # connection down through it at any stage (connect, greeting, TLS, STARTTLS, IDLE).
        self._handle: socket.socket | None = None
        # Set when the name lookup in progress answers, or by `abort`.
        self._lookup_over: threading.Event | None = None
        self._lock = threading.Lock()
        self._tags = 0
        # A search completed on this connection: an untagged NO from then on may mean the
        # folder changed under it (see `_trouble`); before, the folder was just opened.
        self._settled = False
        self._reached = False  # the connection in progress got past its TCP connect

    def __repr__(self) -> str:
        return f"MailboxSession({self.host}:{self.port}, tls={self.tls})"

    @property
    def idle(self) -> bool:
        return "IDLE" in self.capabilities

    def open(self, credentials: Credentials, mailbox: str = "INBOX") -> None:
        where = f"{self.host}:{self.port}"
        # Before connecting: a CA file that cannot be read is said as such.
        context = tls_context(self.ca_file) if self.tls != "none" else None
        self._reached = False
        try:
            if context is not None and self.tls == "tls":
                self.conn = _Tls(self.host, self.port, context, self.timeout, self)
            else:
                self.conn = _Plain(self.host, self.port, self.timeout, self)
                if context is not None:
                    if "STARTTLS" not in self.conn.capabilities:
                        raise TlsFailure(f"IMAP server {where} does not offer STARTTLS")
                    self.conn.starttls(ssl_context=context)
        except ssl.SSLError as error:
            raise TlsFailure(
                f"TLS with IMAP server {where} failed: {error}{self._mode_hint(error)}"
            ) from None
        except (OSError, imaplib.IMAP4.error) as error:
            raise ServerFailure(
                f"cannot connect to IMAP server {where}: {error}{self._mode_hint(error)}"
            ) from None
        if self._aborted:  # `abort` came while connecting: drop the fresh connection
            self.abort()
            raise ServerFailure(f"connection to {where} aborted")
        conn = self.conn
        if "LOGINDISABLED" in conn.capabilities:
            raise LoginRefused(f"IMAP server {where} refuses LOGIN on this connection")
        ascii_only = credentials.user.isascii() and credentials.password.isascii()
        try:
            if ascii_only or "AUTH=PLAIN" not in conn.capabilities:
                conn.login(_quoted(credentials.user), credentials.password)
            else:
                # LOGIN takes only ASCII; SASL PLAIN carries UTF-8 (RFC 4616). Without it a
                # password such as "Pässwort" could not log in at all.
                plain = b"\0".join([b"", credentials.user.encode(), credentials.password.encode()])
                conn.authenticate("PLAIN", lambda _: plain)
        except UnicodeEncodeError:
            raise CredentialsError(
                "IMAP user or password is not ASCII, and the server offers no AUTH=PLAIN "
                "to send it as UTF-8"
            ) from None
        except imaplib.IMAP4.abort as error:
            raise ServerFailure(f"IMAP server {where} dropped the login: {error}") from None
        except imaplib.IMAP4.error as error:
            # The account named (never the password): with a file per droplet or mailbox,
            # "refused the login" alone did not say which account to look at.
            raise LoginRefused(
                f"IMAP server {where} refused the login of {credentials.user!r} "
                f"({_reason(error.args)}): check the user and password in credentials_file"
            ) from None
        try:
            kind, data = conn.capability()
            if kind == "OK" and data and data[-1]:
                self.capabilities = frozenset(word.upper() for word in _reason(data).split())
            else:
                self.capabilities = frozenset(conn.capabilities)
            kind, data = conn.select(_quoted(mailbox_name(mailbox)), readonly=True)
            if kind != "OK":
                raise ServerFailure(f"mailbox {mailbox!r}: {_reason(data)}")
            _, validity = conn.response("UIDVALIDITY")
            if not validity or validity[0] is None:
                raise ServerFailure(f"mailbox {mailbox!r}: the server sent no UIDVALIDITY")
            self.uidvalidity = int(validity[0])
            _, following = conn.response("UIDNEXT")
            with contextlib.suppress(ValueError, TypeError, IndexError):
                self.uidnext = int(following[0])
            with contextlib.suppress(ValueError, TypeError, IndexError):
                self.exists = int(_reason(data))
            conn.untagged_responses.clear()
        except (OSError, imaplib.IMAP4.error, ValueError) as error:
            raise ServerFailure(f"IMAP server {where}: {error}") from None

    def _mode_hint(self, error: Exception) -> str:
        """What to set when the port is one of the other TLS mode (IMAPS is 993, STARTTLS
        143): mixed up, the error was only "wrong version number" or "timed out"."""
        if self.tls == "tls" and getattr(error, "reason", None) == "WRONG_VERSION_NUMBER":
            return (
                f"; the server answered without TLS: port {self.port} is one for STARTTLS "
                'or plain IMAP (143): set imap_tls = "starttls", or imap_port to the '
                "server's IMAPS port (993)"
            )
        if self.tls != "tls" and self._reached and isinstance(error, TimeoutError):
            return (
                f"; connected, but no greeting came within {self.timeout:g} s, as on a port "
                f"for IMAPS (993), where the server waits for TLS first: if {self.port} is "
                'one, set imap_tls = "tls"'
            )
        return ""

    def _connected(self) -> None:
        self._reached = True

    def _require(self) -> _Connection:
        if self.conn is None:
            raise ServerFailure("the mailbox session is not open")
        return self.conn

    def new_uids(self, after_uid: int, since: date | None = None) -> list[int]:
        """UIDs above `after_uid`, in order; with `since`, only mail delivered on or after
        that day (IMAP SINCE: the server's internal date, whole days)."""
        conn = self._require()
        dated = ""
        if since is not None:
            dated = f" SINCE {since.day}-{_MONTHS[since.month - 1]}-{since.year}"
        found: set[int] = set()
        try:
            # NOOP first: a server may answer SEARCH from its last view of the mailbox and
            # only take in new mail after it (Dovecot does), which would double the latency
            # of polling.
            conn.noop()
            self._count(conn)
            announced = False
            # Spans of SEARCH_SPAN UIDs up to the UIDNEXT of the SELECT, then the rest (`n:*`).
            low, top = after_uid + 1, (self.uidnext or 0) - 1
            while True:
                high = low + SEARCH_SPAN - 1
                span = f"{low}:{high}" if high < top else f"{low}:*"
                kind, data = conn.uid("SEARCH", f"UID {span}{dated}")
                if kind != "OK":
                    raise ServerFailure(f"UID SEARCH failed: {_reason(data)}")
                # Mail that came after the NOOP: Dovecot searches its previous view and then
                # announces it, and IDLE did not announce it again (found 25 min late).
                announced |= self._count(conn)
                found.update(_uids_of(data))
                if high >= top:
                    break
                low = high + 1
            self.announced = announced
            self._settled = True
            # `n:*` always names the highest UID, even one below n.
            return sorted(uid for uid in found if uid > after_uid)
        except (OSError, imaplib.IMAP4.error, ValueError) as error:
            raise ServerFailure(f"searching the mailbox failed: {_failure(conn, error)}") from None

    def fetch(self, uid: int) -> Fetched | None:
        """The message (its first FETCH_LIMIT bytes), left unread (BODY.PEEK), with when the
        server received it; None when it was expunged meanwhile."""
        conn = self._require()
        refused = f"the IMAP server refused to send mail UID {uid}"
        try:
            # INTERNALDATE: a mail without a Date is read from when the server received it.
            items = f"(UID INTERNALDATE BODY.PEEK[]<0.{FETCH_LIMIT}>)"
            kind, data = conn.uid("FETCH", str(uid), items)
            if kind != "OK":
                raise FetchRefused(f"{refused}: {_reason(data)}")
            try:
                self.announced |= self._count(conn)
            except ServerFailure as error:
                # An untagged NO or BAD with the mail is about it, as a tagged one: not
                # counted so, the mail was fetched again on every connection, forever.
                raise FetchRefused(f"{refused}: {error}") from None
        except OSError as error:
            raise ServerFailure(f"reading mail UID {uid} failed: {error}") from None
        except imaplib.IMAP4.abort as error:
            # Dovecot answers the FETCH of a mail file it cannot read with BYE ("FETCH
            # failed: Internal error occurred"); a connection that ended without a word is
            # no refusal.
            if conn.untagged_responses.get("BYE"):
                raise FetchRefused(f"{refused}: {_said(error)}") from None
            raise ServerFailure(f"reading mail UID {uid} failed: {error}") from None
        except imaplib.IMAP4.error as error:  # imaplib's word for a tagged BAD
            raise FetchRefused(f"{refused}: {_said(error)}") from None
        raw = message_of(data, uid)
        return None if raw is None else Fetched(raw, received_of(data, uid))

    def _count(self, conn: _Connection) -> bool:
        """Take in the untagged answers of the last command: True when they announce more
        mail than the server told of before (some servers repeat EXISTS unchanged)."""
        untagged = conn.untagged_responses
        for word in ("NO", "BAD") if self._settled else ():
            for text in map(_reason, untagged.get(word) or []):
                if not text.startswith("["):  # `[ALERT] ...`: a warning for the user
                    untagged.clear()
                    raise _trouble(f"* {word} {text}")
        known = self.exists - len(untagged.get("EXPUNGE", []))
        grew = False
        with contextlib.suppress(ValueError, TypeError, IndexError):
            told = int(_reason(untagged["EXISTS"])) if untagged.get("EXISTS") else known
            grew, known = told > known, told
        self.exists = max(known, 0)
        untagged.clear()
        return grew

    def _told(self, line: bytes) -> None:
        """Keep the message count up to date from a line read in IDLE."""
        count = _COUNT.match(line)
        if count is not None:
            if count.group(2).upper() == b"EXISTS":
                self.exists = int(count.group(1))
            else:
                self.exists = max(self.exists - 1, 0)

    def append(self, raw: bytes, mailbox: str = "INBOX") -> None:
        """File a message into `mailbox` (IMAP APPEND), as a mail client files one."""
        conn = self._require()
        try:
            kind, data = conn.append(_quoted(mailbox_name(mailbox)), None, None, raw)
        except (OSError, imaplib.IMAP4.error) as error:
            raise ServerFailure(f"APPEND to {mailbox!r} failed: {error}") from None
        if kind != "OK":
            raise ServerFailure(f"APPEND to {mailbox!r} refused: {_reason(data)}")

    def wait(self, timeout: float, stop: threading.Event) -> bool:
        """Wait for new mail with IDLE, at most `timeout` seconds or until `stop` is set.
        True when the server announced mail, or ended IDLE itself (it then announces nothing
        until asked: search now). Without IDLE it only waits."""
        if not self.idle:
            stop.wait(timeout)
            return False
        conn = self._require()
        if self.announced:
            return True
        # Each answer (the "+", a line announced in IDLE, DONE's) within a few imap_timeout:
        # a server trickling a line that never ends held the watcher until the runner's
        # stall bound (about 54 min), with no error said and no mail read.
        answer = ANSWERS_PER_CALL * self.timeout
        self._tags += 1
        tag = f"FW{self._tags}".encode()
        arrived = False
        try:
            conn.send(tag + b" IDLE\r\n")
            answered_by = time.monotonic() + answer
            # Untagged answers may come before the "+" (mail announced as IDLE begins): read
            # as IDLE refused, they cost an error and a reconnection.
            while not (line := conn.readline(answered_by)).startswith(b"+"):
                if not line:
                    raise ServerFailure("the IMAP server closed the connection at IDLE")
                if line.startswith(tag + b" "):
                    # Offered, yet refused (a proxy in front of the server): the watcher
                    # reconnected every second to be refused again. It polls instead.
                    self.capabilities -= {"IDLE"}
                    log.warning(
                        "digitalocean: the IMAP server offers IDLE but answered %r; polling "
                        "every poll_interval instead",
                        line.decode("utf-8", "replace").strip(),
                    )
                    return False
                if line.upper().startswith(b"* BYE"):
                    raise ServerFailure(
                        f"the IMAP server said {line.decode('utf-8', 'replace').strip()}"
                    )
                if _TROUBLE.match(line):
                    raise _trouble(line.decode("utf-8", "replace").strip())
                known = self.exists
                self._told(line)
                arrived |= self.exists > known
            self.idling = True
            began = time.monotonic()
            # Mail announced already: end IDLE at once, and search.
            until = began if arrived else began + timeout
            while not stop.is_set() and time.monotonic() < until:
                if not conn.waiting(min(0.25, max(0.0, until - time.monotonic()))):
                    continue
                line = conn.readline(time.monotonic() + answer)
                if not line:
                    raise ServerFailure("the IMAP server closed the connection during IDLE")
                self._told(line)
                if line.upper().startswith(b"* BYE"):
                    raise ServerFailure(
                        f"the IMAP server said {line.decode('utf-8', 'replace').strip()}"
                    )
                if _TROUBLE.match(line):
                    raise _trouble(line.decode("utf-8", "replace").strip())
                if line.startswith(tag + b" "):
                    # The server ended IDLE itself (an IDLE timeout, RFC 2177): it announces
                    # nothing more until the next command. Read as one more line, the watcher
                    # waited on until idle_renew and read mail delivered meanwhile that late.
                    if not line[len(tag) + 1 :].upper().startswith(b"OK"):
                        raise ServerFailure(
                            f"IDLE ended with {line.decode('utf-8', 'replace').strip()}"
                        )
                    log.debug("digitalocean: the IMAP server ended IDLE: %r", line.strip())
                    # One that ends every IDLE at once is not searched more than once a second.
                    stop.wait(max(0.0, began + IDLE_PAUSE - time.monotonic()))
                    return True
                if _EXISTS.match(line):
                    arrived = True
                    break
            if stop.is_set():
                return arrived
            conn.send(b"DONE\r\n")
            answered_by = time.monotonic() + answer
            while True:
                line = conn.readline(answered_by)
                if not line:
                    raise ServerFailure("the IMAP server closed the connection after IDLE")
                self._told(line)
                if line.startswith(tag + b" "):
                    if not line[len(tag) + 1 :].upper().startswith(b"OK"):
                        raise ServerFailure(
                            f"IDLE ended with {line.decode('utf-8', 'replace').strip()}"
                        )
                    return arrived
                if _EXISTS.match(line):
                    arrived = True
        except (OSError, imaplib.IMAP4.error) as error:
            raise ServerFailure(f"IDLE failed: {error}") from None
        finally:
            self.idling = False

    def _resolve(self, host: str | None, port: int) -> list[Any]:
        """`socket.getaddrinfo`, which nothing can interrupt (the resolver waits out its own
        timeouts and retries): it runs in a daemon thread that `abort` abandons, so a stop
        never waits for a DNS server that does not answer."""
        over = threading.Event()
        with self._lock:
            if self._aborted:
                raise OSError("the session was aborted")
            self._lookup_over = over
        answer: list[Any] = []

        def look_up() -> None:
            try:
                answer.append(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))
            except BaseException as error:  # gaierror, or UnicodeError for a bad name
                answer.append(error)
            finally:
                over.set()

        threading.Thread(target=look_up, name="forewarn-imap-lookup", daemon=True).start()
        over.wait()
        with self._lock:
            self._lookup_over = None
            if self._aborted:
                raise OSError("the session was aborted")
        if isinstance(answer[0], BaseException):
            raise answer[0]
        addresses: list[Any] = answer[0]
        return addresses

    def _watch(self, sock: socket.socket) -> None:
        with self._lock:
            if self._aborted:
                raise OSError("the session was aborted")
            # A later socket replaces one whose connect failed.
            old, self._handle = self._handle, sock.dup()
        if old is not None:
            old.close()

    def abort(self) -> None:
        """End the connection at once (from any thread): a blocked connect or read returns."""
        with self._lock:
            self._aborted = True
            conn, self.conn = self.conn, None
            handle, self._handle = self._handle, None
            lookup, self._lookup_over = self._lookup_over, None
        if lookup is not None:
            lookup.set()
        if handle is not None:
            with contextlib.suppress(OSError):
                handle.shutdown(socket.SHUT_RDWR)
            handle.close()
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sock.close()

    def close(self) -> None:
        """Log out politely, then close."""
        conn = self.conn
        if conn is not None:
            with contextlib.suppress(OSError, imaplib.IMAP4.error):
                conn.logout()
        self.abort()


__all__ = [
    "Credentials",
    "CredentialsError",
    "FetchRefused",
    "Fetched",
    "LoginRefused",
    "MailboxError",
    "MailboxSession",
    "ServerFailure",
    "TlsFailure",
    "keep_alive",
    "load_credentials",
    "mailbox_name",
    "message_of",
    "received_of",
    "tls_context",
]
