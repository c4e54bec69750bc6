"""The checked-in JSON Schema is what the protocol module says, and it validates real messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from forewarn.agent.protocol import schema_text

SCHEMA = Path(__file__).resolve().parent.parent / "clients" / "schema" / "protocol-v1.json"


def test_checked_in_schema_matches_the_protocol() -> None:
    assert SCHEMA.read_text() == schema_text(), (
        "clients/schema/protocol-v1.json is stale: run "
        "`forewarn schema > clients/schema/protocol-v1.json`"
    )


def test_forewarn_schema_prints_it() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "forewarn.agent.cli", "schema"], capture_output=True, text=True
    )
    assert out.returncode == 0 and json.loads(out.stdout) == json.loads(SCHEMA.read_text())


def test_the_design_example_fits_the_notice_schema() -> None:
    from forewarn.agent.protocol import Notice

    example = {
        "v": 1,
        "id": "aws/spot-itn/1f3c9a",
        "seq": 17,
        "action": "terminate",
        "reason": "spot-interruption",
        "provider": "aws",
        "deadline": "2026-11-30T03:12:00Z",
        "noticed_at": "2026-11-30T03:10:00.120Z",
        "sent_at": "2026-11-30T03:10:00.121Z",
        "detail": {"action": "terminate", "time": "2026-11-30T03:12:00Z"},
    }
    notice = Notice.model_validate(example)
    assert json.loads(notice.model_dump_json()) == example
