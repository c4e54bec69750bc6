"""What one telemetry line costs the agent, beside a file kept open and `json.dumps` alone.

The writer opens, appends with one write(2) and closes per line (so lines are never torn and
an external rotation is picked up). It runs on the agent's event loop on each notice and
ack, so it must stay in the tens of microseconds. Goal: median under 100 µs, p99 under 1 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from common import median, percentile, table


def timed(action, count: int) -> list[float]:  # type: ignore[no-untyped-def]
    samples = []
    for index in range(count):
        started = time.perf_counter()
        action(index)
        samples.append((time.perf_counter() - started) * 1e6)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=20_000)
    args = parser.parse_args(argv)
    from forewarn.agent.telemetry import TelemetryWriter
    from forewarn.protocol.timefmt import format_time, utcnow

    fields = {
        "notice_id": "aws/spot-itn/1f3c9a",
        "client": "vm/19969/337a60",
        "step": 1200,
        "flush_seconds": 9.87,
        "outcome": "saved",
    }
    with tempfile.TemporaryDirectory(prefix="forewarn-bench-") as work:
        base = Path(work)
        writer = TelemetryWriter(base / "telemetry.jsonl", max_bytes=1 << 30)
        rotating = TelemetryWriter(base / "rotating.jsonl", max_bytes=64 * 1024)
        kept = (base / "kept.jsonl").open("a")

        def dumps_only(_: int) -> None:
            record = {"v": 1, "at": format_time(utcnow()), "kind": "ack", **fields}
            (json.dumps(record, separators=(",", ":")) + "\n").encode()

        def kept_open(_: int) -> None:
            record = {"v": 1, "at": format_time(utcnow()), "kind": "ack", **fields}
            kept.write(json.dumps(record, separators=(",", ":")) + "\n")
            kept.flush()

        results = {
            "json.dumps only (baseline)": timed(dumps_only, args.lines),
            "file kept open, write + flush (baseline)": timed(kept_open, args.lines),
            "TelemetryWriter.write": timed(lambda _: writer.write("ack", fields), args.lines),
            "TelemetryWriter.write, rotating at 64 KiB": timed(
                lambda _: rotating.write("ack", fields), args.lines
            ),
        }
        kept.close()
        rotations = sum(1 for path in base.iterdir() if path.name.startswith("rotating"))
        size = os.path.getsize(base / "telemetry.jsonl") / args.lines
    reference = median(results["TelemetryWriter.write"])
    rows = [
        [
            name,
            f"{median(samples):.1f}",
            f"{percentile(samples, 99):.1f}",
            f"{median(samples) / reference:.2f}x",
        ]
        for name, samples in results.items()
    ]
    print(table(["per line", "median µs", "p99 µs", "vs writer"], rows))
    writer_p99 = percentile(results["TelemetryWriter.write"], 99)
    print(
        f"\n{args.lines} lines of {size:.0f} bytes each; rotating files present: {rotations}. "
        f"Writer median {reference:.1f} µs (goal < 100), p99 {writer_p99:.1f} µs (goal < 1000)."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
