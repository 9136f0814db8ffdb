#!/usr/bin/env bash
# Prints the path of a kubectl whose built-in kustomize (`kubectl kustomize`, v4 or newer: `patches` with a
# `target`) builds CMSWEB's ArgoCD layout in test_deploy_chart.py, offline. Uses the one on PATH (this machine's
# comes with the Google Cloud SDK); else installs Debian's kubernetes-client; fails naming what is missing.
set -euo pipefail
if ! command -v kubectl >/dev/null 2>&1; then
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends kubernetes-client
fi
kubectl=$(command -v kubectl)
version=$("$kubectl" version --client 2>/dev/null | sed -n 's/^Kustomize Version: v\([0-9]*\).*/\1/p')
if [ -z "$version" ] || [ "$version" -lt 4 ]; then
    echo "kubectl.sh: $kubectl has no kustomize v4 or newer (found: ${version:-none})" >&2
    exit 1
fi
echo "$kubectl"
