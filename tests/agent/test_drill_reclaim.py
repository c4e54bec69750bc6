"""The realistic reclaim drill, reduced matrix (`--scenario ci`): torchrun with two gloo ranks,
DataLoader workers and an evaluation pass, reclaimed as systemd, Kubernetes, a cloud and
torchrun itself do it, and once with torchrun restarting the ranks, with the notice
mid-evaluation, during the first step and mid-step, plus a cloud reclaim whose lead is shorter
than the flush."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from support import forewarn_cmd, requires

pytestmark = requires("torch")


@pytest.mark.slow(56)
@pytest.mark.timeout(900)
def test_ci_matrix_loses_no_step_where_the_lead_allows_and_says_why_elsewhere(
    tmp_path: Path, env: dict[str, str]
) -> None:
    done = subprocess.run(
        forewarn_cmd("drill", "local", "--scenario", "ci", "--seed", "7", "--dir", str(tmp_path)),
        env=env,
        capture_output=True,
        text=True,
        timeout=880,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    assert "steps lost where the lead covered detection and the flush: 0" in out
    assert "cells failed: 0 of 6" in out
    table = [
        (match.group(1), match.group(0))
        for match in re.finditer(r"^(\S+/\S+)\s+\S+s .*$", out, flags=re.MULTILINE)
    ]
    rows = dict(table)
    for label in (
        "systemd/mid-eval",
        "kubernetes/first-step",
        "torchrun/mid-eval",
        "torchrun-restart/mid-eval",
    ):
        assert label in rows and rows[label].rstrip().endswith("ok"), rows
        assert "identical" in rows[label]
    # The restarted cell's loss is measured at torchrun's restart, within the cell.
    assert re.search(
        r"restarted: torchrun restarted the ranks, resumed from step \d+ [\d.]+s after", out
    ), out
    full = [row for label, row in table if label == "cloud/mid-step"]
    assert len(full) == 2, rows
    long_lead, short_lead = full if " 8s " in full[0] else full[::-1]
    assert long_lead.rstrip().endswith("ok") and "identical" in long_lead
    # The short lead: the SIGKILL lands mid-flush; the loss is reported with its cause, the
    # partial generation is left unused and the resume takes the last complete one.
    assert "steps lost: lead 0.3s < detection " in short_lead, short_lead
    assert "resumed from the last complete generation" in short_lead
    assert "identical" in short_lead
    # The number lost is what `forewarn plan`'s model predicts for the cell's measured lead,
    # detection and flush: the notice is not usable, the steps since the last completed
    # checkpoint are lost (the drill fails a cell where the two differ).
    lost = int(short_lead.split()[4])
    predicted = re.search(
        r"as `forewarn plan` predicts: (\d+) steps lost: notice lead 0.3 s", short_lead
    )
    assert predicted is not None and int(predicted.group(1)) == lost, short_lead
    assert "forewarn plan --checkpoint " in short_lead and "--notice-lead 0.3s" in short_lead
    # Every resume was checked (the restarted cell's at torchrun's restart, the machine after
    # it only for taking the newest generation), and no process of any job outlived its
    # machine.
    assert out.count("state identical") == 6, out
    assert "left behind" not in out
