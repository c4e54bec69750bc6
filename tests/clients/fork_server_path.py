"""A job that finds forewarn on a `sys.path` entry it adds at run time (a vendored copy), and
imports it in its main block only; run with `python -S` so that nothing else finds it. It
starts a helper of its own with the fork server, stops it with `terminate()`, and prints one
JSON object: the helper's exit code 5 s later (null: still running, then SIGKILLed).

    python -S fork_server_path.py FOREWARN_PARENT SITE_PACKAGES
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import time

if __name__ == "__main__":
    sys.path[:0] = sys.argv[1:3]
    import forewarn.clients  # noqa: F401  (the fork server is to preload its module)

    helper = multiprocessing.get_context("forkserver").Process(target=time.sleep, args=(30,))
    helper.start()
    helper.terminate()
    helper.join(5)
    print(json.dumps({"helper": helper.exitcode}), flush=True)
    if helper.exitcode is None:
        helper.kill()
        helper.join()
