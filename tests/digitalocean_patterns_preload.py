"""A rank launcher's preload (tests/forked_ranks.py): builds the DigitalOcean mail parser's
dated-time patterns, which it builds at their first use, so the drills forked from the launcher
do not each compile them again (~0.5 CPU-s a drill)."""

from forewarn.providers.digitalocean.written import written_times

written_times()
