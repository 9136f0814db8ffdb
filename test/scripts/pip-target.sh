#!/usr/bin/env bash
# Installs PyPI packages for one test into a private folder (never into the service's environment):
#   pip-target.sh NAME MODULE 'PIP ARGS' ['PIP ARGS' ...]
# runs `pip install --target /opt/msunmerged-test/NAME PIP ARGS` once per quoted argument, then checks
# that MODULE imports. Idempotent (a marker names the arguments); prints the folder for PYTHONPATH.
set -euo pipefail
NAME="$1"; MODULE="$2"; shift 2
TARGET="/opt/msunmerged-test/$NAME"
MARKER="$TARGET/.installed-$(printf '%s\n' "$@" | sha256sum | cut -c1-16)"
if [ ! -f "$MARKER" ]; then
    rm -rf "$TARGET"
    mkdir -p "$TARGET"
    for args in "$@"; do
        # shellcheck disable=SC2086  # each argument is a list of pip arguments
        python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target "$TARGET" $args
    done
    PYTHONPATH="$TARGET" python3 -c "import $MODULE"
    touch "$MARKER"
fi
echo "$TARGET"
