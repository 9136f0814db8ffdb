#!/usr/bin/env bash
# Installs PyPI's kubernetes-validate (Kubernetes object schemas, offline) into a private folder, for
# the tests of the Helm chart's rendered manifests. Idempotent; prints the folder to put on PYTHONPATH.
set -euo pipefail
TARGET="${K8S_VALIDATE_DIR:-/opt/msunmerged-test/kubernetes-validate}"
VERSION="1.37.0"
if [ ! -f "$TARGET/.installed-$VERSION" ]; then
    rm -rf "$TARGET"
    mkdir -p "$TARGET"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target "$TARGET" \
        "kubernetes-validate==$VERSION"
    PYTHONPATH="$TARGET" python3 -c "import kubernetes_validate"
    touch "$TARGET/.installed-$VERSION"
fi
echo "$TARGET"
