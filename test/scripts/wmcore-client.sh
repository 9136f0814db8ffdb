#!/usr/bin/env bash
# Installs WMCore's own HTTP client (PyPI wmcore without its dependencies, plus the modules its
# pycurl_manager and MSUtils import) into a private folder, for the REST compatibility tests.
# Idempotent; prints the folder to put on PYTHONPATH.
set -euo pipefail
TARGET="${WMCORE_CLIENT_DIR:-/opt/msunmerged-test/wmcore-client}"
WMCORE_VERSION="2.4.5.9"
if [ ! -f "$TARGET/.installed-$WMCORE_VERSION" ]; then
    rm -rf "$TARGET"
    mkdir -p "$TARGET"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target "$TARGET" "wmcore==$WMCORE_VERSION"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target "$TARGET" pycurl future
    PYTHONPATH="$TARGET" python3 -c "import WMCore.Services.pycurl_manager, WMCore.Services.MSUtils.MSUtils"
    touch "$TARGET/.installed-$WMCORE_VERSION"
fi
echo "$TARGET"
