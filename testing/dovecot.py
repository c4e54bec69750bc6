"""A real Dovecot IMAP server on loopback, owned by a test: the mailbox where DigitalOcean's
reclaim emails arrive.

Each server writes its own dovecot.conf into a private directory: listeners on free
127.0.0.1 ports (IMAPS, and IMAP with STARTTLS), users in a passwd-file, maildirs beside
it, and a self-signed certificate made with the openssl command. Each `add_user` is a
mailbox of its own. `stop` ends the server and removes the directory.

Dovecot is not a Python package: install it from the system's packages
(`apt-get install dovecot-imapd`); without it `Dovecot()` raises `DovecotNotInstalled`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import imaplib
import itertools
import os
import pwd
import shutil
import signal
import ssl
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from forewarn.protocol.errors import ForewarnError

from .waiting import free_port, stop_process

DOVECOT_PATHS = ("/usr/sbin/dovecot", "/usr/local/sbin/dovecot")
INSTALL_HINT = "apt-get install dovecot-imapd (Debian, Ubuntu) or dnf install dovecot"
# Dovecot's own sockets live under the directory; sun_path holds 107 bytes, and the longest
# name Dovecot makes there is about 40.
_DIR_MAX = 60
_users = itertools.count(1)


class DovecotNotInstalled(ForewarnError, RuntimeError):
    """The dovecot (or openssl) command a DigitalOcean test needs is not on this machine."""


class DovecotFailed(ForewarnError, RuntimeError):
    """Dovecot exited or did not answer; the message ends with its log."""


def dovecot_binary() -> str | None:
    """The dovecot command, or None when it is not installed."""
    found = shutil.which("dovecot")
    if found:
        return found
    return next((path for path in DOVECOT_PATHS if os.access(path, os.X_OK)), None)


def _die_with_parent() -> None:
    # A test run killed outright must not leave a Dovecot behind (Linux: PR_SET_PDEATHSIG).
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


# The parent-death signal comes when the *thread* that started the server ends, not the
# process: every server is started from this one thread, which lasts as long as the process
# (a server started on a pool's or asyncio.to_thread's thread went with that thread).
_launcher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="forewarn-dovecot")


def _open_to_others(path: Path) -> bool:
    """Whether every directory from / to `path` may be passed through by any user."""
    return all(os.stat(part).st_mode & stat.S_IXOTH for part in (path, *path.parents))


def _server_root() -> Path:
    """A fresh directory for one server. As root, the mail processes run as an unprivileged
    user, who must be able to reach it; and its sockets' paths must stay short. Either need
    unmet in the temporary directory (a private TMPDIR, pytest's deep basetemp): /tmp."""
    base = Path(tempfile.gettempdir())
    if len(str(base)) > _DIR_MAX or (os.geteuid() == 0 and not _open_to_others(base)):
        base = Path("/tmp")
    root = Path(tempfile.mkdtemp(prefix="forewarn-dovecot-", dir=base))
    root.chmod(0o755)
    return root


@dataclass
class MailUser:
    name: str
    password: str


class Dovecot:
    """One Dovecot instance on 127.0.0.1: `start()`, `add_user()`, `append()`, `stop()`.

    `idle=False` leaves IDLE out of the capabilities, for a watcher that must poll."""

    def __init__(self, binary: str | None = None, idle: bool = True) -> None:
        found = binary or dovecot_binary()
        if found is None:
            raise DovecotNotInstalled(
                f"dovecot is not installed, and a DigitalOcean agent reads its reclaim emails "
                f"from a real IMAP server: {INSTALL_HINT}"
            )
        if shutil.which("openssl") is None:
            raise DovecotNotInstalled(
                "the openssl command is not installed (it makes the IMAP server's certificate)"
            )
        self.binary = found
        self.idle = idle
        self.root = _server_root()
        self.imaps_port = free_port()
        self.imap_port = free_port()
        self.cert = self.root / "cert.pem"
        self.users = self.root / "users"
        self.log = self.root / "dovecot.log"
        self.proc: subprocess.Popen[bytes] | None = None
        if os.geteuid() == 0:
            self.mail_uid, self.mail_gid = 65534, 65534  # nobody: Dovecot refuses uid 0
            self.login_user, self.internal_user = "dovenull", "dovecot"
        else:
            self.mail_uid, self.mail_gid = os.getuid(), os.getgid()
            self.login_user = self.internal_user = pwd.getpwuid(os.getuid()).pw_name

    def _make_cert(self) -> None:
        subprocess.run(
            [
                "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                "-subj", "/CN=localhost",
                "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                "-keyout", str(self.root / "key.pem"), "-out", str(self.cert),
            ],
            check=True, capture_output=True,
        )  # fmt: skip

    def _config(self) -> str:
        root = self.root
        capability = (
            ""
            if self.idle
            else "protocol imap {\n  imap_capability = IMAP4rev1 LITERAL+ SASL-IR ID ENABLE\n}\n"
        )
        return f"""
base_dir = {root}/run
state_dir = {root}/state
instance_name = forewarn-test-{root.name}
protocols = imap
listen = 127.0.0.1
log_path = {self.log}
default_login_user = {self.login_user}
default_internal_user = {self.internal_user}
mail_location = maildir:{root}/mail/%u
ssl = yes
ssl_cert = <{self.cert}
ssl_key = <{root}/key.pem
disable_plaintext_auth = no
auth_mechanisms = plain login
auth_failure_delay = 0
passdb {{
  driver = passwd-file
  args = scheme=PLAIN {self.users}/%u
}}
userdb {{
  driver = passwd-file
  args = {self.users}/%u
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {self.imap_port}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {self.imaps_port}
    ssl = yes
  }}
}}
# Failed logins from an address slow its later logins (the auth penalty); tests fail
# logins on purpose, so it is off (Dovecot's documented way: no penalty socket).
service anvil {{
  chroot =
  unix_listener anvil-auth-penalty {{
    mode = 0
  }}
}}
{capability}"""

    def start(self, timeout: float = 15.0) -> Dovecot:
        """Start the server; ready once it answers an IMAP greeting."""
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        self._make_cert()
        self.users.mkdir()
        mail = self.root / "mail"
        mail.mkdir()
        os.chown(mail, self.mail_uid, self.mail_gid)
        conf = self.root / "dovecot.conf"
        conf.write_text(self._config())
        self.proc = _launcher.submit(
            subprocess.Popen,
            [self.binary, "-F", "-c", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        ).result()
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise DovecotFailed(f"dovecot exited with {self.proc.returncode}:\n{self.logs()}")
            with contextlib.suppress(OSError, imaplib.IMAP4.error):
                imaplib.IMAP4("127.0.0.1", self.imap_port, timeout=2).logout()
                return
            if time.monotonic() > deadline:
                raise DovecotFailed(f"dovecot not ready within {timeout:g}s:\n{self.logs()}")
            time.sleep(0.02)

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def add_user(self, password: str = "secret-pw") -> MailUser:
        """A new mailbox, empty."""
        name = f"u{next(_users)}"
        # One passwd-file per user: Dovecot notices a changed passwd-file at most once a
        # second, but opens a file it has not read yet at once.
        (self.users / name).write_text(
            f"{name}:{{PLAIN}}{password}:{self.mail_uid}:{self.mail_gid}::"
            f"{self.root}/mail/{name}::\n"
        )
        return MailUser(name, password)

    def tls_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert))

    def connect(self, user: MailUser) -> imaplib.IMAP4:
        conn = imaplib.IMAP4_SSL(
            "127.0.0.1", self.imaps_port, ssl_context=self.tls_context(), timeout=10
        )
        # SASL PLAIN, which carries UTF-8: LOGIN takes only ASCII passwords.
        plain = b"\0".join([b"", user.name.encode(), user.password.encode()])
        conn.authenticate("PLAIN", lambda _: plain)
        return conn

    def append(
        self,
        user: MailUser,
        message: bytes,
        mailbox: str = "INBOX",
        delivered: datetime | None = None,
    ) -> None:
        """Deliver a mail the way a mail client files one: IMAP APPEND (`delivered` sets
        its internal date, when the server received it)."""
        conn = self.connect(user)
        try:
            kind, data = conn.append(mailbox, None, delivered, message)
            if kind != "OK":
                raise DovecotFailed(f"APPEND to {mailbox} of {user.name}: {kind} {data!r}")
        finally:
            conn.logout()

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def stop(self) -> None:
        """Stop the server (and its children) and remove its directory. Safe to call twice."""
        stop_process(self.proc, 10)
        shutil.rmtree(self.root, ignore_errors=True)


__all__ = [
    "Dovecot",
    "DovecotFailed",
    "DovecotNotInstalled",
    "MailUser",
    "dovecot_binary",
]
