#!/usr/bin/env bash
# Installs the storage servers and clients the cleanup-job tests use (idempotent):
# xrootd server + client (with the SciTokens authorization plugin), gfal2 with its Python module and the
# file/xrootd/http plugins, gfal-rm.
set -euo pipefail
PKGS=(xrootd-server xrootd-client gfal2 python3-gfal2 gfal2-plugin-file gfal2-plugin-xrootd gfal2-util-scripts
      xrootd-scitokens-plugins gfal2-plugin-http iproute2 util-linux)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
fi
command -v xrootd >/dev/null && command -v xrdfs >/dev/null && command -v gfal-rm >/dev/null
/usr/bin/python3 -c "import gfal2" 
echo "storage tools ready"
