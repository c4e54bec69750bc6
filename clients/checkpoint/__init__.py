"""Verified checkpoint generations on local disk and S3-compatible storage.

    store = CheckpointStore("s3://bucket/run-7", keep=3)
    with store.save(step, metadata={"loss": 0.12}) as gen:
        gen.write_bytes("model.pt", data)
    resumed = store.latest()          # the newest generation that verifies, or None

Only the standard library is imported here: boto3 loads with the first S3 request and torch
with the first torch helper call.
"""

from .batch import BatchProgress
from .errors import (
    CheckpointError,
    CommitError,
    CommitTimeout,
    CorruptGenerationError,
    GenerationExistsError,
    GenerationNotFoundError,
    InvalidNameError,
    StoreConfigError,
)
from .manifest import FileEntry, Manifest
from .store import (
    CheckpointStore,
    FlushResult,
    Generation,
    GenerationWriter,
    Verification,
)
from .training import TrainingState, load_training_state, save_training_state

__all__ = [
    "BatchProgress",
    "CheckpointError",
    "CheckpointStore",
    "CommitError",
    "CommitTimeout",
    "CorruptGenerationError",
    "FileEntry",
    "FlushResult",
    "Generation",
    "GenerationExistsError",
    "GenerationNotFoundError",
    "GenerationWriter",
    "InvalidNameError",
    "Manifest",
    "StoreConfigError",
    "TrainingState",
    "Verification",
    "load_training_state",
    "save_training_state",
]
