#!/usr/bin/env bash
# A real single-node Slurm 22.05 cluster on 127.0.0.1 for the integration tests (Debian 12 packages).
#
#   slurm-cluster.sh start   install (idempotent), write the configuration under $SLURM_TEST_DIR,
#                            start munged, slurmctld, slurmd, slurmrestd in the background (PIDs in *.pid),
#                            wait for an idle node; prints KEY=VALUE lines for the test fixture
#   slurm-cluster.sh info    the same KEY=VALUE lines for the running cluster (fails when it is not running)
#   slurm-cluster.sh stop    stop every daemon by its recorded PID
#
# SLURM_TEST_DIR (default ${TMPDIR:-/tmp}/msunmerged-shared/slurm, made 0755): the daemons' configuration,
# state, spool and logs, in a folder the slurm user reaches wherever the checkout sits. The cluster is
# machine-wide (fixed ports): test/python/servers/slurm.py lets the sessions on the machine share it.
#
# Runs without systemd and cgroups: proctrack/linuxproc, task/none, no accounting database (job
# completions go to a text file that `sacct -c` reads).
set -euo pipefail

DIR=${SLURM_TEST_DIR:-${TMPDIR:-/tmp}/msunmerged-shared/slurm}
REST_PORT=${SLURM_REST_PORT:-6820}
CONF=$DIR/etc/slurm.conf
DAEMONS=(slurmrestd slurmd slurmctld munged)  # stop order: clients of munge first

log() { echo "slurm-cluster: $*" >&2; }

install_packages() {
    local missing=()
    for p in slurmctld slurmd munge slurm-client slurmrestd slurm-wlm-jwt-plugin; do
        dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing ${missing[*]}"
    # policy-rc.d: the packages must not start their own daemons (we run ours, by PID).
    local policy=/usr/sbin/policy-rc.d created=0
    if [ ! -e $policy ]; then printf '#!/bin/sh\nexit 101\n' > $policy; chmod +x $policy; created=1; fi
    apt-get -o DPkg::Lock::Timeout=600 update -qq >&2 || true
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
        "${missing[@]}" >&2
    [ $created -eq 1 ] && rm -f $policy
    return 0
}

pid_alive() { [ -f "$DIR/$1.pid" ] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }

stop_daemons() {
    for d in "${DAEMONS[@]}"; do
        [ -f "$DIR/$d.pid" ] || continue
        local pid; pid=$(cat "$DIR/$d.pid")
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$DIR/$d.pid"
    done
}

# Starts "$@" in its own session with output to <name>.log and records its PID in <name>.pid.
start_daemon() {
    local name=$1; shift
    setsid "$@" >>"$DIR/$name.log" 2>&1 < /dev/null &
    echo $! > "$DIR/$name.pid"
}

write_config() {
    mkdir -p "$DIR/etc" "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/run"
    chmod 755 "$DIR" "$(dirname "$DIR")"
    # A fresh cluster each session: job ids restart at 1, so no jobs or completions from earlier runs.
    rm -rf "$DIR/state"/* "$DIR/spool"/* "$DIR/log/jobcomp.txt"
    [ -s "$DIR/etc/jwt.key" ] || head -c 32 /dev/urandom > "$DIR/etc/jwt.key"
    chown slurm:slurm "$DIR/etc/jwt.key" "$DIR/state" "$DIR/log"
    chmod 600 "$DIR/etc/jwt.key"
    local host node
    host=$(hostname)
    grep -qE "^127\.0\.0\.1\s.*\b$host\b" /etc/hosts || echo "127.0.0.1 $host" >> /etc/hosts
    # The node line is what slurmd detects here (CPUs, memory differ between machines).
    node=$(slurmd -C | head -1)
    cat > "$CONF" <<EOF
ClusterName=msunmerged-test
SlurmctldHost=$host(127.0.0.1)
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmUser=slurm
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$DIR/etc/jwt.key
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MinJobAge=300
KillWait=5
JobRequeue=0
ReturnToService=2
MailProg=/bin/true
MpiDefault=none
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pidfile
SlurmdPidFile=$DIR/run/slurmd.pidfile
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
$node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    chmod 644 "$CONF"
}

wait_idle() {
    for _ in $(seq 300); do
        state=$(SLURM_CONF=$CONF sinfo -h -N -o %T 2>/dev/null | head -1 || true)
        case "$state" in idle*|mixed*|allocated*) return 0;; esac
        pid_alive slurmctld || { log "slurmctld died"; tail -20 "$DIR/slurmctld.log" "$DIR/log/slurmctld.log" >&2 || true; exit 1; }
        sleep 0.2
    done
    log "node not idle after 60 s (state: ${state:-none})"; exit 1
}

wait_port() {
    for _ in $(seq 150); do
        (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
        pid_alive slurmrestd || { log "slurmrestd died"; tail -20 "$DIR/slurmrestd.log" >&2; exit 1; }
        sleep 0.2
    done
    log "nothing listens on port $1"; exit 1
}

start() {
    install_packages
    stop_daemons
    write_config
    install -d -o munge -g munge -m 755 /run/munge
    [ -s /etc/munge/munge.key ] || { mungekey --create >&2; chown munge:munge /etc/munge/munge.key; }
    start_daemon munged setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged --foreground
    for _ in $(seq 50); do [ -S /run/munge/munge.socket.2 ] && break; sleep 0.1; done
    export SLURM_CONF=$CONF
    start_daemon slurmctld /usr/sbin/slurmctld -D -i
    start_daemon slurmd /usr/sbin/slurmd -D
    wait_idle
    # -s: only the REST plugins (without it slurmrestd loads database plugins and exits); not as root.
    SLURM_JWT=daemon start_daemon slurmrestd /usr/sbin/slurmrestd -u nobody -g nogroup -a rest_auth/jwt \
        -s openapi/v0.0.38,openapi/v0.0.37 "127.0.0.1:$REST_PORT"
    wait_port "$REST_PORT"
    info
}

info() {
    for d in "${DAEMONS[@]}"; do pid_alive "$d" || { log "$d is not running (no live PID in $DIR/$d.pid)"; exit 1; }; done
    echo "SLURM_CONF=$CONF"
    echo "SLURM_NODE=$(SLURM_CONF=$CONF sinfo -h -N -o %N | head -1)"
    echo "SLURM_PARTITION=debug"
    echo "SLURM_REST_URL=http://127.0.0.1:$REST_PORT"
    echo "SLURM_JOBCOMP=$DIR/log/jobcomp.txt"
}

case "${1:-}" in
    start) start ;;
    info) info ;;
    stop) stop_daemons ;;
    install) install_packages ;;
    *) echo "usage: $0 start|info|stop|install" >&2; exit 2 ;;
esac
