"""Verified checkpoint generations on local disk and S3-compatible storage.

    store = CheckpointStore("s3://bucket/run-7", keep=3)
    with store.save(step, metadata={"loss": 0.12}) as gen:
        gen.write_bytes("model.pt", data)
    resumed = store.latest()          # the newest generation that verifies, or None

Only the standard library is imported here: boto3 loads with the first S3 request and torch
with the first torch helper call.
"""

from .backend import Backend, ObjectWriter, UnfinishedUpload
from .background import BackgroundSaveError, BackgroundSaver, FinalSave, SaveTiming, load_state
from .batch import BatchProgress
from .dcp import DcpAsyncSave, async_save_dcp, load_dcp, save_dcp
from .errors import (
    CheckpointError,
    CommitError,
    CommitTimeout,
    CorruptGenerationError,
    ExtraMissingError,
    GenerationExistsError,
    GenerationNotFoundError,
    GenerationRemovedError,
    InvalidNameError,
    RankError,
    StorageError,
    StoreConfigError,
    StoreNotFoundError,
    WriteCancelled,
)
from .generation import FlushResult, Generation, GenerationWriter, Verification
from .manifest import FileEntry, Manifest
from .options import S3Options
from .store import CheckpointStore
from .training import TrainingState, load_training_state, save_training_state

__all__ = [
    "Backend",
    "BackgroundSaveError",
    "BackgroundSaver",
    "BatchProgress",
    "CheckpointError",
    "CheckpointStore",
    "CommitError",
    "CommitTimeout",
    "CorruptGenerationError",
    "DcpAsyncSave",
    "ExtraMissingError",
    "FileEntry",
    "FinalSave",
    "FlushResult",
    "Generation",
    "GenerationExistsError",
    "GenerationNotFoundError",
    "GenerationRemovedError",
    "GenerationWriter",
    "InvalidNameError",
    "Manifest",
    "ObjectWriter",
    "RankError",
    "S3Options",
    "SaveTiming",
    "StorageError",
    "StoreConfigError",
    "StoreNotFoundError",
    "TrainingState",
    "UnfinishedUpload",
    "Verification",
    "WriteCancelled",
    "async_save_dcp",
    "load_dcp",
    "load_state",
    "load_training_state",
    "save_dcp",
    "save_training_state",
]
