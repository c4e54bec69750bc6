"""Each provider's notices, raised the way that provider would raise them, and how to run its
simulator beside an agent."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from pathlib import Path
from typing import Any, ClassVar

from forewarn.protocol.timefmt import parse_duration

from .dovecot import Dovecot, MailUser
from .simcontrol import SimControl


def _seconds(value: float | str) -> float:
    return float(value) if isinstance(value, (int, float)) else parse_duration(value)


class ProviderNotices:
    """The simulator behind a provider-backed agent: its own notice kinds (`raise_notice`),
    changes, withdrawals and faults. Subclasses name the common notices."""

    name: ClassVar[str] = ""

    def __init__(self, sim: SimControl) -> None:
        self.sim = sim
        self.url = sim.url

    def raise_notice(self, kind: str, **fields: Any) -> str:
        """Any notice kind the simulator knows (see `forewarn simulate PROVIDER --help`)."""
        return self.sim.raise_notice(kind, **fields)

    def change(self, notice_id: str, **fields: Any) -> None:
        self.sim.change(notice_id, **fields)

    def withdraw(self, notice_id: str) -> None:
        """Withdraw a notice: the agent sends `clear`."""
        self.sim.withdraw(notice_id)

    def fault(self, kind: str, **fields: Any) -> str:
        """Make the provider's endpoint misbehave; ends with `end_fault`."""
        return self.sim.fault(kind, **fields)

    def end_fault(self, fault_id: str | None = None) -> None:
        self.sim.end_fault(fault_id)

    def state(self) -> dict[str, Any]:
        return self.sim.state()


class AwsNotices(ProviderNotices):
    name = "aws"

    def spot_interruption(self, in_: float | str = "2m", action: str = "terminate") -> str:
        """An EC2 spot instance-action `in_` from now (`action`: terminate, stop, hibernate)."""
        return self.sim.raise_notice("spot", action=action, lead=_seconds(in_))

    def rebalance(self) -> str:
        """A rebalance recommendation (a drain)."""
        return self.sim.raise_notice("rebalance")

    def scheduled(self, code: str = "system-reboot", in_: float | str = "1h") -> str:
        """A scheduled event (a drain with NotBefore as deadline); its event id."""
        return self.sim.raise_notice("scheduled", code=code, not_before=_seconds(in_))

    def asg_terminate(self) -> str:
        """The Auto Scaling target lifecycle state `Terminated` (a terminate)."""
        return self.sim.raise_notice("asg", state="Terminated")


class GcpNotices(ProviderNotices):
    name = "gcp"

    def preempt(self) -> str:
        """`instance/preempted` turns TRUE (a terminate)."""
        return self.sim.raise_notice("preempt")

    def maintenance(self, type: str = "TERMINATE") -> str:
        """A host maintenance event: TERMINATE or MIGRATE (a drain)."""
        return self.sim.raise_notice("maintenance", type=type)

    def end_maintenance(self) -> None:
        """The maintenance event is over (back to NONE: a clear)."""
        self.sim.withdraw("maintenance-event")


class AzureNotices(ProviderNotices):
    name = "azure"

    def event(
        self, event_type: str = "Preempt", in_: float | str | None = None, **fields: Any
    ) -> str:
        """A Scheduled Event (Preempt, Terminate, Reboot, Redeploy, Freeze) for this VM,
        starting `in_` from now (default: the minimum notice of that type); its EventId."""
        if in_ is not None:
            fields["not_before_seconds"] = _seconds(in_)
        return self.sim.raise_notice(event_type, **fields)


class KubernetesNotices(ProviderNotices):
    name = "kubernetes"

    def cordon(self) -> str:
        """`kubectl cordon` on this node (a drain)."""
        return self.sim.raise_notice("cordon")

    def uncordon(self) -> None:
        """Undo the cordon (a clear)."""
        self.sim.withdraw("cordon")

    def taint(self, key: str, effect: str = "NoSchedule", value: str | None = None) -> str:
        fields: dict[str, Any] = {"key": key, "effect": effect}
        if value is not None:
            fields["value"] = value
        return self.sim.raise_notice("taint", **fields)

    def shutdown(self) -> str:
        """Graceful node shutdown: Ready=False (a terminate)."""
        return self.sim.raise_notice("shutdown")


@dataclass(frozen=True)
class Mailbox:
    """The private mailbox a DigitalOcean agent watches: one user of a private Dovecot."""

    server: Dovecot
    user: MailUser

    def deliver(self, message: bytes, delivered: datetime | None = None) -> None:
        """File a mail into the inbox (IMAP APPEND), as the mail server would on arrival."""
        self.server.append(self.user, message, delivered=delivered)

    def agent_env(self, root: Path) -> dict[str, str]:
        """The agent's settings for this mailbox: IMAPS on loopback, trusting the server's
        own certificate, with a credentials file only the owner may read."""
        credentials = root / "imap.env"
        credentials.write_text(
            f"FOREWARN_IMAP_USER={self.user.name}\nFOREWARN_IMAP_PASSWORD={self.user.password}\n"
        )
        credentials.chmod(0o600)
        return {
            "FOREWARN_DIGITALOCEAN_IMAP_HOST": "127.0.0.1",
            "FOREWARN_DIGITALOCEAN_IMAP_PORT": str(self.server.imaps_port),
            "FOREWARN_DIGITALOCEAN_IMAP_CA_FILE": str(self.server.cert),
            "FOREWARN_DIGITALOCEAN_CREDENTIALS_FILE": str(credentials),
        }


