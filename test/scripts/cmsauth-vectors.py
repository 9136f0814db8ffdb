"""Writes test/fixtures/cmsauth/front-end.json: request headers as the CMSWEB front end signs them, made by
dmwm/cmsauth's own Go code (SetCMSHeaders + GetHmac, built by cmsauth-signer.sh) for the cases the REST
tests replay. Run from the repository: `python3 test/scripts/cmsauth-vectors.py` (CMSAUTH_SRC=<checkout of
dmwm/cmsauth> where github.com cannot be reached)."""
from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "test" / "fixtures" / "cmsauth" / "front-end.json"
KEY = hashlib.sha256(b"msunmerged cmsauth vectors").digest()  # the key of every case but the weak ones
PATH = "/ms-unmerged/data/trigger"
JM_DN = "/DC=ch/DC=cern/OU=Users/CN=jmuller"
JM_SORTED = "/".join(sorted(set(JM_DN.split("/"))))  # cmsauth's GetSortedDN: CRIC records are keyed by it
OPERATOR = {JM_SORTED: {"DN": JM_DN, "SortedDN": JM_SORTED,
                        "ROLES": {"operator": ["group:dmwm"], "t0_operator": ["group:dmwm"]}}}
JMULLER = {"name": "Jürgen Müller", "cern_upn": "jmuller", "dn": JM_DN}
EVE = {"name": "Eve", "cern_upn": "eve", "dn": "/DC=ch/DC=cern/OU=Users/CN=eve"}  # a CMS user, no CMS role
CASES = {
    # An operator as CRIC knows them: roles with '_', a non-ASCII name.
    "operator": {"key": KEY, "user": JMULLER, "cric": OPERATOR, "headers": {}},
    # A CMS user without a role who sends the operator role header herself: the front end signs it too.
    "self_made_role": {"key": KEY, "user": EVE, "cric": {}, "headers": {"cms-authz-operator": "group:dmwm"}},
    # The same operator signed with the empty key, and with a key file of NULs (HMAC pads with NULs: equal).
    "empty_key": {"key": b"", "user": JMULLER, "cric": OPERATOR, "headers": {}},
    "nul_key": {"key": b"\0" * 32, "user": JMULLER, "cric": OPERATOR, "headers": {}},
}


def main() -> None:
    signer = subprocess.run(["bash", str(REPO / "test" / "scripts" / "cmsauth-signer.sh")], check=True,
                            capture_output=True, text=True).stdout.strip().splitlines()[-1]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in CASES.items():
            key_file = Path(tmp) / f"{name}.key"
            key_file.write_bytes(case["key"])
            request = {"key_file": str(key_file), "path": PATH, "headers": case["headers"], "user": case["user"],
                       "cric": case["cric"]}
            signed = subprocess.run([signer], input=json.dumps(request), check=True, capture_output=True, text=True)
            out[name] = {"key_hex": case["key"].hex(), "client_headers": case["headers"], "user": case["user"],
                         "headers": json.loads(signed.stdout)}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    print(OUT)


if __name__ == "__main__":
    main()
