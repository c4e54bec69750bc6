"""The guard's warning about torch 2.13's shared rendezvous store under `--max-restarts`.

torchrun (c10d or static rendezvous) shares its TCPStore with the ranks and keeps it across a
restart: 2+ gloo ranks restarted read the first attempt's addresses and fail in
`Gloo connectFullMesh` (README, on restarts). The ranks' environment shows it at start:
TORCHELASTIC_MAX_RESTARTS > 0, WORLD_SIZE > 1, TORCHELASTIC_USE_AGENT_STORE=True and no
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1; rank 0 says it once, before the restart it would lose.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from forewarn.clients.restart_store import SHARING_OFF, restart_store_warning
from hypothesis import given
from hypothesis import strategies as st
from support import requires

RISKY = {
    "TORCHELASTIC_MAX_RESTARTS": "1",
    "WORLD_SIZE": "2",
    "RANK": "0",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
}

# What torchrun writes, and what a hand-set environment may hold instead.
NUMBERS = st.sampled_from(["0", "1", "3", "-1", "", "x", " 2", "1.5"])
FLAGS = st.sampled_from(["True", "False", "true", "1", ""])
SHARING = st.sampled_from(["1", "0", "", "true", " 1"])
BACKENDS = st.sampled_from(["gloo", "nccl", "cpu:gloo,cuda:nccl", "mpi", "ucc", None])


def _whole(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "TORCHELASTIC_MAX_RESTARTS",
                "WORLD_SIZE",
                "RANK",
                "TORCHELASTIC_USE_AGENT_STORE",
                SHARING_OFF,
            ]
        ),
        st.one_of(NUMBERS, FLAGS, SHARING),
    ),
    BACKENDS,
)
def test_the_warning_comes_exactly_where_a_restart_would_meet_the_shared_store(
    env: dict[str, str], backend: str | None
) -> None:
    restarts = _whole(env.get("TORCHELASTIC_MAX_RESTARTS"))
    world = _whole(env.get("WORLD_SIZE"))
    expected = (
        restarts is not None
        and restarts > 0
        and world is not None
        and world > 1
        and env.get("RANK", "").strip() == "0"
        and env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        # torch turns the sharing off for "1" alone (`getenv(...) == "1"`)
        and env.get(SHARING_OFF) != "1"
        and backend is not None
        and bool({"gloo", "nccl"} & {part.split(":")[-1] for part in backend.split(",")})
    )
    warning = restart_store_warning(env, backend)
    assert (warning is not None) == expected, (env, backend, warning)
    if warning is not None:
        # Names the variable and the rendezvous flags; says "may", not "will".
        assert f"{SHARING_OFF}=1" in warning and "--rdzv-backend c10d" in warning
        assert "may fail" in warning and backend in warning


def test_only_rank_0_says_it_and_the_variable_or_no_restart_silences_it() -> None:
    assert restart_store_warning(RISKY, "gloo") is not None
    assert restart_store_warning(dict(RISKY, RANK="1"), "gloo") is None
    assert restart_store_warning(dict(RISKY, **{SHARING_OFF: "1"}), "gloo") is None
    assert restart_store_warning(dict(RISKY, TORCHELASTIC_MAX_RESTARTS="0"), "gloo") is None
    assert restart_store_warning(dict(RISKY, WORLD_SIZE="1"), "nccl") is None
    assert restart_store_warning(RISKY, None) is None  # no process group: no gloo mesh


RANK_SCRIPT = """
import logging, os, sys, time
import torch.distributed as dist
from forewarn.clients import CheckpointGuard

logging.basicConfig(
    stream=sys.stderr, level=logging.WARNING, format=f"rank {os.environ['RANK']}: %(message)s"
)
guard = CheckpointGuard(notices=False, flag_file=None, handle_signals=False)
dist.init_process_group("gloo")
# Made before the process group: the guard's ticker finds it while the ranks wait here, until
# its check has looked (rank 1's was ruled out by the environment alone).
looked_by = time.monotonic() + 60
while guard._restart_store.pending and time.monotonic() < looked_by:
    time.sleep(0.01)
dist.barrier()
guard.close()
dist.destroy_process_group()
"""


@requires("torch")
@pytest.mark.slow(20)
@pytest.mark.timeout(300)
def test_torchrun_with_max_restarts_and_the_shared_store_warns_once_on_rank_0(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The guard made before `init_process_group` (the backend not known yet): its ticker
    finds the group and rank 0 warns, once; rank 1 says nothing. torchrun's static rendezvous
    with `--max-restarts 1`, as a user writes it; the job ends before it needs the restart."""
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    run_env = dict(env, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    run_env.pop(SHARING_OFF, None)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            *("--nnodes", "1", "--nproc-per-node", "2", "--max-restarts", "1"),
            *("--master-addr", "127.0.0.1", "--master-port", str(port)),
            str(script),
        ],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if SHARING_OFF in line]
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("rank 0: ") and "may fail" in lines[0], lines