class DigitalOceanNotices(ProviderNotices):
    """DigitalOcean announces a Spot droplet's reclaim by email only: `reclaim()` files that
    email into the private mailbox the agent watches (a private Dovecot). The simulator
    serves droplet metadata, from which the agent learns which droplet it runs on; its
    faults apply to that metadata."""

    name = "digitalocean"
    SENDER = "DigitalOcean <no-reply@digitalocean.com>"

    def __init__(self, sim: SimControl, mailbox: Mailbox) -> None:
        super().__init__(sim)
        self.mailbox = mailbox

    def droplet(self) -> tuple[str, str]:
        """This droplet's id and name, as the simulator's metadata serves them."""
        droplet = self.sim.state()["droplet"]
        return str(droplet["droplet_id"]), str(droplet["hostname"])

    def reclaim(self, in_: float | str | None = "2h", *, sender: str = SENDER) -> str:
        """The reclaim email for this droplet, naming its deadline `in_` from now (None: no
        time in the text, so the agent takes the mail's Date plus `digitalocean.lead`). The
        agent raises a drain (reason `reclaim`) and escalates it to terminate in time.
        Returns the mail's Message-ID."""
        droplet_id, name = self.droplet()
        now = datetime.now(timezone.utc).replace(microsecond=0)
        when = ""
        if in_ is not None:
            deadline = now + timedelta(seconds=_seconds(in_))
            when = f" at {deadline:%Y-%m-%dT%H:%M:%SZ}"
        message = EmailMessage()
        message["From"] = sender
        message["To"] = f"{self.mailbox.user.name}@localhost"
        message["Subject"] = "Your Spot Droplet will be reclaimed"
        message["Date"] = format_datetime(now)
        message["Message-ID"] = make_msgid(domain="digitalocean.com")
        message.set_content(
            f"Your Spot Droplet {name} (ID {droplet_id}) will be reclaimed{when}.\n"
            "Save your work: the droplet will then be destroyed.\n"
        )
        self.mail(bytes(message))
        return str(message["Message-ID"])

    def mail(self, message: bytes) -> None:
        """File any mail (e.g. one the agent must ignore) into the watched mailbox."""
        self.mailbox.deliver(message)


NODE = "forewarn-test-node"
VM_NAME = "forewarn-test-vm"
TOKEN = "forewarn-test-token"
DROPLET_ID = "515151515"
DROPLET_NAME = "forewarn-test-droplet"


@dataclass(frozen=True)
class Launch:
    """How to run a provider's simulator and point an agent at it."""

    notices: type[ProviderNotices]
    sim_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    # DigitalOcean: a private Dovecot the agent reads its reclaim emails from.
    mailbox: bool = False

    def handle(self, sim: SimControl, mailbox: Mailbox | None) -> ProviderNotices:
        if self.mailbox:
            assert mailbox is not None
            make: Callable[..., ProviderNotices] = self.notices
            return make(sim, mailbox)
        return self.notices(sim)

    def agent_env(self, url: str, root: Path) -> dict[str, str]:
        name = self.notices.name
        env = {f"FOREWARN_{name.upper()}_URL": url, **self.env}
        if name == "gcp":
            # google-auth and Google's own clients read these; the watcher honours them too.
            host = url.removeprefix("http://")
            env.update(GCE_METADATA_HOST=host, GCE_METADATA_IP=host)
        if name == "kubernetes":
            token = root / "kubernetes-token"
            token.write_text(TOKEN + "\n")
            env["FOREWARN_KUBERNETES_TOKEN_FILE"] = str(token)
        return env


LAUNCH: dict[str, Launch] = {
    "aws": Launch(
        AwsNotices,
        env={"FOREWARN_AWS_SCHEDULED_INTERVAL": "0.5", "FOREWARN_AWS_ASG_INTERVAL": "0.5"},
    ),
    "gcp": Launch(GcpNotices),
    "azure": Launch(
        AzureNotices,
        ("--vm-name", VM_NAME),
        {"FOREWARN_AZURE_VM_NAME": VM_NAME, "FOREWARN_AZURE_INTERVAL": "0.25"},
    ),
    "digitalocean": Launch(
        DigitalOceanNotices,
        ("--droplet-id", DROPLET_ID, "--hostname", DROPLET_NAME),
        {"FOREWARN_DIGITALOCEAN_RETRY_MAX": "1"},
        mailbox=True,
    ),
    "kubernetes": Launch(
        KubernetesNotices,
        ("--node", NODE, "--token", TOKEN),
        {"FOREWARN_KUBERNETES_NODE_NAME": NODE},
    ),
}

__all__ = [
    "LAUNCH",
    "AwsNotices",
    "AzureNotices",
    "DigitalOceanNotices",
    "GcpNotices",
    "KubernetesNotices",
    "Launch",
    "Mailbox",
    "ProviderNotices",
]
