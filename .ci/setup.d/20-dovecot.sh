#!/usr/bin/env bash
# Dovecot for the DigitalOcean mailbox tests and forewarn.testing's DigitalOcean agent. They
# start their own instance on loopback (testing/dovecot.py), so the system service is stopped
# and disabled: it must not hold ports 143/993 or answer in their place. Idempotent.
set -euo pipefail

if ! command -v dovecot >/dev/null 2>&1 && [ ! -x /usr/sbin/dovecot ]; then
  # policy-rc.d 101 keeps the package scripts from starting the service while installing.
  policy=/usr/sbin/policy-rc.d
  created_policy=no
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    created_policy=yes
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    dovecot-core dovecot-imapd openssl >/dev/null
  if [ "$created_policy" = yes ]; then
    rm -f "$policy"
  fi
fi

if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl disable --now dovecot.service dovecot.socket >/dev/null 2>&1 || true
fi
if command -v service >/dev/null 2>&1; then
  service dovecot stop >/dev/null 2>&1 || true
fi
if [ -x /usr/sbin/update-rc.d ]; then
  update-rc.d dovecot disable >/dev/null 2>&1 || true
fi
dovecot --version
