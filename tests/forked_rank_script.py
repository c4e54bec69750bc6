"""A rank script for test_forked_ranks.py: does what its argv says, like a rank would."""

from __future__ import annotations

import json
import os
import sys
import threading


def main() -> int:
    mode = sys.argv[1]
    print(json.dumps({"pid": os.getpid(), "argv": sys.argv[1:], "tag": os.environ.get("TAG")}))
    sys.stdout.flush()
    if mode == "fail":
        raise RuntimeError("rank broke")
    if mode == "exit":
        return int(sys.argv[2])
    if mode == "hang":  # until the test kills it
        threading.Event().wait()
    if mode == "thread":  # a non-daemon thread the interpreter waits for at exit: it
        # finishes only once main has (threading's shutdown lets the main thread go first)
        threading.Thread(
            target=lambda: (threading.main_thread().join(), print("thread done"))
        ).start()
    if mode == "noisy":
        sys.stderr.write("x" * 300_000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
