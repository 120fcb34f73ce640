#!/usr/bin/env bash
# Make a one-node Slurm cluster answer on this machine (Debian slurm-wlm + munge), for the
# Slurm runner's tests and benchmark. Idempotent: installs packages only if missing, writes the
# munge key only if missing, rewrites slurm.conf only when its content changes (restarting the
# daemons then), starts munged/slurmctld/slurmd only when they are not running, and returns once
# `sinfo` shows the node idle and `srun hostname` works.
# Run as root on Debian (CI does: bash .ci/slurm.sh, before the tests; install.sh calls it).
# QASHIFT_SLURM_CPUS overrides the node's CPU count (default: nproc).
set -euo pipefail

log() { echo "slurm.sh: $*"; }
die() { echo "slurm.sh: $*" >&2; exit 1; }
[ "$(id -u)" = "0" ] || die "must run as root"

need=()
command -v slurmctld >/dev/null 2>&1 || need+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || need+=(munge)
if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${need[@]}" >/dev/null
fi

# munge: one shared secret; the daemon runs as the munge user.
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
    log "creating /etc/munge/munge.key"
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 20); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.5; done
    munge -n | unmunge | grep -q "STATUS: *Success" || die "munge does not answer"
fi

# slurm.conf: one node sized from this machine, short intervals for fast turnaround.
host="$(hostname -s)"
cpus="${QASHIFT_SLURM_CPUS:-$(nproc)}"
mem_mb=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 * 95 / 100 ))
conf="$(cat <<EOF
# Written by qashift .ci/slurm.sh: a one-node test cluster. Edits are overwritten.
ClusterName=qashift
SlurmctldHost=${host}(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
MpiDefault=none
MailProg=/bin/true
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=512
SchedulerType=sched/builtin
# schedule at submit time and on every completion without batching delays
SchedulerParameters=batch_sched_delay=0,sched_interval=2
ReturnToService=2
MinJobAge=600
KillWait=5
CompleteWait=0
InactiveLimit=0
MessageTimeout=10
SlurmctldTimeout=30
SlurmdTimeout=60
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=${host} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${mem_mb} State=UNKNOWN
PartitionName=debug Nodes=${host} Default=YES MaxTime=INFINITE State=UP
EOF
)"
install -d -m 0755 /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
restart=0
if [ "$(cat /etc/slurm/slurm.conf 2>/dev/null)" != "$conf" ]; then
    log "writing /etc/slurm/slurm.conf (${cpus} CPUs, ${mem_mb} MB)"
    printf '%s\n' "$conf" >/etc/slurm/slurm.conf
    restart=1
fi

stop_daemon() {  # by the pid file this script's configuration names, never by process name
    local pid
    pid="$(cat "$1" 2>/dev/null || true)"
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    fi
}
running() { local pid; pid="$(cat "$1" 2>/dev/null || true)"; [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }

if [ "$restart" = 1 ]; then
    stop_daemon /run/slurmd.pid
    stop_daemon /run/slurmctld.pid
fi
if ! running /run/slurmctld.pid; then
    log "starting slurmctld (log: /var/log/slurm/slurmctld.log)"
    slurmctld
fi
for _ in $(seq 60); do scontrol ping >/dev/null 2>&1 && break; sleep 0.5; done
scontrol ping | grep -q "is UP" || { tail -20 /var/log/slurm/slurmctld.log >&2; die "slurmctld is not up"; }
if ! running /run/slurmd.pid; then
    log "starting slurmd (log: /var/log/slurm/slurmd.log)"
    slurmd
fi

state=""
for _ in $(seq 120); do
    state="$(sinfo -h -n "$host" -o %T 2>/dev/null | head -1)"
    case "$state" in
        idle|mixed|allocated) break ;;
        drain*|down*) scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 0.5
done
case "$state" in
    idle|mixed|allocated) ;;
    *) tail -20 /var/log/slurm/slurmd.log >&2; die "node $host is '$state', not idle" ;;
esac
out="$(timeout 60 srun -N1 -n1 --mem=64 -t 1 hostname)" || die "srun hostname failed"
log "cluster up: node $out is $state ($(sinfo -h -o '%c CPUs, %m MB' | head -1))"
