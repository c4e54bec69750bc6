"""A module a job has the fork server preload (loader_job.py, LOADER_JOB_PRELOAD): with
LOADER_JOB_SERVER_HOLD=PATH, the fork server creates PATH as it imports this module, before
anything of forewarn's, and waits there until PATH is removed (as while it imports a main
module that imports torch first: seconds)."""

from __future__ import annotations

import os
import time

_hold = os.environ.get("LOADER_JOB_SERVER_HOLD")
if _hold:
    with open(_hold, "x"):
        pass
    while os.path.exists(_hold):
        time.sleep(0.01)
