#!/usr/bin/env bash
# A real Rucio server (PyPI rucio 41.x) on SQLite for the tests, in its own virtual environment.
#   rucio-server.sh install              create/refresh the venv (idempotent)
#   rucio-server.sh init <dir> <port>    fresh rucio.cfg + SQLite database in <dir>, root account
#   rucio-server.sh argv <dir> <port>    print the gunicorn command line (one word a line)
# The server itself is started and stopped by PID from test/python/servers/rucio.py.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${RUCIO_SERVER_VENV:-$REPO/test/.servers/rucio-venv}"
RUCIO_SPEC='rucio>=41,<42'
PY="${PYTHON:-python3}"
# Root identity of the test server; never a production secret.
ROOT_USER=ddmlab
ROOT_PASS=secret

install() {
    if [[ -x "$VENV/bin/gunicorn" && -f "$VENV/.installed" && "$(cat "$VENV/.installed")" == "$RUCIO_SPEC" ]]; then
        return 0
    fi
    "$PY" -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check "$RUCIO_SPEC" gunicorn
    echo "$RUCIO_SPEC" > "$VENV/.installed"
}

init() {
    local dir="$1" port="$2"
    install
    mkdir -p "$dir"
    rm -f "$dir/rucio.db"
    cat > "$dir/rucio.cfg" <<CFG
[common]
loglevel = INFO
[database]
default = sqlite:///$dir/rucio.db
[bootstrap]
userpass_identity = $ROOT_USER
userpass_pwd = $ROOT_PASS
userpass_email = root@localhost
[policy]
permission = generic
schema = generic
lfn2pfn_algorithm_default = identity
lfn2pfn_module = msunmerged_lfn2pfn
package = msunmerged_policy
support = root@localhost
[alembic]
cfg = $dir/alembic.ini
[trace]
tracedir = $dir/trace
# Traces are never sent in the tests, but the module reads these at import.
brokers = 127.0.0.1
port = 61613
topic = /topic/rucio.tracer
username = none
password = none
CFG
    mkdir -p "$dir/trace"
    # CMS's policy package maps an LFN to the site's path without the scope; RSEs that set the attribute
    # lfn2pfn_algorithm = cms_lfn get the same here (PFN = protocol prefix + LFN).
    cat > "$dir/msunmerged_lfn2pfn.py" <<'PY'
import re

from rucio.rse.translation import RSEDeterministicTranslation


def cms_lfn(scope, name, rse, rse_attrs, protocol_attrs):
    return name.lstrip("/")


def _tfc(lfn, rules, proto, depth=0):
    """The rules of one protocol in order; a chained rule maps with its chain's rules first."""
    if depth > 8:
        raise ValueError("chain of %s too deep" % proto)
    for rule in rules:
        if rule["proto"] != proto:
            continue
        path = _tfc(lfn, rules, rule["chain"], depth + 1) if rule.get("chain") else lfn
        if re.match(rule["path"], path):
            return re.sub(rule["path"], rule["out"].replace("$", "\\"), path, count=1)
    if depth:
        return lfn
    raise ValueError("no rule of %s maps %s" % (proto, lfn))


def cmstfc(scope, name, rse, rse_attrs, protocol_attrs):
    """As CMS registers RSEs from storage.json (dmwm/CMSRucio CMSRSE.py): a protocol with `prefix` maps an LFN
    to prefix + LFN; one with `rules` carries them (and those of its chains) in extended_attributes.tfc and
    maps with them, a result that is a URL being the PFN itself."""
    ext = protocol_attrs.get("extended_attributes") or {}
    if "tfc" not in ext:
        return "/" + re.sub("/+", "/", name).lstrip("/")
    pfn = _tfc(name, ext["tfc"], ext["tfc_proto"])
    if re.match(r"^\w+://", pfn):
        return pfn
    base = "%s://%s:%s%s%s" % (protocol_attrs["scheme"], protocol_attrs["hostname"], protocol_attrs["port"],
                               ext.get("web_service_path", ""), protocol_attrs["prefix"])
    path = pfn.replace(base, "")
    return path if protocol_attrs["scheme"] == "root" else re.sub("/+", "/", path)


RSEDeterministicTranslation.register(cms_lfn, "cms_lfn")
RSEDeterministicTranslation.register(cmstfc, "cmstfc")
PY
    # CMS RSE names carry lower case (T1_US_FNAL_Disk), which CMS's own policy package allows and the generic
    # schema does not: a policy package whose schema allows them, everything else generic.
    mkdir -p "$dir/msunmerged_policy"
    : > "$dir/msunmerged_policy/__init__.py"
    cat > "$dir/msunmerged_policy/schema.py" <<'PY'
from rucio.common.schema.generic import *  # noqa: F401,F403
from rucio.common.schema import generic as _generic

RSE = dict(_generic.RSE, pattern="^(T[0-3]_[A-Z]{2}(_[A-Za-z0-9]+)+|[A-Z0-9]+([_-][A-Z0-9]+)*)$")
SCHEMAS = dict(_generic.SCHEMAS, rse=RSE)
PY
    cat > "$dir/alembic.ini" <<INI
[alembic]
sqlalchemy.url = sqlite:///$dir/rucio.db
script_location = rucio:db/sqla/migrate_repo
[loggers]
keys = root
[handlers]
keys = console
[formatters]
keys = generic
[logger_root]
level = WARN
handlers = console
[handler_console]
class = StreamHandler
args = (sys.stderr,)
formatter = generic
[formatter_generic]
format = %%(levelname)s %%(message)s
INI
    RUCIO_CONFIG="$dir/rucio.cfg" PYTHONPATH="$dir" "$VENV/bin/python" -c "
from rucio.db.sqla.util import build_database, create_base_vo, create_root_account
build_database(); create_base_vo(); create_root_account()"
}

argv() {
    local dir="$1" port="$2"
    printf '%s\n' "$VENV/bin/gunicorn" -w 2 -b "127.0.0.1:$port" --chdir "$dir" --pythonpath "$dir" --timeout 120 \
        rucio.web.rest.flaskapi.v1.main:application
}

case "${1:-}" in
    install) install ;;
    init) init "$2" "$3" ;;
    argv) argv "$2" "$3" ;;
    *) echo "usage: $0 install | init <dir> <port> | argv <dir> <port>" >&2; exit 2 ;;
esac
