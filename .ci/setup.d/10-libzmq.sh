#!/usr/bin/env bash
# libzmq's headers, for the C subscriber test (clients/c).
set -euo pipefail
if ! dpkg -s libzmq3-dev >/dev/null 2>&1; then
  apt-get install -y -qq libzmq3-dev pkg-config
fi
