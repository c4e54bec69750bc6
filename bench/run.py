"""Run forewarn's benchmarks and print their tables.

    python bench/run.py                 # all of them
    python bench/run.py client_check    # some, by name
    python bench/run.py --list

Each benchmark is a module here with `main(argv) -> int`; each prints a table with its
baseline measured in the same run (these machines are shared and noisy: compare ratios).
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def names() -> list[str]:
    return sorted(
        path.stem
        for path in HERE.glob("*.py")
        if path.stem not in ("run", "common") and not path.stem.startswith("_")
    )


def main(argv: list[str]) -> int:
    if "--list" in argv:
        print("\n".join(names()))
        return 0
    wanted = [arg for arg in argv if not arg.startswith("-")] or names()
    unknown = sorted(set(wanted) - set(names()))
    if unknown:
        print(
            f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(names())}",
            file=sys.stderr,
        )
        return 2
    sys.path.insert(0, str(HERE))
    worst = 0
    for name in wanted:
        print(f"\n## {name}\n", flush=True)
        started = time.monotonic()
        code = importlib.import_module(name).main([])
        print(f"\n({name}: {time.monotonic() - started:.1f}s, exit {code})", flush=True)
        worst = max(worst, code)
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
