"""What a verified commit costs beside writing the same bytes plainly.

Local disk: `CheckpointStore` commit (file hashed while written, fsync, rename, manifest,
commit marker, LATEST, directory fsyncs) beside open + write + fsync of the same bytes.
Goal: at most 1.15 times the time.

S3 (a moto server started on loopback, or --endpoint): the store's commit (multipart,
concurrent parts, SHA-256 while uploading, manifest, marker, LATEST) beside a plain boto3
`upload_fileobj` followed by a pointer `put_object`. Goal: at most 1.0 times the time.

S3 checksums: the store sends a CRC32 with every upload on AWS itself and none to other endpoints
(`upload_checksums`), so each store row has its own baseline sending the same: boto3's default
client for the first, the store's client configuration (no checksums) for the second.

Runs alternate between baseline and store; each figure is the median of --repeat runs, and each
ratio is against the row's baseline just above it.
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
from forewarn.clients.checkpoint import CheckpointStore, S3Options
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
    times: dict[str, list[float]] = {"base": [], "ours": []}

    def plain(target: Path) -> None:
        plain_write(target / "plain.bin", data)

    def ours(target: Path) -> None:
        store_commit(CheckpointStore(target / "store"), 1, data)

    for run in range(repeat):
        pair = [("base", plain), ("ours", ours)]
        for label, action in pair if run % 2 == 0 else pair[::-1]:
            # Each case writes into an empty directory, the other's GiB already deleted and
            # synced: a virtual disk still holding the last GiB slowed the next write by 1-2 s.
            target = Path(tempfile.mkdtemp(prefix="ckpt-bench-", dir=where))
            try:
                times[label].append(timed(partial(action, target)))
            finally:
                shutil.rmtree(target, ignore_errors=True)
                os.sync()
    return rows("local", len(data), times["base"], times["ours"], "open+write+fsync", 1.15)


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
    # The store's two S3 modes: CRC32 on every upload (its default on AWS itself) and none
    # (its default for other endpoints, several of which reject boto3's checksums).
    with_crc = CheckpointStore(
        f"s3://{bucket}/crc", s3=S3Options(endpoint_url=endpoint, upload_checksums=True)
    )
    no_crc = CheckpointStore(
        f"s3://{bucket}/none", s3=S3Options(endpoint_url=endpoint, upload_checksums=False)
    )
    no_crc_client = no_crc._backend.client  # type: ignore[attr-defined]
    results: dict[str, list[float]] = {"boto3": [], "boto3 none": [], "crc": [], "none": []}

    def upload(client: Any, key: str) -> None:
        client.upload_fileobj(io.BytesIO(data), bucket, key, Config=TransferConfig())
        client.put_object(Bucket=bucket, Key=f"{key}.pointer", Body=key.encode())

    def drop_upload(key: str) -> None:
        plain.delete_object(Bucket=bucket, Key=key)
        plain.delete_object(Bucket=bucket, Key=f"{key}.pointer")

    for run in range(repeat):
        cases = [
            ("boto3", partial(upload, plain, "plain"), partial(drop_upload, "plain")),
            ("boto3 none", partial(upload, no_crc_client, "same"), partial(drop_upload, "same")),
            ("crc", partial(store_commit, with_crc, run, data), partial(with_crc.delete, run)),
            ("none", partial(store_commit, no_crc, run, data), partial(no_crc.delete, run)),
        ]
        for label, action, cleanup in cases if run % 2 == 0 else cases[::-1]:
            results[label].append(timed(action))
            # Every case starts on an empty server: moto slows down with each GiB it holds,
            # which would favour whichever case ran first.
            cleanup()
    size = len(data)
    # Each store mode is judged against boto3 sending the same checksums: boto3's default
    # client (CRC32 on every part) for the first, the store's no-checksum client for the second.
    boto3_crc, boto3_none = results["boto3"], results["boto3 none"]
    return [
        row(
            "s3",
            "upload_fileobj + pointer put (boto3 default: CRC32)",
            size,
            boto3_crc,
            boto3_crc,
            "",
        ),
        row(
            "s3",
            "CheckpointStore commit, CRC32 (default on AWS)",
            size,
            results["crc"],
            boto3_crc,
            1.0,
        ),
        row("s3", "upload_fileobj + pointer put, no checksums", size, boto3_none, boto3_none, ""),
        row(
            "s3",
            "CheckpointStore commit, no checksums (default elsewhere)",
            size,
            results["none"],
            boto3_none,
            1.0,
        ),
    ]


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
        default=parse_size("1G"),
        help="S3 commit size (1G, as the goal is stated; moto takes 6-11 s per GiB)",
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
