#!/usr/bin/env bash
# Installs Debian's headless Chromium for the page tests; idempotent, prints the binary's path.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -o DPkg::Lock::Timeout=600 >/dev/null
    apt-get install -y -o DPkg::Lock::Timeout=600 --no-install-recommends chromium >/dev/null
fi
command -v chromium
