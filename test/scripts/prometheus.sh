#!/usr/bin/env bash
# Installs Debian's Prometheus tools for the alert tests; idempotent, prints two paths:
# the real alertmanager binary (a receiver for the service's pushes) and promtool (checks the shipped rules).
# Package installs start no daemon here (policy-rc.d); the tests start alertmanager themselves on 127.0.0.1.
set -euo pipefail
if ! command -v prometheus-alertmanager >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -o DPkg::Lock::Timeout=600 >/dev/null
    apt-get install -y -o DPkg::Lock::Timeout=600 --no-install-recommends prometheus-alertmanager prometheus >/dev/null
fi
command -v prometheus-alertmanager
command -v promtool
