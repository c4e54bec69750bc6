#!/usr/bin/env bash
# Refresh the package lists once; later setup files install what they need.
set -euo pipefail
apt-get update -qq
