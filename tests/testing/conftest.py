"""The user suite below is run by test_user_suite.py in its own pytest, as a user would run
theirs; the outer run must not collect it."""

collect_ignore = ["user_suite"]
