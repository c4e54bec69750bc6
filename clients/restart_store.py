"""Whether torchrun's shared rendezvous store will stand in the way of this job's restart.

torch 2.13's torchrun (c10d rendezvous, as its static one) shares its rendezvous TCPStore with
the ranks (`TORCHELASTIC_USE_AGENT_STORE=True` in their environment) and keeps it across a
`--max-restarts` restart with nothing that tells one attempt's keys from the next: restarted
gloo ranks read the first attempt's addresses, of ranks that exited, and fail in
`Gloo connectFullMesh ... Connection refused` (or hang in `init_process_group`); the restart is
lost, forewarn or not. `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`, read by the c10d rendezvous
alone, turns the sharing off. The ranks can tell at start; the failure shows only at the
restart, after a reclaim's save, which is too late to fix the command line.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

SHARING_OFF = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
# Backends whose process group builds its mesh from addresses in the rendezvous store
# (`cpu:gloo,cuda:nccl` names both).
MESH_BACKENDS = frozenset({"gloo", "nccl"})


def _whole(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _uses_mesh(backend: str) -> bool:
    return any(part.split(":")[-1].strip() in MESH_BACKENDS for part in backend.split(","))


def restart_store_warning(env: Mapping[str, str], backend: str | None) -> str | None:
    """The warning rank 0 logs for a job torchrun may restart (TORCHELASTIC_MAX_RESTARTS > 0)
    with 2+ ranks on gloo or NCCL and the shared store on; None otherwise (other ranks, no
    process group: `backend` None)."""
    restarts = _whole(env.get("TORCHELASTIC_MAX_RESTARTS"))
    world = _whole(env.get("WORLD_SIZE"))
    if restarts is None or restarts < 1 or world is None or world < 2:
        return None
    if env.get("RANK", "").strip() != "0" or backend is None or not _uses_mesh(backend):
        return None
    # torch's own tests: the sharing is on unless the variable is exactly "1".
    if env.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or env.get(SHARING_OFF) == "1":
        return None
    return (
        f"torchrun shares its rendezvous store with the ranks (TORCHELASTIC_USE_AGENT_STORE="
        f"True) and torch 2.13 keeps it across a restart: with --max-restarts {restarts} and "
        f"{world} {backend} ranks, the restart may fail (`Gloo connectFullMesh failed ... "
        f"Connection refused`, or a hang in init_process_group) and be lost; set "
        f"{SHARING_OFF}=1 and use the c10d rendezvous (--rdzv-backend c10d --rdzv-endpoint "
        "HOST:PORT, or --standalone): the static one (--master-addr/--master-port) ignores the "
        "variable"
    )


class RestartStoreCheck:
    """Logs the warning once in this process, as soon as its process group is up (the guard
    is often made before `init_process_group`, when no backend is known yet). Each restart
    attempt is a new process and says it again: the log of the attempt that fails has it."""

    def __init__(self, log: logging.Logger, env: Mapping[str, str] | None = None) -> None:
        self._log = log
        self._env = os.environ if env is None else env
        # The environment alone rules most jobs out (no restarts, one rank, other ranks):
        # those never look for the process group.
        self.pending = restart_store_warning(self._env, "gloo") is not None

    def check(self) -> None:
        """Cheap once said or ruled out: called from the guard's ticker."""
        if not self.pending:
            return
        from .checkpoint.ranks import initialised_dist

        dist = initialised_dist()
        if dist is None:
            return
        self.pending = False
        try:
            backend = str(dist.get_backend())
        except (RuntimeError, ValueError):  # destroyed meanwhile
            return
        warning = restart_store_warning(self._env, backend)
        if warning is not None:
            self._log.warning(warning)


__all__ = ["MESH_BACKENDS", "SHARING_OFF", "RestartStoreCheck", "restart_store_warning"]
