"""One call to save, and one to restore, a training loop's whole state with torch.

torch (and numpy, when installed) are imported on the first call, never at package import.
Everything saved is tensors and plain Python values, so loading works with torch.load's
`weights_only=True` (the default here) unless a sampler's own state holds other objects.
"""

from __future__ import annotations

import io
import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import IO, Any, cast

from .errors import CheckpointError
from .generation import Generation, GenerationWriter, to_load
from .manifest import FileEntry
from .needs import needs

FORMAT = 1


def state_file_name(rank: int, world_size: int) -> str:
    """One file per rank: every rank has its own RNG streams and sampler position."""
    return "training_state.pt" if world_size == 1 else f"training_state.rank{rank:05d}.pt"


@dataclass
class TrainingState:
    """What `load_training_state` restored; `extra` is whatever was passed to save."""

    step: int
    generation: Generation
    extra: dict[str, Any] = field(default_factory=dict)
    restored: tuple[str, ...] = ()


def save_training_state(
    gen: GenerationWriter,
    *,
    model: Any = None,
    optimizer: Any = None,
    scheduler: Any = None,
    step: int | None = None,
    sampler: Any = None,
    extra: dict[str, Any] | None = None,
    rng: bool = True,
    name: str | None = None,
) -> FileEntry:
    """Write model, optimizer, scheduler, step, sampler and RNG states into `gen` (streamed)."""
    needs("torch", "save_training_state")
    import torch

    state = {
        "format": FORMAT,
        "step": gen.step if step is None else int(step),
        # The bare model's keys: a wrapper's (`_orig_mod.` from torch.compile, `module.` from
        # DDP) would not load into the model a restart builds, restores and then wraps.
        "model": None if model is None else _bare_model(model).state_dict(),
        "optimizer": None if optimizer is None else optimizer.state_dict(),
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "sampler": None if sampler is None else _sampler_state(sampler),
        "rng": capture_rng() if rng else None,
        "extra": dict(extra or {}),
    }
    file_name = name or state_file_name(gen.rank, gen.world_size)
    with gen.open(file_name) as stream:
        torch.save(state, cast(IO[bytes], stream))
    return gen.files[file_name]


def load_training_state(
    generation: Generation,
    *,
    model: Any = None,
    optimizer: Any = None,
    scheduler: Any = None,
    sampler: Any = None,
    restore_rng: bool = True,
    map_location: Any = "cpu",
    strict: bool = True,
    weights_only: bool = True,
    rank: int | None = None,
    name: str | None = None,
) -> TrainingState:
    """Load what `save_training_state` wrote into the objects given, and the RNG states."""
    needs("torch", "load_training_state")
    import torch

    generation = to_load(generation, "load_training_state")
    if name is None:
        if rank is None:
            from .ranks import resolve

            # This job's own rank: resolving against the generation's world size took a
            # job of another size for a bad configuration ("rank 3 is not within world size 2").
            rank = resolve(None, None).rank if generation.world_size > 1 else 0
        if generation.world_size > 1 and not 0 <= rank < generation.world_size:
            raise CheckpointError(
                f"{generation.name} was saved by {generation.world_size} ranks and holds no "
                f"training state for rank {rank}: resume on {generation.world_size} ranks, or "
                "pass rank= to load another rank's state"
            )
        name = state_file_name(rank, generation.world_size)
    local = generation.backend.local_path(f"{generation.name}/{name}")
    if local is not None and name in generation.files:
        # torch.load reads a flipped byte in tensor data without complaint, and latest()
        # checks only sizes by default: the bytes are checked here, as read_bytes does on S3.
        generation.verify_file(name)
        source: Any = local
    else:
        source = io.BytesIO(generation.read_bytes(name))
    state = torch.load(source, map_location=map_location, weights_only=weights_only)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{generation.name}/{name} is not a forewarn training state")
    restored: list[str] = []
    for label, target in (("model", model), ("optimizer", optimizer), ("scheduler", scheduler)):
        if target is None:
            continue
        if state.get(label) is None:
            raise ValueError(f"{generation.name}/{name} holds no {label} state")
        if label == "model":
            bare = _bare_model(target)
            bare.load_state_dict(_bare_keys(state[label], bare), strict=strict)
        else:
            target.load_state_dict(state[label])
        restored.append(label)
    if sampler is not None:
        if state.get("sampler") is None:
            raise ValueError(f"{generation.name}/{name} holds no sampler state")
        _restore_sampler(sampler, state["sampler"])
        restored.append("sampler")
    if restore_rng and state.get("rng") is not None:
        restore_rng_state(state["rng"])
        restored.append("rng")
    return TrainingState(
        step=int(state["step"]),
        generation=generation,
        extra=dict(state.get("extra") or {}),
        restored=tuple(restored),
    )


