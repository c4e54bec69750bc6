"""A faithful fake of the droplet metadata service, on loopback.

It serves what `forewarn` reads (`/metadata/v1/id`, `/metadata/v1/hostname`) and the rest of
the documented index as plain text, `/metadata/v1.json` as one JSON document, a 301 to the
slash form for an index asked without its trailing slash, and 404 for anything unknown.

Droplet metadata carries no reclaim notice: DigitalOcean announces a Spot droplet's reclaim
by email. The control API therefore raises no notices here (`POST /_sim/notices` answers
400 saying so); a reclaim is exercised through a mailbox (`forewarn drill digitalocean`).
The shared faults (`POST /_sim/faults`) apply to the metadata answers, which the watcher
reads once at start to learn the droplet's id; the mailbox is a real IMAP server, not this
simulator, so faults of the mail path are the IMAP server's to produce.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from forewarn.protocol.wholenumber import whole_number

from ..sim_cli import SimulatorCommand
from ..simulator import SimError, SimRequest, SimResponse, Simulator

PREFIX = "/metadata/v1"


class DropletMetadataSimulator(Simulator):
    name = "digitalocean"

    def __init__(
        self,
        droplet_id: int = 424242424,
        hostname: str = "gpu-spot-1",
        region: str = "nyc2",
        tags: tuple[str, ...] = ("spot", "gpu"),
    ) -> None:
        super().__init__()
        self.droplet: dict[str, Any] = {
            "droplet_id": droplet_id,
            "hostname": hostname,
            "vendor_data": "",
            "public_keys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIForewarnSimulatorKey sim"],
            "auth_key": "",
            "region": region,
            "interfaces": {
                "public": [
                    {
                        "ipv4": {
                            "ip_address": "192.0.2.10",
                            "netmask": "255.255.255.0",
                            "gateway": "192.0.2.1",
                        },
                        "mac": "aa:bb:cc:dd:ee:ff",
                        "type": "public",
                    }
                ]
            },
            "floating_ip": {"ipv4": {"active": False}},
            "reserved_ip": {"ipv4": {"active": False}},
            "dns": {"nameservers": ["67.207.67.2", "67.207.67.3"]},
            "tags": list(tags),
            "features": {"dhcp_enabled": False},
        }

    def _tree(self) -> dict[str, Any]:
        """The metadata paths under /metadata/v1/: a dict is an index, a str a leaf."""
        d = self.droplet
        public = d["interfaces"]["public"][0]
        return {
            "id": str(d["droplet_id"]),
            "hostname": d["hostname"],
            "user-data": "",
            "vendor-data": d["vendor_data"],
            "public-keys": "\n".join(d["public_keys"]),
            "region": d["region"],
            "interfaces": {
                "public": {
                    "0": {
                        "mac": public["mac"],
                        "type": public["type"],
                        "ipv4": {key: value for key, value in public["ipv4"].items()},
                    }
                }
            },
            "dns": {"nameservers": "\n".join(d["dns"]["nameservers"])},
            "floating_ip": {"ipv4": {"active": "false"}},
            "reserved_ip": {"ipv4": {"active": "false"}},
            # An index whose entries are the tag names.
            "tags": {tag: tag for tag in d["tags"]},
            "features": {"dhcp_enabled": "false"},
        }

    def handle(self, request: SimRequest) -> SimResponse:
        if request.method not in ("GET", "HEAD"):
            return SimResponse(405, "method not allowed\n", headers={"Allow": "GET, HEAD"})
        path = request.path
        with self.lock:
            if path == PREFIX + ".json":
                return SimResponse.json(self.droplet)
            if path != PREFIX and not path.startswith(PREFIX + "/"):
                return _not_found()
            node: dict[str, Any] | str = self._tree()
            rest = path[len(PREFIX) :]
            parts = [part for part in rest.split("/") if part]
            for part in parts:
                if not isinstance(node, dict) or part not in node:
                    return _not_found()
                node = node[part]
        if isinstance(node, dict):
            if not path.endswith("/"):
                return SimResponse(301, "", headers={"Location": path + "/"})
            index = "".join(
                key + ("/" if isinstance(value, dict) else "") + "\n" for key, value in node.items()
            )
            return SimResponse(200, index)
        if path.endswith("/"):
            return _not_found()
        return SimResponse(200, node)

    def raise_notice(self, kind: str, fields: dict[str, Any]) -> str:
        raise SimError(
            f"no notice kind {kind!r} here: droplet metadata has no reclaim notice; "
            "DigitalOcean announces a reclaim by email (see `forewarn drill digitalocean`)"
        )

    def state(self) -> dict[str, Any]:
        return {"droplet": json.loads(json.dumps(self.droplet)), "notices": []}


def _not_found() -> SimResponse:
    return SimResponse(404, "404 page not found\n")


def make_simulator(**options: Any) -> DropletMetadataSimulator:
    return DropletMetadataSimulator(**options)


# argparse's `int` said "invalid int value", and took -5: a droplet id no droplet has.
_droplet_id = whole_number(minimum=1, below="a droplet id is {minimum} or more, got {value}")


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--droplet-id",
        type=_droplet_id,
        default=424242424,
        help="the droplet id served (default %(default)s)",
    )
    parser.add_argument(
        "--hostname", default="gpu-spot-1", help="the droplet name served (default %(default)s)"
    )
    parser.add_argument("--region", default="nyc2", help="the region served (default %(default)s)")


COMMAND = SimulatorCommand(
    name="digitalocean",
    build=make_simulator,
    passes=("droplet_id", "hostname", "region"),
    options=_options,
    hints=lambda sim, url, args: [f"point the agent at it: FOREWARN_DIGITALOCEAN_URL={url}"],
    raises_notices=False,  # droplet metadata has no reclaim notice: that is an email
)
# `forewarn simulate --help`'s line: the reclaim mail itself goes to a real IMAP server.
HELP = (
    "a faithful simulator of DigitalOcean droplet metadata (the reclaim mail: a real IMAP server)"
)
add_arguments = COMMAND.add_arguments
run = COMMAND.run


def drill_script() -> None:
    """`forewarn drill local --provider digitalocean` is not supported: droplet metadata has no
    reclaim notice to raise through a simulator. `forewarn drill digitalocean` drills the real
    path, a mail in the watched mailbox."""
    return None


__all__ = ["DropletMetadataSimulator", "add_arguments", "drill_script", "make_simulator", "run"]
