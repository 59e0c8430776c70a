#!/usr/bin/env bash
# A one-node Slurm on this machine, for trying the scripts in slurm/ and for the Slurm tests.
#
#   slurm/local-cluster.sh start [--cpus N] [--force]   install (Debian), configure, start, wait idle
#   slurm/local-cluster.sh stop                         shut slurmctld, slurmd (and our munged) down
#   slurm/local-cluster.sh status                       what runs, and what sinfo says
#
# Runs as root on Debian/Ubuntu, with or without systemd (containers, CI): it installs slurm-wlm
# and munge with apt-get when they are missing, writes /etc/slurm/slurm.conf for this host (one
# node, `hostname -s`, on 127.0.0.1), creates a munge key, starts munged, slurmctld and slurmd as
# plain daemons and waits until `sinfo` shows the node idle. Starting twice is harmless.
#
# The node is declared with max(nproc, 4) CPUs (--cpus to change) and the default partition
# "debug" oversubscribes (OverSubscribe=FORCE:4): the tests run 3- and 4-task jobs and several
# array tasks at once on a 2-core CI machine. A second partition "urgent" on the same node has a
# higher PriorityTier and preempts "debug" jobs (PreemptMode=REQUEUE), for the preemption test. SlurmdParameters=config_overrides keeps slurmd from draining a node that has
# fewer cores than declared. No cgroup plugin is used (containers rarely allow them), so Slurm
# neither confines nor accounts memory; finished jobs stay visible to `scontrol show job` for a
# day (MinJobAge) and are logged by jobcomp/filetxt (read them with `sacct -c`: there is no
# slurmdbd for plain `sacct`). Logs: /var/log/hpcbsp-slurm/.
set -euo pipefail

readonly MARK="# Written by hpcbsp slurm/local-cluster.sh"
readonly CONF_DIR=/etc/slurm
readonly CONF="$CONF_DIR/slurm.conf"
readonly STATE=/var/lib/hpcbsp-slurm
readonly LOGS=/var/log/hpcbsp-slurm
readonly RUN=/run/hpcbsp-slurm
readonly MUNGE_KEY=/etc/munge/munge.key
readonly WAIT_S=${LOCAL_SLURM_WAIT_S:-90}

say() { printf 'local-cluster: %s\n' "$*"; }
die() { printf 'local-cluster: error: %s\n' "$*" >&2; exit 1; }
bad_usage() { printf 'local-cluster: %s (see --help)\n' "$*" >&2; exit 2; }

usage() {
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
}

need_root() {
  [[ $(id -u) -eq 0 ]] || die "must run as root (it installs packages and starts system daemons); try: sudo $0 $*"
}

# --- install -------------------------------------------------------------------------------------

have_binaries() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sinfo >/dev/null \
    && command -v munged >/dev/null
}

install_packages() {
  if have_binaries; then
    say "slurm-wlm and munge already installed ($(slurmd -V 2>/dev/null || echo '?'))"
    return
  fi
  command -v apt-get >/dev/null || die "slurmctld/slurmd/munged not found and no apt-get to install them; install Slurm and munge by hand"
  say "installing slurm-wlm and munge with apt-get (quiet)..."
  export DEBIAN_FRONTEND=noninteractive
  # Keep the packages' maintainer scripts from starting daemons with a default configuration:
  # this script starts them itself, configured. A policy-rc.d that exists already is left alone.
  local own_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  local pkgs=(slurm-wlm munge)
  local ok=0
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/tmp/hpcbsp-slurm-apt.log 2>&1 && ok=1
  if [[ $ok -eq 0 ]]; then
    say "package lists look stale or missing; running apt-get update..."
    apt-get update -qq >>/tmp/hpcbsp-slurm-apt.log 2>&1 || true
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >>/tmp/hpcbsp-slurm-apt.log 2>&1 && ok=1
  fi
  [[ $own_policy -eq 1 ]] && rm -f /usr/sbin/policy-rc.d
  [[ $ok -eq 1 ]] || { tail -n 20 /tmp/hpcbsp-slurm-apt.log >&2; die "apt-get install ${pkgs[*]} failed (log: /tmp/hpcbsp-slurm-apt.log)"; }
  have_binaries || die "installed ${pkgs[*]} but slurmctld/slurmd/munged are still not on PATH"
  say "installed $(slurmd -V)"
}

# --- munge ---------------------------------------------------------------------------------------

munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
  if munge_works; then
    say "munged is running"
    return
  fi
  local user=munge
  id "$user" >/dev/null 2>&1 || user=root
  mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge
  if [[ ! -s $MUNGE_KEY ]]; then
    say "creating a munge key"
    if command -v mungekey >/dev/null; then
      mungekey --create --keyfile="$MUNGE_KEY" --force
    else
      dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
    fi
  fi
  chown -R "$user:" /etc/munge /var/lib/munge /var/log/munge /run/munge
  chmod 0700 /etc/munge /var/lib/munge /var/log/munge
  chmod 0755 /run/munge
  chmod 0400 "$MUNGE_KEY"
  # A munged killed without cleanup leaves its socket lock behind and the next one refuses to start.
  rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
  say "starting munged (as $user)"
  if [[ $user == root ]]; then
    munged --force
  else
    runuser -u "$user" -- munged
  fi
  mkdir -p "$RUN"
  touch "$RUN/started-munged"
  for _ in $(seq 1 20); do munge_works && return; sleep 0.5; done
  die "munged started but munge -n | unmunge fails (see /var/log/munge/munged.log)"
}

# --- slurm.conf ----------------------------------------------------------------------------------

write_conf() {
  local cpus=$1 node mem_mb
  node=$(hostname -s)
  # RealMemory a little under the total so slurmd never finds less than declared.
  mem_mb=$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
  mkdir -p "$CONF_DIR" "$STATE/ctld" "$STATE/d" "$LOGS" "$RUN"
  local tmp
  tmp=$(mktemp)
  cat >"$tmp" <<EOF
$MARK: edit that script, not this file.
ClusterName=hpcbsp-local
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
# A requeued job may start again after cred_expire seconds (default 120): short, for quick tests.
AuthInfo=cred_expire=10
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# No default MPI plugin: an MPICH program is launched with \`srun --mpi=pmi2\`, as on most sites.
MpiDefault=none
# Containers rarely allow cgroups: track processes through /proc and bind no tasks.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGS/jobcomp.log
SchedulerType=sched/backfill
# Look at pending jobs every few seconds (default 60 s), so a requeued job starts soon after its
# begin time.
SchedulerParameters=sched_interval=2,bf_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
# Keep finished jobs (and their state and exit code) visible to \`scontrol show job\` for a day.
MinJobAge=86400
KillWait=5
InactiveLimit=0
SlurmctldTimeout=60
SlurmdTimeout=60
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
# Preemption as many sites run it: a job of the higher tier ("urgent") that needs resources held
# by "debug" jobs requeues them (those submitted with --requeue; the others are cancelled). The
# preempted job gets SIGTERM, then SIGKILL after GraceTime + KillWait seconds.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4 PriorityTier=1 GraceTime=5
PartitionName=urgent Nodes=$node MaxTime=INFINITE State=UP PriorityTier=10
EOF
  if [[ -f $CONF ]] && cmp -s "$tmp" "$CONF"; then
    rm -f "$tmp"
    echo same
  else
    install -m 0644 "$tmp" "$CONF"
    rm -f "$tmp"
    echo changed
  fi
}

# --- daemons -------------------------------------------------------------------------------------

# A pid file names a live daemon only if that pid runs the program named like the file: after a
# reboot or a container restart the pid may belong to anything.
pid_alive() {
  local file=$1 pid name
  [[ -s $file ]] || return 1
  pid=$(cat "$file")
  name=$(basename "$file" .pid)
  [[ $pid =~ ^[0-9]+$ ]] && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] || return 1
  # A killed daemon stays a zombie until reaped (slowly, where PID 1 is no real init).
  [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]
}

ctld_responds() { timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; }

node_state() { timeout 10 sinfo -h -N -n "$(hostname -s)" -o '%t' 2>/dev/null | head -n 1; }