# What wraps a model without changing its parameters, and the key prefix each adds.
_WRAPPER_PREFIXES = ("_orig_mod.", "module.")


def _bare_model(model: Any) -> Any:
    """The model inside torch.compile's `OptimizedModule` and DDP's or DataParallel's wrapper
    (nested either way round); any other object as it is."""
    import torch

    wrappers = (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)
    while True:
        if type(model).__name__ == "OptimizedModule" and hasattr(model, "_orig_mod"):
            model = model._orig_mod
        elif isinstance(model, wrappers):
            model = model.module
        else:
            return model


def _bare_keys(saved: Any, model: Any) -> Any:
    """A model state saved from a wrapper by an earlier version (keys `_orig_mod.0.weight`),
    with the wrappers' prefixes taken off when that makes its keys the model's."""
    if not isinstance(saved, dict) or not hasattr(model, "state_dict"):
        return saved
    wanted = set(model.state_dict())
    if set(saved) == wanted:
        return saved
    stripped: Any = OrderedDict((_unprefixed(key), value) for key, value in saved.items())
    metadata = getattr(saved, "_metadata", None)
    if isinstance(metadata, dict):
        # Each submodule's state version (BatchNorm's, say), under the same keys, unprefixed.
        stripped._metadata = OrderedDict(
            (_unprefixed(key + ".").rstrip(".") if key else key, value)
            for key, value in metadata.items()
        )
    return stripped if set(stripped) == wanted else saved


def _unprefixed(key: Any) -> Any:
    while isinstance(key, str) and key.startswith(_WRAPPER_PREFIXES):
        key = key.split(".", 1)[1]
    return key


def capture_rng() -> dict[str, Any]:
    """Python's, NumPy's (if installed), torch's and every CUDA device's RNG state."""
    needs("torch", "capture_rng")
    import torch

    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "python": {"version": version, "state": list(internal), "gauss": gauss},
        "torch": torch.get_rng_state(),
    }
    numpy = _numpy()
    if numpy is not None:
        kind, keys, pos, has_gauss, cached = numpy.random.get_state()
        state["numpy"] = {
            "kind": str(kind),
            "keys": [int(key) for key in keys],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    needs("torch", "restore_rng_state")
    import torch

    python = state.get("python")
    if python is not None:
        random.setstate((python["version"], tuple(python["state"]), python["gauss"]))
    if state.get("torch") is not None:
        torch.set_rng_state(state["torch"])
    numpy = _numpy()
    saved = state.get("numpy")
    if numpy is not None and saved is not None:
        numpy.random.set_state(
            (
                saved["kind"],
                numpy.array(saved["keys"], dtype=numpy.uint32),
                saved["pos"],
                saved["has_gauss"],
                saved["cached_gaussian"],
            )
        )
    if state.get("cuda") is not None and torch.cuda.is_available():
        devices = torch.cuda.device_count()
        saved_cuda = list(state["cuda"])
        if len(saved_cuda) == devices:
            torch.cuda.set_rng_state_all(saved_cuda)
        else:
            # A resume on a machine with another device count: restore what lines up.
            for index, rng_state in enumerate(saved_cuda[:devices]):
                torch.cuda.set_rng_state(rng_state, index)


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy


_SAMPLER_FIELDS = ("epoch", "seed", "start_index")


def _sampler_state(sampler: Any) -> dict[str, Any]:
    if callable(getattr(sampler, "state_dict", None)):
        return {"kind": "state_dict", "state": sampler.state_dict()}
    fields = {key: getattr(sampler, key) for key in _SAMPLER_FIELDS if hasattr(sampler, key)}
    if not fields:
        raise TypeError(
            f"sampler {type(sampler).__name__} has no state_dict() and none of the attributes "
            f"{', '.join(_SAMPLER_FIELDS)}: pass its position in `extra` instead"
        )
    return {"kind": "attributes", "state": fields}


def _restore_sampler(sampler: Any, saved: dict[str, Any]) -> None:
    if saved.get("kind") == "state_dict":
        sampler.load_state_dict(saved["state"])
        return
    for key, value in saved.get("state", {}).items():
        if key == "epoch" and callable(getattr(sampler, "set_epoch", None)):
            sampler.set_epoch(value)
        else:
            setattr(sampler, key, value)
