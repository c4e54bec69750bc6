"""A rank script for test_forked_ranks.py: does what its argv says, like a rank would."""

from __future__ import annotations

import json
import os
import sys
import threading
import time


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
    if mode == "thread":  # a non-daemon thread the interpreter waits for at exit: the 0.3 s
        # is what it outlives main by, the behaviour under test, not a wait for a condition
        threading.Thread(target=lambda: (time.sleep(0.3), print("thread done"))).start()
    if mode == "noisy":
        sys.stderr.write("x" * 300_000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
