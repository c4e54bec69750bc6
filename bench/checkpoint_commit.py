"""What a verified commit costs beside writing the same bytes plainly.

Local disk: `CheckpointStore` commit (file hashed while written, fsync, rename, manifest,
commit marker, LATEST, directory fsyncs) beside open + write + fsync of the same bytes.
Goal: at most 1.15 times the time.

S3 (a moto server started on loopback, or --endpoint): the store's commit (multipart,
concurrent parts, SHA-256 while uploading, manifest, marker, LATEST) beside a plain boto3
`upload_fileobj` followed by a pointer `put_object`. Goal: at most 1.0 times the time.

Runs alternate between baseline and store; each figure is the median of --repeat runs.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from common import median, table
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.checkpoint.testing import loopback_s3_env, moto_server

CHUNK = 8 << 20
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)?$", re.IGNORECASE)


def parse_size(text: str) -> int:
    match = _SIZE.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 256M or 1G)")
    number, unit = float(match.group(1)), match.group(2).lower()
    return int(number * (1 << (10 * " kmgt".index(unit or " "))))


def timed(run: Callable[[], object]) -> float:
    os.sync()  # other dirty pages must not land in this run's fsync
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def plain_write(path: Path, data: bytes) -> None:
    view = memoryview(data)
    with open(path, "wb") as handle:
        for start in range(0, len(view), CHUNK):
            handle.write(view[start : start + CHUNK])
        handle.flush()
        os.fsync(handle.fileno())


def store_commit(store: CheckpointStore, step: int, data: bytes) -> None:
    view = memoryview(data)
    with store.save(step) as gen, gen.open("model.bin") as stream:
        for start in range(0, len(view), CHUNK):
            stream.write(view[start : start + CHUNK])


def bench_local(data: bytes, repeat: int, where: Path) -> list[list[Any]]:
    base: list[float] = []
    ours: list[float] = []
    for run in range(repeat):
        target = Path(tempfile.mkdtemp(prefix="ckpt-bench-", dir=where))
        try:
            store = CheckpointStore(target / "store")
            pair = [
                ("base", partial(plain_write, target / "plain.bin", data)),
                ("ours", partial(store_commit, store, 1, data)),
            ]
            for label, action in pair if run % 2 == 0 else pair[::-1]:
                (base if label == "base" else ours).append(timed(action))
        finally:
            shutil.rmtree(target, ignore_errors=True)
    return rows("local", len(data), base, ours, "open+write+fsync", 1.15)


def rows(
    where: str, size: int, base: list[float], ours: list[float], base_name: str, goal: float
) -> list[list[Any]]:
    return [
        row(where, base_name, size, base, base, ""),
        row(where, "CheckpointStore commit", size, ours, base, goal),
    ]


def row(
    where: str, case: str, size: int, times: list[float], base: list[float], goal: float | str
) -> list[Any]:
    ratio = median(times) / median(base)
    verdict = (
        "" if isinstance(goal, str) else f"<= {goal:.2f} {'met' if ratio <= goal else 'NOT met'}"
    )
    return [
        where,
        case,
        f"{median(times):.3f}",
        f"{min(times):.3f}",
        f"{size / median(times) / 1e6:.0f}",
        f"{ratio:.2f}",
        f"{min(times) / min(base):.2f}",
        verdict,
    ]


def bench_s3(data: bytes, repeat: int, endpoint: str) -> list[list[Any]]:
    import boto3
    from boto3.s3.transfer import TransferConfig

    bucket = f"bench-{uuid.uuid4().hex[:10]}"
    plain = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    plain.create_bucket(Bucket=bucket)
    store = CheckpointStore(f"s3://{bucket}/run", endpoint_url=endpoint)
    # What the store uses on AWS itself: boto3's own CRC32 trailers, as the baseline does.
    trailers = CheckpointStore(f"s3://{bucket}/aws", endpoint_url=endpoint, checksum_trailers=True)
    same_config = store._backend.client  # type: ignore[attr-defined]
    results: dict[str, list[float]] = {"default": [], "same": [], "ours": [], "trailers": []}

    def upload(client: Any, key: str) -> None:
        client.upload_fileobj(io.BytesIO(data), bucket, key, Config=TransferConfig())
        client.put_object(Bucket=bucket, Key=f"{key}.pointer", Body=key.encode())

    for run in range(repeat):
        actions = [
            ("default", partial(upload, plain, f"plain/{run}")),
            ("same", partial(upload, same_config, f"same/{run}")),
            ("ours", partial(store_commit, store, run, data)),
            ("trailers", partial(store_commit, trailers, run, data)),
        ]
        for label, action in actions if run % 2 == 0 else actions[::-1]:
            results[label].append(timed(action))
        # Free the server's memory between runs.
        for key in (f"plain/{run}", f"same/{run}"):
            plain.delete_object(Bucket=bucket, Key=key)
        store.delete(run)
        trailers.delete(run)
    size = len(data)
    table_rows = rows(
        "s3", size, results["default"], results["trailers"], "upload_fileobj + pointer put", 1.0
    )
    table_rows[1][1] = "CheckpointStore commit, checksum trailers (AWS)"
    table_rows.insert(
        1,
        row("s3", "same, store's client config", size, results["same"], results["default"], ""),
    )
    table_rows.insert(
        2,
        row(
            "s3",
            "CheckpointStore commit, no trailers (other endpoints)",
            size,
            results["ours"],
            results["default"],
            "",
        ),
    )
    return table_rows


def run_s3(data: bytes, repeat: int, endpoint: str | None) -> list[list[Any]]:
    if endpoint is not None:
        return bench_s3(data, repeat, endpoint)
    saved = dict(os.environ)
    with moto_server() as local:
        os.environ.update(loopback_s3_env(local))
        try:
            return bench_s3(data, repeat, local)
        finally:
            os.environ.clear()
            os.environ.update(saved)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="checkpoint_commit", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--size", type=parse_size, default=parse_size("1G"), help="local commit size (1G)"
    )
    parser.add_argument(
        "--s3-size",
        type=parse_size,
        default=parse_size("128M"),
        help="S3 commit size (128M: moto takes ~30 s per GiB; use 1G for the full comparison)",
    )
    parser.add_argument("--repeat", type=int, default=5, help="local runs per case (5)")
    parser.add_argument("--s3-repeat", type=int, default=3, help="S3 runs per case (3)")
    parser.add_argument(
        "--dir", type=Path, default=Path(tempfile.gettempdir()), help="where local runs write"
    )
    parser.add_argument("--no-local", action="store_true", help="skip the local-disk runs")
    parser.add_argument("--no-s3", action="store_true", help="skip the S3 runs")
    parser.add_argument(
        "--endpoint",
        help="an S3-compatible endpoint to use instead of moto on loopback (AWS_* credentials)",
    )
    args = parser.parse_args(argv)

    table_rows: list[list[Any]] = []
    if not args.no_local:
        table_rows += bench_local(os.urandom(args.size), args.repeat, args.dir)
    if not args.no_s3:
        table_rows += run_s3(os.urandom(args.s3_size), args.s3_repeat, args.endpoint)
    print(
        f"local: {args.size / (1 << 20):.0f} MiB per commit, median of {args.repeat} runs; "
        f"s3: {args.s3_size / (1 << 20):.0f} MiB, median of {args.s3_repeat}; MB = 10^6 bytes\n"
    )
    print(
        table(
            ["where", "case", "median s", "best s", "MB/s", "ratio", "best ratio", "goal"],
            table_rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
