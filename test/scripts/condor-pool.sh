#!/usr/bin/env bash
# A real single-machine HTCondor pool (Debian trixie's minicondor 23.x) in a chroot, for the tests.
#   condor-pool.sh install        debootstrap + apt install (idempotent; ~80 s the first time)
#   condor-pool.sh start          install if needed, start condor_master (PID in condor_master.pid)
#   condor-pool.sh token USER     print a token directory holding an IDTOKEN for USER@localpool
#   condor-pool.sh tools          install the storage clients jobs need (xrdfs with its token plugin; idempotent)
#   condor-pool.sh stop           stop condor_master by its PID, unmount proc and dev
# Everything lives in test/.servers/condor/ (override with CONDOR_POOL_DIR); only 127.0.0.1 is used.
set -euo pipefail

# The pool uses its own /etc/condor config, whatever the caller (e.g. the bindings) set.
unset CONDOR_CONFIG
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
BASE="${CONDOR_POOL_DIR:-$REPO/test/.servers/condor}"
R="$BASE/root"
PIDFILE="$BASE/condor_master.pid"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
APT=(-o DPkg::Lock::Timeout=600)
mkdir -p "$BASE"

log() { echo "condor-pool: $*" >&2; }

mounts() {
    mountpoint -q "$R/proc" || mount -t proc proc "$R/proc"
    mountpoint -q "$R/dev" || mount --bind /dev "$R/dev"
}

unmounts() {
    for m in "$R/dev" "$R/proc"; do
        if mountpoint -q "$m"; then umount "$m" || umount -l "$m"; fi
    done
}

