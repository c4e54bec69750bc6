"""Fixtures of the client tests: the C subscriber, built once for every file that runs it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

C_SOURCE = Path(__file__).resolve().parents[2] / "clients" / "c"


@pytest.fixture(scope="session")
def c_subscriber_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """clients/c/forewarn_sub built with its Makefile (skipped without libzmq's headers or a C
    compiler, except in CI, which installs them)."""
    if not Path("/usr/include/zmq.h").exists() or shutil.which("cc") is None:
        if os.environ.get("CI"):
            pytest.fail("libzmq headers or a C compiler missing in CI (.ci/setup.d/10-libzmq.sh)")
        pytest.skip("libzmq headers (libzmq3-dev) or a C compiler are not installed")
    build = tmp_path_factory.mktemp("c")
    for name in ("forewarn_sub.c", "Makefile"):
        shutil.copy(C_SOURCE / name, build / name)
    done = subprocess.run(["make", "-C", str(build)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return build / "forewarn_sub"
