"""The digitalocean notice contract: `watch`, `simulate` and `drill`.

DigitalOcean announces a Spot droplet's reclaim by email only; the watcher reads that mailbox
over IMAP and uses droplet metadata to detect the platform and learn the droplet's id and
name. Only `settings` is imported here: the agent imports the other modules by name.
"""

from .settings import Settings

__all__ = ["Settings"]
