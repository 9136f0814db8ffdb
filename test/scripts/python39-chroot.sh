#!/usr/bin/env bash
# A Debian bullseye (python3.9, the oldest python3 installable here) minbase chroot to run the worker in.
# Usage: python39-chroot.sh ROOT   (idempotent: an existing, working chroot is kept). Prints ROOT.
set -euo pipefail
R=${1:?chroot folder}
if [ -x "$R/usr/bin/python3" ] && chroot "$R" /usr/bin/python3 -c 'import sys; assert sys.version_info[:2] == (3, 9)' 2>/dev/null; then
    echo "$R"; exit 0
fi
command -v debootstrap >/dev/null || {
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq debootstrap
}
mkdir -p "$R" "$R.debcache"
debootstrap --variant=minbase --include=python3-minimal,libpython3.9-stdlib --cache-dir="$R.debcache" \
    bullseye "$R" http://deb.debian.org/debian >"$R.debootstrap.log" 2>&1 || { tail -20 "$R.debootstrap.log" >&2; exit 1; }
chroot "$R" /usr/bin/python3 -c 'import sys; assert sys.version_info[:2] == (3, 9), sys.version'
echo "$R"