stop_pidfile() {
  local name=$1 file=$2 pid
  pid_alive "$file" || { rm -f "$file"; return 0; }
  pid=$(cat "$file")
  say "stopping $name (pid $pid)"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$pid" 2>/dev/null; then
    say "$name did not stop; killing it"
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

start_daemons() {
  local node
  node=$(hostname -s)
  if pid_alive "$RUN/slurmctld.pid"; then
    say "slurmctld is running (pid $(cat "$RUN/slurmctld.pid"))"
  else
    say "starting slurmctld"
    # -c: start from a clean state, so jobs of an earlier run (a test's requeued job) never resume.
    slurmctld -c -f "$CONF" || die "slurmctld failed to start (log: $LOGS/slurmctld.log)"
  fi
  for _ in $(seq 1 40); do ctld_responds && break; sleep 0.5; done
  ctld_responds || { tail -n 20 "$LOGS/slurmctld.log" >&2; die "slurmctld does not answer scontrol ping"; }
  if pid_alive "$RUN/slurmd.pid"; then
    say "slurmd is running (pid $(cat "$RUN/slurmd.pid"))"
  else
    say "starting slurmd for node $node"
    slurmd -f "$CONF" -N "$node" || die "slurmd failed to start (log: $LOGS/slurmd.log)"
  fi
}

wait_idle() {
  local node state deadline resumed=0
  node=$(hostname -s)
  deadline=$((SECONDS + WAIT_S))
  say "waiting (up to ${WAIT_S}s) for node $node to be idle..."
  while ((SECONDS < deadline)); do
    state=$(node_state)
    case $state in
      idle|mix|alloc)
        say "node $node is $state: Slurm is ready (try: srun -n 2 hostname)"
        return 0 ;;
      down*|drain*|drng*|fail*)
        if [[ $resumed -eq 0 ]]; then
          say "node is $state; resuming it"
          scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true
          resumed=1
        fi ;;
    esac
    sleep 1
  done
  scontrol show node "$node" >&2 || true
  tail -n 20 "$LOGS/slurmd.log" >&2 || true
  die "node $node is still '${state:-unknown}' after ${WAIT_S}s"
}

# --- commands ------------------------------------------------------------------------------------

cmd_start() {
  local cpus="" force=0
  while [[ $# -gt 0 ]]; do
    case $1 in
      --cpus) [[ $# -ge 2 && $2 =~ ^[1-9][0-9]*$ ]] || bad_usage "--cpus needs a positive integer"; cpus=$2; shift 2 ;;
      --cpus=*) cpus=${1#--cpus=}; [[ $cpus =~ ^[1-9][0-9]*$ ]] || bad_usage "--cpus needs a positive integer"; shift ;;
      --force) force=1; shift ;;
      *) bad_usage "unknown option for start: $1" ;;
    esac
  done
  need_root start
  if [[ -z $cpus ]]; then
    cpus=$(nproc)
    ((cpus < 4)) && cpus=4
  fi
  if [[ -f $CONF ]] && ! grep -qF "$MARK" "$CONF" && [[ $force -eq 0 ]]; then
    die "$CONF exists and was not written by this script; refusing to replace it (--force replaces it)"
  fi
  install_packages
  start_munge
  local changed
  changed=$(write_conf "$cpus")
  if [[ $changed == changed ]]; then
    say "wrote $CONF (node $(hostname -s), $cpus CPUs, oversubscribed)"
    if pid_alive "$RUN/slurmctld.pid" || pid_alive "$RUN/slurmd.pid"; then
      say "configuration changed: restarting the daemons"
      stop_slurm
    fi
  else
    say "$CONF is up to date"
  fi
  start_daemons
  wait_idle
}

stop_slurm() {
  stop_pidfile slurmd "$RUN/slurmd.pid"
  stop_pidfile slurmctld "$RUN/slurmctld.pid"
}

cmd_stop() {
  need_root stop
  stop_slurm
  if [[ -e $RUN/started-munged ]]; then
    stop_pidfile munged /run/munge/munged.pid
    rm -f "$RUN/started-munged"
  fi
  say "stopped"
}

cmd_status() {
  local rc=0
  for d in slurmctld slurmd; do
    if pid_alive "$RUN/$d.pid"; then say "$d: running (pid $(cat "$RUN/$d.pid"))"; else say "$d: not running"; rc=1; fi
  done
  if command -v munge >/dev/null && munge_works; then say "munged: running"; else say "munged: not running"; rc=1; fi
  if command -v sinfo >/dev/null && ctld_responds; then
    timeout 10 sinfo || rc=1
  else
    rc=1
  fi
  return $rc
}

main() {
  local cmd=${1:-}
  [[ $# -gt 0 ]] && shift
  case $cmd in
    start) cmd_start "$@" ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    -h|--help|help) usage ;;
    "") usage >&2; exit 2 ;;
    *) bad_usage "unknown command '$cmd': start, stop or status" ;;
  esac
}

main "$@"