running() {
    [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

configure() {
    cat > "$R/etc/condor/config.d/50-local.conf" <<'CONF'
# MSUnmerged test pool: loopback only, tokens required to write.
UID_DOMAIN = localpool
TRUST_DOMAIN = localpool
FILESYSTEM_DOMAIN = localpool
USE_SHARED_PORT = True
COLLECTOR_PORT = 9618
ENABLE_IPV6 = False
SEC_DEFAULT_AUTHENTICATION_METHODS = FS, IDTOKENS
SEC_CLIENT_AUTHENTICATION_METHODS = FS, IDTOKENS
SEC_READ_AUTHENTICATION = OPTIONAL
SEC_WRITE_AUTHENTICATION = REQUIRED
ALLOW_WRITE = submitter@localpool condor@localpool root@localpool
NUM_CPUS = 2
MOUNT_UNDER_SCRATCH =
PER_JOB_NAMESPACES = False
PERIODIC_EXPR_INTERVAL = 5
# Tests poll often: let the negotiator and schedd react within seconds.
NEGOTIATOR_INTERVAL = 2
NEGOTIATOR_CYCLE_DELAY = 1
SCHEDD_INTERVAL = 2
# The slot plays a CMS site: glideins advertise their site and set SITECONFIG_PATH for the jobs.
GLIDEIN_CMSSite = "T2_XX_Condor"
STARTD_ATTRS = $(STARTD_ATTRS) GLIDEIN_CMSSite
STARTER_JOB_ENVIRONMENT = "SITECONFIG_PATH=/srv/siteconf"
# MSUnmerged's per-RSE cap (docs/condor.md): each job takes 1/cap of its RSE's limit msunmerged.<RSE>.
CONCURRENCY_LIMIT_DEFAULT_MSUNMERGED = 1
CONF
}

install() {
    if [[ -f "$R/.msunmerged-ready" ]]; then return; fi
    command -v debootstrap >/dev/null || {
        apt-get "${APT[@]}" update -q >&2
        DEBIAN_FRONTEND=noninteractive apt-get "${APT[@]}" install -y -q debootstrap >&2
    }
    if [[ ! -x "$R/usr/bin/apt-get" ]]; then
        # A half-finished debootstrap cannot be resumed: start that part over.
        unmounts; rm -rf "$R"; mkdir -p "$BASE/debcache"
        log "debootstrap trixie into $R"
        debootstrap --variant=minbase --cache-dir="$BASE/debcache" trixie "$R" "$MIRROR" >"$BASE/debootstrap.log" 2>&1 \
            || { tail -20 "$BASE/debootstrap.log" >&2; exit 1; }
    fi
    # No service starts inside the chroot at package install time.
    printf '#!/bin/sh\nexit 101\n' > "$R/usr/sbin/policy-rc.d"; chmod +x "$R/usr/sbin/policy-rc.d"
    mounts
    log "apt install minicondor python3"
    # A run killed during the install leaves dpkg half-done; apt refuses to go on until it is finished.
    chroot "$R" env DEBIAN_FRONTEND=noninteractive dpkg --configure -a >"$BASE/apt.log" 2>&1 || true
    chroot "$R" apt-get "${APT[@]}" update -q >>"$BASE/apt.log" 2>&1
    chroot "$R" env DEBIAN_FRONTEND=noninteractive apt-get "${APT[@]}" install -y -q --no-install-recommends \
        minicondor python3 >>"$BASE/apt.log" 2>&1 || { tail -20 "$BASE/apt.log" >&2; exit 1; }
    chroot "$R" id -u submitter >/dev/null 2>&1 || chroot "$R" useradd -m -u 2000 submitter
    configure
    touch "$R/.msunmerged-ready"
}

start() {
    install
    if running; then
        # A pool started with an older configuration takes the current one without a restart.
        local before; before="$(cat "$R/etc/condor/config.d/50-local.conf" 2>/dev/null || true)"
        configure
        if [[ "$before" != "$(cat "$R/etc/condor/config.d/50-local.conf")" ]]; then
            chroot "$R" condor_reconfig >&2 || true
        fi
        log "already running (pid $(cat "$PIDFILE"))"; return
    fi
    configure
    mounts
    grep -q "^127.0.0.1 $(hostname)\$" "$R/etc/hosts" 2>/dev/null || echo "127.0.0.1 $(hostname)" >> "$R/etc/hosts"
    mkdir -p "$R/run/condor" "$R/run/lock/condor"
    chroot "$R" chown condor:condor /run/condor /run/lock/condor
    # chroot execs condor_master, so $! is the master's PID.
    setsid chroot "$R" /usr/sbin/condor_master -f >"$BASE/condor_master.out" 2>&1 < /dev/null &
    echo $! > "$PIDFILE"
    log "condor_master started (pid $!)"
}

token() {
    # Identities are user@TRUST_DOMAIN; a bare user name would not match ALLOW_WRITE.
    local identity="$1" dir="$BASE/tokens/${1%@*}"
    [[ "$identity" == *@* ]] || identity="$identity@localpool"
    # The pool signing key is created by the master on its first start.
    for _ in $(seq 1 100); do
        [[ -s "$R/etc/condor/passwords.d/POOL" ]] && break
        sleep 0.2
    done
    mkdir -p "$dir"; chmod 700 "$BASE/tokens" "$dir"
    if [[ ! -s "$dir/token" ]]; then
        chroot "$R" condor_token_create -identity "$identity" > "$dir/token.tmp"
        chmod 600 "$dir/token.tmp"; mv "$dir/token.tmp" "$dir/token"
    fi
    echo "$dir"
}

tools() {
    # xrdfs and the ztn (token) security plugin, for jobs that delete on the tests' token xrootd.
    install
    if [[ -f "$R/.msunmerged-tools" ]]; then return; fi
    mounts
    chroot "$R" apt-get "${APT[@]}" update -q >>"$BASE/apt.log" 2>&1
    chroot "$R" env DEBIAN_FRONTEND=noninteractive apt-get "${APT[@]}" install -y -q --no-install-recommends \
        xrootd-client xrootd-plugins >>"$BASE/apt.log" 2>&1 || { tail -20 "$BASE/apt.log" >&2; exit 1; }
    chroot "$R" xrdfs --version >/dev/null
    touch "$R/.msunmerged-tools"
}

stop() {
    if running; then
        local pid; pid="$(cat "$PIDFILE")"
        kill -TERM "$pid"
        for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -0 "$pid" 2>/dev/null && kill -KILL -- "-$pid"  # the master did not stop its daemons: take the whole session
        log "condor_master stopped"
    fi
    rm -f "$PIDFILE"
    unmounts
}

case "${1:-start}" in
    install) install ;;
    start) start ;;
    token) token "${2:?identity}" ;;
    tools) tools ;;
    stop) stop ;;
    *) echo "usage: $0 install|start|token ID|tools|stop" >&2; exit 2 ;;
esac
