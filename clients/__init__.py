"""What runs inside the training process: the notice subscriber and the checkpoint guard.

Importing this package loads neither httpx, pydantic, the cloud SDKs nor the agent runtime.
"""

from .event import Event
from .guard import CheckpointGuard, SaveResult
from .notices import Notices
from .workers import worker_init_fn

__all__ = ["CheckpointGuard", "Event", "Notices", "SaveResult", "worker_init_fn"]
