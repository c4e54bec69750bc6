"""forewarn.testing: test the code that acts on notices against a real agent.

Standard library and pyzmq only; importing it does not need pytest. The pytest plugin
(`forewarn.testing.plugin`, registered through the `pytest11` entry point) builds fixtures on
the same objects.

>>> from forewarn.testing import start_agent
>>> with start_agent("aws") as agent:            # doctest: +SKIP
...     agent.aws.spot_interruption(in_="2m")
...     agent.wait_for_event(action="terminate")
"""

from .agent import PROVIDERS, AgentDied, RunningAgent, start_agent
from .dovecot import Dovecot, DovecotFailed, DovecotNotInstalled, MailUser, dovecot_binary
from .providers import (
    AwsNotices,
    AzureNotices,
    DigitalOceanNotices,
    GcpNotices,
    KubernetesNotices,
    Mailbox,
    ProviderNotices,
)
from .simcontrol import SimControl, SimControlError, SimulatorProcess
from .waiting import eventually, free_port

__all__ = [
    "PROVIDERS",
    "AgentDied",
    "AwsNotices",
    "AzureNotices",
    "DigitalOceanNotices",
    "Dovecot",
    "DovecotFailed",
    "DovecotNotInstalled",
    "GcpNotices",
    "KubernetesNotices",
    "MailUser",
    "Mailbox",
    "ProviderNotices",
    "RunningAgent",
    "SimControl",
    "SimControlError",
    "SimulatorProcess",
    "dovecot_binary",
    "eventually",
    "free_port",
    "start_agent",
]
