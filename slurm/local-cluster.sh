#!/usr/bin/env bash
# A Slurm on this machine, one node or several, for trying the scripts in slurm/ and for the tests.
#
#   slurm/local-cluster.sh start [--nodes N] [--link-rate RATE] [--subnet A.B.C] [--cpus N] [--force]
#   slurm/local-cluster.sh stop       stop every daemon it started, remove the nodes, links and files
#   slurm/local-cluster.sh status     what runs: daemons, nodes, addresses, links (bytes, drops), sinfo
#   slurm/local-cluster.sh shape --link-rate RATE|none   reshape the running nodes' links
#
# --nodes 1 (the default): one node, this host (`hostname -s`) at 127.0.0.1.
# --nodes N >= 2: N emulated hosts hpcbsp-node1..N, each a network namespace with its own hostname
#   (a UTS namespace) and address A.B.C.(10+i) on a private bridge hpcbsp-br0 (A.B.C.1, default
#   10.213.0), one slurmd per node, slurmctld and munged on this host. --link-rate RATE (e.g.
#   10mbit, 100mbit, 1gbit) makes each node's link a plain rate limiter in both directions (a small
#   token bucket and a queue of several MiB that never drops a message's burst; see link_shape).
#   For plain MPI without Slurm it writes a hostfile and a launcher: see `status`, docs/cluster.md.
#
# Runs as root on Debian/Ubuntu, with or without systemd (containers, CI): installs slurm-wlm and
# munge with apt-get when missing (and the PMI libraries srun needs for Open MPI and Intel MPI,
# libpmix-dev and libpmi2-0: a warning where that fails), writes /etc/slurm/slurm.conf, creates a munge key, starts the
# daemons and waits (LOCAL_SLURM_WAIT_S, default 90 s) until every node is idle. Starting the same
# cluster again is harmless; starting a different one while one runs is refused. A start that
# fails removes what it made.
#
# Every node is declared with max(nproc, 4) CPUs (--cpus to change) and the default partition
# "debug" oversubscribes (OverSubscribe=FORCE:4): the tests run 3- and 4-task jobs and several
# array tasks at once on a 2-core CI machine. A second partition "urgent" on the same nodes has a
# higher PriorityTier and preempts "debug" jobs (PreemptMode=REQUEUE), for the preemption test.
# SlurmdParameters=config_overrides keeps slurmd from draining a node that has fewer cores than
# declared. No cgroup plugin is used (containers rarely allow them), so Slurm neither confines nor
# accounts memory; finished jobs stay visible to `scontrol show job` for a day (MinJobAge) and are
# logged by jobcomp/filetxt (read them with `sacct -c`: there is no slurmdbd for plain `sacct`).
# Logs: /var/log/hpcbsp-slurm/ (kept by `stop`).
set -euo pipefail

readonly MARK="# Written by hpcbsp slurm/local-cluster.sh"
readonly CONF_DIR=/etc/slurm
readonly CONF="$CONF_DIR/slurm.conf"
readonly STATE=/var/lib/hpcbsp-slurm
readonly LOGS=/var/log/hpcbsp-slurm
readonly RUN=/run/hpcbsp-slurm
readonly MUNGE_KEY=/etc/munge/munge.key
readonly WAIT_S=${LOCAL_SLURM_WAIT_S:-90}
# The emulated nodes (--nodes N >= 2).
readonly CLUSTER="$RUN/cluster"      # what runs: nodes=N subnet=A.B.C rate=RATE, one per line
readonly HOSTFILE="$RUN/hosts"       # for mpiexec -f
readonly RSH="$RUN/rsh"              # for mpiexec -launcher rsh -launcher-exec
readonly TASK_PROLOG="$RUN/task-prolog"
# Each MPI's TCP transport over a node's eth0, set by the rsh launcher and the task prolog unless
# the job chose a transport: MPICH's and Intel MPI's (libfabric's tcp provider; Intel MPI reads
# I_MPI_FABRICS, MPICH the netmod), and Open MPI's (ob1 and the tcp BTL). hpcbsp/util/flavours.py
# has the same (Flavour.cluster_tcp_env), which tests/test_cluster_mpis.py checks against these.
readonly CLUSTER_TCP_HYDRA="MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp FI_TCP_IFACE=eth0 I_MPI_FABRICS=shm:ofi"
readonly CLUSTER_TCP_OPENMPI="OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,sm,tcp OMPI_MCA_btl_tcp_if_include=eth0 PRTE_MCA_oob_tcp_if_include=eth0"
readonly UTS="$RUN/uts"              # one persistent UTS namespace (a hostname) per node
readonly BRIDGE=hpcbsp-br0
readonly NODE_PREFIX=hpcbsp-node     # node i: network namespace and hostname hpcbsp-node<i>
readonly LINK_PREFIX=hpcbsp-v        # node i's link: hpcbsp-v<i> here, eth0 in the node
readonly MAX_NODES=64
readonly HOSTS_FILE=${LOCAL_CLUSTER_HOSTS_FILE:-/etc/hosts}
STARTED_MUNGED=0  # set to 1 once this run started munged (a failed start stops it again)
readonly HOSTS_BEGIN="# BEGIN hpcbsp local-cluster nodes (slurm/local-cluster.sh stop removes this block)"
readonly HOSTS_END="# END hpcbsp local-cluster nodes"

say() { printf 'local-cluster: %s\n' "$*"; }
die() { printf 'local-cluster: error: %s\n' "$*" >&2; exit 1; }
warn() { printf 'local-cluster: warning: %s\n' "$*" >&2; }
bad_usage() { printf 'local-cluster: %s (see --help)\n' "$*" >&2; exit 2; }

usage() {
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
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

# The PMI libraries that srun needs for the MPIs other than MPICH (which carries its own PMI-2
# client): Slurm's PMIx plugin opens libpmix.so (Debian: libpmix-dev) for Open MPI 5 under
# `srun --mpi=pmix`; Intel MPI under `srun --mpi=pmi2` loads Slurm's libpmi2.so.0 (libpmi2-0).
readonly PMI_PACKAGES=(libpmix-dev libpmi2-0)

pmi_libraries_present() {
  compgen -G "/usr/lib/*/libpmix.so" >/dev/null && compgen -G "/usr/lib/*/libpmi2.so.0" >/dev/null
}

install_pmi_libraries() {
  if pmi_libraries_present; then
    return
  fi
  # Only srun with Open MPI or Intel MPI needs them: a failure here is a warning, not an error.
  if ! command -v apt-get >/dev/null; then
    warn "no libpmix.so or libpmi2.so.0 and no apt-get: srun --mpi=pmix (Open MPI) and Intel MPI under srun will not start; install ${PMI_PACKAGES[*]} or their equivalents by hand"
    return
  fi
  say "installing ${PMI_PACKAGES[*]} with apt-get (srun's PMI for Open MPI and Intel MPI)..."
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PMI_PACKAGES[@]}" \
      >/tmp/hpcbsp-slurm-pmi-apt.log 2>&1 || ! pmi_libraries_present; then
    warn "apt-get install ${PMI_PACKAGES[*]} failed (log: /tmp/hpcbsp-slurm-pmi-apt.log): srun --mpi=pmix (Open MPI) and Intel MPI under srun will not start; MPICH is not affected"
  fi
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
  STARTED_MUNGED=1
  for _ in $(seq 1 20); do munge_works && return; sleep 0.5; done
  die "munged started but munge -n | unmunge fails (see /var/log/munge/munged.log)"
}

# --- the emulated nodes (--nodes N >= 2) ---------------------------------------------------------

node_name() { printf '%s%d' "$NODE_PREFIX" "$1"; }
node_addr() { printf '%s.%d' "$1" $((10 + $2)); }   # subnet, index

# The nodes' names resolve everywhere through a marked block in /etc/hosts (one file for every
# namespace), as a cluster's nodes resolve each other: MPICH's hydra and Slurm's steps connect
# to a node by its name. hpcbsp-head is this machine on the bridge. The file is rewritten in
# place (it may be a bind mount).
hosts_block_remove() {
  [[ -f $HOSTS_FILE ]] && grep -qF "$HOSTS_BEGIN" "$HOSTS_FILE" || return 0
  local tmp
  tmp=$(mktemp)
  awk -v b="$HOSTS_BEGIN" -v e="$HOSTS_END" '$0 == b {skip = 1} !skip {print} $0 == e {skip = 0}' "$HOSTS_FILE" >"$tmp"
  cat "$tmp" >"$HOSTS_FILE"
  rm -f "$tmp"
}

hosts_block_add() {
  local nodes=$1 subnet=$2 i
  hosts_block_remove
  {
    echo "$HOSTS_BEGIN"
    echo "$subnet.1 hpcbsp-head"
    for ((i = 1; i <= nodes; i++)); do echo "$(node_addr "$subnet" "$i") $(node_name "$i")"; done
    echo "$HOSTS_END"
  } >>"$HOSTS_FILE"
}

# What the running cluster was started with (empty when none): cluster_get KEY
cluster_get() {
  [[ -f $CLUSTER ]] || return 0
  sed -n "s/^$1=//p" "$CLUSTER" | head -n 1
}

# A link that behaves like a link: tc tbf as a plain rate limiter, "burst B limit Q" for RATE.
# The bucket is small (1 ms of traffic, at least 8 KiB: a few packets leave at line rate, not a
# 10 ms burst), and the queue is deep (100 ms of traffic, at least 8 MiB), so a message of any
# size the programs send (MPI sends whole messages at once) waits in the queue instead of being
# dropped.  No "latency": it would cap the queue at that many milliseconds of traffic.  Why:
# with a bucket of 32 KiB or more and "latency 50ms", a burst overflowed the queue, packets were
# dropped, TCP's retransmission timeouts (200 ms and more) dominated the run, and the BSF
# prediction that matched measured T(K) within 4.7 % on plain limiters missed it by 45 % (issue
# 29).  netem is not available here; tbf is.  `status` shows each link's drops (tc -s qdisc).
tbf_params() {
  awk -v r="$1" 'BEGIN {
    n = r + 0; u = r; sub(/^[0-9.]+/, "", u)
    m = (u == "bit") ? 1 : (u == "kbit") ? 1e3 : (u == "mbit") ? 1e6 : (u == "gbit") ? 1e9 : 1e12
    bytes = n * m / 8
    b = bytes / 1000; if (b < 8192) b = 8192
    q = bytes / 10; if (q < 8388608) q = 8388608
    printf "burst %d limit %d", b, q }'
}

# Shape (or, with an empty RATE, unshape) node i's link in both directions: here, into the node;
# inside the node, out of it.
link_shape() {
  local i=$1 rate=$2 name link
  name=$(node_name "$i")
  link=$LINK_PREFIX$i
  if [[ -n $rate ]]; then
    # shellcheck disable=SC2046
    tc qdisc replace dev "$link" root tbf rate "$rate" $(tbf_params "$rate")
    # shellcheck disable=SC2046
    tc -n "$name" qdisc replace dev eth0 root tbf rate "$rate" $(tbf_params "$rate")
  else
    tc qdisc del dev "$link" root 2>/dev/null || true
    tc -n "$name" qdisc del dev eth0 root 2>/dev/null || true
  fi
}

# Packets a node's link dropped in both directions (its two qdiscs), from tc -s.
link_drops() {
  local i=$1
  { tc -s qdisc show dev "$LINK_PREFIX$i"; tc -n "$(node_name "$i")" -s qdisc show dev eth0; } 2>/dev/null \
    | awk '/dropped/ { for (f = 1; f < NF; f++) if ($f == "(dropped") { d += $(f + 1) + 0 } } END { printf "%d", d }'
}

# Refuse, before anything is made, a subnet or names that something else already uses.
check_network_free() {
  local nodes=$1 subnet=$2 i name used
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    die "a bridge $BRIDGE exists but no local cluster is recorded in $CLUSTER: remove it (ip link del $BRIDGE) or run '$0 stop'"
  fi
  used=$(ip -o -4 addr show | awk -v p="$subnet." 'index($4, p) == 1 {print $2 " has " $4; exit}')
  [[ -z $used ]] || die "the address range $subnet.0/24 is in use here ($used): choose another with --subnet A.B.C"
  used=$(ip -4 route show | awk -v p="$subnet." 'index($1, p) == 1 {print; exit}')
  [[ -z $used ]] || die "the address range $subnet.0/24 is routed here ($used): choose another with --subnet A.B.C"
  for ((i = 1; i <= nodes; i++)); do
    name=$(node_name "$i")
    [[ ! -e /var/run/netns/$name ]] || die "a network namespace $name exists already: remove it (ip netns del $name) or run '$0 stop'"
    ! ip link show "$LINK_PREFIX$i" >/dev/null 2>&1 || die "a link $LINK_PREFIX$i exists already: remove it (ip link del $LINK_PREFIX$i)"
  done
}

# Room in the kernel's neighbour (ARP) table.  The table is one for all network namespaces, and
# its hard limit (net.ipv4.neigh.default.gc_thresh3, 1024 by default) counts every namespace's
# entries: with N nodes that each talk to every other (MPI between all ranks, and the failure
# detector's heartbeats), N·(N − 1) entries; at 33 nodes 1,056.  Past the limit the kernel logs
# "neighbour: arp_cache: neighbor table overflow", packets to unresolved peers are dropped, the
# heartbeats stop, and the job is ended as if a node had died (seen at 33 nodes).  Raised here for
# the cluster's size, the old values kept in $CLUSTER and put back by `stop`.
neigh_room() {
  local nodes=$1 need k old
  need=$((2 * (nodes + 1) * (nodes + 1)))
  old=$(sysctl -n net.ipv4.neigh.default.gc_thresh1 net.ipv4.neigh.default.gc_thresh2 \
        net.ipv4.neigh.default.gc_thresh3 2>/dev/null | paste -sd, -) || return 0
  [[ -n $old ]] || return 0
  (( ${old##*,} >= 2 * need )) && return 0
  printf 'neigh=%s\n' "$old" >>"$CLUSTER"
  k=0
  for v in $((need / 4)) "$need" $((2 * need)); do
    k=$((k + 1))
    sysctl -qw "net.ipv4.neigh.default.gc_thresh$k=$v" || say "could not raise net.ipv4.neigh.default.gc_thresh$k to $v"
  done
}

neigh_restore() {
  local old k v
  old=$(cluster_get neigh)
  [[ -n $old ]] || return 0
  k=0
  for v in ${old//,/ }; do
    k=$((k + 1))
    sysctl -qw "net.ipv4.neigh.default.gc_thresh$k=$v" || true
  done
}

make_nodes() {
  local nodes=$1 subnet=$2 rate=$3 i name link
  mkdir -p "$RUN" "$UTS"
  printf 'nodes=%s\nsubnet=%s\nrate=%s\n' "$nodes" "$subnet" "$rate" >"$CLUSTER"
  neigh_room "$nodes"
  ip link add "$BRIDGE" type bridge
  ip addr add "$subnet.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for ((i = 1; i <= nodes; i++)); do
    name=$(node_name "$i")
    link=$LINK_PREFIX$i
    ip netns add "$name"
    ip link add "$link" type veth peer name eth0 netns "$name"
    ip link set "$link" master "$BRIDGE" up
    ip -n "$name" link set lo up
    ip -n "$name" addr add "$(node_addr "$subnet" "$i")/24" dev eth0
    ip -n "$name" link set eth0 up
    touch "$UTS/$name"
    unshare --uts="$UTS/$name" hostname "$name"
    [[ -z $rate ]] || link_shape "$i" "$rate"
  done
  hosts_block_add "$nodes" "$subnet"
  write_launchers "$nodes" "$subnet"
  say "made $nodes nodes $(node_name 1)..$(node_name "$nodes") on $BRIDGE ($subnet.0/24)${rate:+, links shaped to $rate}"
}

# The plain-MPI path (hostfile and an rsh launcher for MPICH's and Intel MPI's hydra and for Open
# MPI's PRRTE) and Slurm's task prolog, which both choose each MPI's TCP transport unless the
# caller chose one: between the namespaces an MPI would otherwise still pass messages through
# shared memory (MPICH's UCX netmod, Open MPI's UCX PML and libfabric's shm provider see one
# machine), and no byte would cross the links. For MPICH the OFI netmod with libfabric's tcp
# provider, not UCX_TLS=tcp: with UCX's tcp transport a flood of small messages (the FA-BSP apps'
# naive mode) stalled. The variables are hpcbsp/util/flavours.py's (Flavour.cluster_tcp_env;
# tests/test_cluster_mpis.py checks that these exports match it).
write_launchers() {
  local nodes=$1 subnet=$2 i
  : >"$HOSTFILE"
  for ((i = 1; i <= nodes; i++)); do printf '%s\n' "$(node_name "$i")" >>"$HOSTFILE"; done
  cat >"$RSH" <<EOF
#!/bin/sh
$MARK: the rsh launcher of the local cluster (MPICH's and Intel MPI's hydra, Open MPI's PRRTE).
#   mpiexec -f $HOSTFILE -launcher rsh -launcher-exec $RSH -n 4 python ...      (hydra)
#   mpiexec --hostfile $HOSTFILE --prtemca plm_ssh_agent $RSH -n 4 python ...   (Open MPI)
# Called as \`rsh [OPTIONS] HOST COMMAND...\`: it runs COMMAND through /bin/sh on HOST (inside that
# node's network and UTS namespaces), with each MPI's transport set to TCP over the node's eth0:
# MPICH's and Intel MPI's libfabric tcp provider unless the caller set UCX_TLS,
# MPIR_CVAR_CH4_NETMOD, FI_PROVIDER, I_MPI_FABRICS or I_MPI_OFI_PROVIDER; Open MPI's ob1 PML with
# the tcp BTL unless the caller set OMPI_MCA_pml or OMPI_MCA_btl
# (HPCBSP_CLUSTER_TRANSPORT=any leaves every MPI's choice alone). The nodes share this machine's
# cores, which hpcbsp's HPCBSP_WAIT=auto cannot see (each node shows it all of them): its ranks
# wait by yielding the core unless the caller set HPCBSP_WAIT.
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
[ -n "\${HPCBSP_WAIT:-}" ] || export HPCBSP_WAIT=yield
host=\${1:-}
[ \$# -gt 0 ] && shift
case \$host in
  $subnet.*) host=$NODE_PREFIX\$((\${host##*.} - 10)) ;;
esac
if [ -z "\$host" ] || [ ! -e "/var/run/netns/\$host" ] || [ ! -e "$UTS/\$host" ]; then
  echo "hpcbsp rsh: '\$host' is not a node of the local cluster (nodes: \$(tr '\n' ' ' < $HOSTFILE))" >&2
  exit 255
fi
if [ "\${HPCBSP_CLUSTER_TRANSPORT:-tcp}" = tcp ]; then
  if [ -z "\${UCX_TLS:-}\${MPIR_CVAR_CH4_NETMOD:-}\${FI_PROVIDER:-}\${I_MPI_FABRICS:-}\${I_MPI_OFI_PROVIDER:-}" ]; then
    export $CLUSTER_TCP_HYDRA
  fi
  if [ -z "\${OMPI_MCA_pml:-}\${OMPI_MCA_btl:-}" ]; then
    export $CLUSTER_TCP_OPENMPI
  fi
fi
# Hydra tells the proxy to call back to mpiexec's host by name (MPICH: --control-port HOST:PORT;
# Intel MPI: --upstream-host HOST). The nodes resolve each other (/etc/hosts), but this machine's
# own name means the loopback there: when mpiexec runs here, the proxy calls back to this
# machine's address on the bridge instead. (Open MPI's prted gets addresses, not a name.)
case \$* in
  *"--control-port $NODE_PREFIX"[0-9]*:* | *"--upstream-host $NODE_PREFIX"[0-9]*" "*) cmd=\$* ;;
  *) cmd=\$(printf '%s' "\$*" | sed -e "s/--control-port [^ :]*:/--control-port $subnet.1:/" \\
                                     -e "s/--upstream-host [^ ]*/--upstream-host $subnet.1/") ;;
esac
# Not exec: this shell stays outside the node, so that when every process on the node is killed
# (a lost node) it can say which node went, which hydra itself does not. It says so on
# mpiexec's own stderr (fd 3, opened through /proc from its parent, mpiexec), not on the pipe
# hydra reads this launcher's output from: hydra 5.0.2 may abort on the lost proxy's closed
# socket (an assertion in control_cb) before it forwards anything. It holds that stderr only
# while mpiexec lives: a node cut off keeps its processes, and this shell with them, and
# mpiexec's caller must still see the end of its output when mpiexec ends.
launcher=\$PPID
if [ -w "/proc/\$launcher/fd/2" ]; then exec 3>>"/proc/\$launcher/fd/2"; else exec 3>&2; fi
nsenter --net="/var/run/netns/\$host" --uts="$UTS/\$host" -- /bin/sh -c "\$cmd" 3>&- <&0 &
child=\$!
while kill -0 \$child 2>/dev/null; do
  # (mpiexec gone or a zombie: a zombie has no file descriptors left)
  if [ ! -e "/proc/\$launcher/fd/2" ]; then exec 3>&-; wait \$child; exit \$?; fi
  sleep 0.2
done
wait \$child
rc=\$?
if [ \$rc -gt 128 ]; then
  echo "[hpcbsp rsh] lost node \$host: the MPI processes there were killed (signal \$((rc - 128)))" >&3
fi
# Hydra looks for a launcher that failed once per wake-up on its output pipes (waitpid WNOHANG
# right after a pipe closes). This shell's pipes close as it exits, a moment before its status
# can be reaped: hydra may look too early, miss the failure, and then wait for the launchers
# of the other nodes, a frozen node's forever. So a failure keeps the pipes open half a second
# longer than this shell, and hydra wakes up when the status is there.
if [ \$rc -ne 0 ]; then sleep 0.5 3>&- </dev/null & fi
exit \$rc
EOF
  chmod 755 "$RSH"
  cat >"$TASK_PROLOG" <<EOF
#!/bin/sh
$MARK: Slurm's TaskProlog; "export NAME=VALUE" lines set the task's environment.
# hpcbsp's ranks wait by yielding the core unless the job set HPCBSP_WAIT (the nodes share this
# machine's cores), and each MPI's TCP transport between the emulated nodes, unless the job chose
# one (the same variables and conditions as the rsh launcher; HPCBSP_CLUSTER_TRANSPORT=any leaves
# every MPI's choice alone).
[ -n "\${HPCBSP_WAIT:-}" ] || echo "export HPCBSP_WAIT=yield"
[ "\${HPCBSP_CLUSTER_TRANSPORT:-tcp}" = tcp ] || exit 0
if [ -z "\${UCX_TLS:-}\${MPIR_CVAR_CH4_NETMOD:-}\${FI_PROVIDER:-}\${I_MPI_FABRICS:-}\${I_MPI_OFI_PROVIDER:-}" ]; then
  for v in $CLUSTER_TCP_HYDRA; do echo "export \$v"; done
fi
if [ -z "\${OMPI_MCA_pml:-}\${OMPI_MCA_btl:-}" ]; then
  for v in $CLUSTER_TCP_OPENMPI; do echo "export \$v"; done
fi
exit 0
EOF
  chmod 755 "$TASK_PROLOG"
}

# Remove every node, link and file of the emulated nodes (whatever part of them exists); kill
# what still runs inside a node (job steps, MPI ranks) first.
remove_nodes() {
  local name f pids
  for f in /var/run/netns/"$NODE_PREFIX"*; do
    [[ -e $f ]] || continue
    name=$(basename "$f")
    pids=$(ip netns pids "$name" 2>/dev/null | tr '\n' ' ')
    if [[ -n ${pids// /} ]]; then
      say "killing what still runs on $name (pids $pids)"
      # shellcheck disable=SC2086
      kill -9 $pids 2>/dev/null || true
    fi
  done
  for f in /var/run/netns/"$NODE_PREFIX"*; do
    [[ -e $f ]] || continue
    name=$(basename "$f")
    for _ in $(seq 1 20); do [[ -z $(ip netns pids "$name" 2>/dev/null) ]] && break; sleep 0.25; done
    ip netns del "$name" 2>/dev/null || say "could not remove network namespace $name"
  done
  for f in /sys/class/net/"$LINK_PREFIX"*; do
    [[ -e $f ]] || continue
    ip link del "$(basename "$f")" 2>/dev/null || true
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; fi
  if [[ -d $UTS ]]; then
    for f in "$UTS"/*; do
      [[ -e $f ]] || continue
      umount "$f" 2>/dev/null || true
      rm -f "$f"
    done
    rmdir "$UTS" 2>/dev/null || true
  fi
  hosts_block_remove
  neigh_restore
  rm -f "$CLUSTER" "$HOSTFILE" "$RSH" "$TASK_PROLOG"
  rm -rf "$STATE/d/$NODE_PREFIX"* "$STATE/tmp/$NODE_PREFIX"*
}

# --- slurm.conf ----------------------------------------------------------------------------------

write_conf() {
  local cpus=$1 nodes=$2 subnet=$3 host mem_mb ctld_addr node_lines node_set i
  host=$(hostname -s)
  # RealMemory a little under the total (shared by the nodes) so slurmd never finds less than
  # declared.
  mem_mb=$(awk -v n="$nodes" '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.9 / n}' /proc/meminfo)
  mkdir -p "$CONF_DIR" "$STATE/ctld" "$STATE/d" "$LOGS" "$RUN"
  local per_node_files task_prolog=""
  if ((nodes == 1)); then
    ctld_addr=127.0.0.1
    node_set=$host
    node_lines="NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN"
    per_node_files="SlurmdSpoolDir=$STATE/d
SlurmdPidFile=$RUN/slurmd.pid
SlurmdLogFile=$LOGS/slurmd.log"
  else
    ctld_addr=$subnet.1
    node_set="$NODE_PREFIX[1-$nodes]"
    node_lines=""
    for ((i = 1; i <= nodes; i++)); do
      node_lines+="NodeName=$(node_name "$i") NodeAddr=$(node_addr "$subnet" "$i") CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN"$'\n'
      mkdir -p "$STATE/d/$(node_name "$i")" "$STATE/tmp/$(node_name "$i")"
    done
    node_lines=${node_lines%$'\n'}
    # One slurmd per node on this machine: each has its own spool, pid and log file (%n: the node).
    # TmpFS per node too: Slurm's PMIx plugin (srun --mpi=pmix) makes its directory for a step
    # there, named by job and step only, and the nodes share this machine's /tmp.
    per_node_files="TmpFS=$STATE/tmp/%n
SlurmdSpoolDir=$STATE/d/%n
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmdLogFile=$LOGS/slurmd-%n.log"
    task_prolog="# Each MPI's TCP transport between the emulated nodes (see $TASK_PROLOG).
TaskProlog=$TASK_PROLOG"
  fi
  local tmp
  tmp=$(mktemp)
  cat >"$tmp" <<EOF
$MARK: edit that script, not this file.
ClusterName=hpcbsp-local
SlurmctldHost=$host($ctld_addr)
SlurmUser=root
# A requeued job may start again after cred_expire seconds (default 120): short, for quick tests.
AuthInfo=cred_expire=10
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# No default MPI plugin: an MPICH program is launched with \`srun --mpi=pmi2\`, an Open MPI 5 one
# with \`srun --mpi=pmix\` (Open MPI 5 has no PMI-2 client), as on most sites.
MpiDefault=none
# Containers rarely allow cgroups: track processes through /proc and bind no tasks.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
$task_prolog
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
# A node that stopped answering is back in service once its slurmd registers again; one that an
# administrator set DOWN (scontrol update nodename=N state=down) stays down until state=resume.
ReturnToService=1
# Keep finished jobs (and their state and exit code) visible to \`scontrol show job\` for a day.
MinJobAge=86400
KillWait=5
InactiveLimit=0
SlurmctldTimeout=60
SlurmdTimeout=60
StateSaveLocation=$STATE/ctld
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmctldLogFile=$LOGS/slurmctld.log
$per_node_files
$node_lines
# Preemption as many sites run it: a job of the higher tier ("urgent") that needs resources held
# by "debug" jobs requeues them (those submitted with --requeue; the others are cancelled). The
# preempted job gets SIGTERM, then SIGKILL after GraceTime + KillWait seconds.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=debug Nodes=$node_set Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4 PriorityTier=1 GraceTime=5
PartitionName=urgent Nodes=$node_set MaxTime=INFINITE State=UP PriorityTier=10
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

# A pid file names a live daemon only if that pid runs the program named (by default like the
# file): after a reboot or a container restart the pid may belong to anything.
pid_alive() {
  local file=$1 name=${2:-} pid
  [[ -n $name ]] || name=$(basename "$file" .pid)
  [[ -s $file ]] || return 1
  pid=$(cat "$file")
  [[ $pid =~ ^[0-9]+$ ]] && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] || return 1
  # A killed daemon stays a zombie until reaped (slowly, where PID 1 is no real init).
  [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]
}

ctld_responds() { timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; }

# "NODE STATE", one line per node, as sinfo sees them.
node_states() { timeout 10 sinfo -h -N -o '%N %t' 2>/dev/null | sort -u; }

stop_pidfile() {
  local name=$1 file=$2 pid
  pid_alive "$file" "$name" || { rm -f "$file"; return 0; }
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

# slurmd pid files: slurmd.pid on a one-node cluster, slurmd-<node>.pid per emulated node.
slurmd_pidfiles() {
  local f
  for f in "$RUN"/slurmd.pid "$RUN"/slurmd-*.pid; do
    if [[ -e $f ]]; then echo "$f"; fi
  done
}

start_ctld() {
  if pid_alive "$RUN/slurmctld.pid"; then
    say "slurmctld is running (pid $(cat "$RUN/slurmctld.pid"))"
  else
    say "starting slurmctld"
    # -c: start from a clean state, so jobs of an earlier run (a test's requeued job) never resume.
    timeout 60 slurmctld -c -f "$CONF" || die "slurmctld failed to start (log: $LOGS/slurmctld.log)"
  fi
  for _ in $(seq 1 40); do ctld_responds && break; sleep 0.5; done
  ctld_responds || { tail -n 20 "$LOGS/slurmctld.log" >&2; die "slurmctld does not answer scontrol ping"; }
}

start_slurmds() {
  local nodes=$1 i name
  if ((nodes == 1)); then
    name=$(hostname -s)
    if pid_alive "$RUN/slurmd.pid"; then
      say "slurmd is running (pid $(cat "$RUN/slurmd.pid"))"
    else
      say "starting slurmd for node $name"
      timeout 60 slurmd -f "$CONF" -N "$name" || die "slurmd failed to start (log: $LOGS/slurmd.log)"
    fi
    return
  fi
  for ((i = 1; i <= nodes; i++)); do
    name=$(node_name "$i")
    if pid_alive "$RUN/slurmd-$name.pid" slurmd; then
      say "slurmd of $name is running (pid $(cat "$RUN/slurmd-$name.pid"))"
      continue
    fi
    say "starting slurmd for node $name"
    # nsenter, not `ip netns exec`: that remounts /sys, which hides the cgroup mounts slurmd reads.
    timeout 60 nsenter --net="/var/run/netns/$name" --uts="$UTS/$name" -- slurmd -f "$CONF" -N "$name" \
      || die "slurmd of $name failed to start (log: $LOGS/slurmd-$name.log)"
  done
}

wait_idle() {
  local expected=$1 deadline resumed=0 states="" usable=0 node state
  deadline=$((SECONDS + WAIT_S))
  say "waiting (up to ${WAIT_S}s) for $expected node(s) to be idle..."
  while ((SECONDS < deadline)); do
    states=$(node_states)
    usable=0
    while read -r node state; do
      [[ -n $node ]] || continue
      case $state in
        idle|mix|alloc) usable=$((usable + 1)) ;;
        down*|drain*|drng*|fail*)
          if [[ $resumed -eq 0 ]]; then
            say "node $node is $state; resuming it"
            scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true
          fi ;;
      esac
    done <<<"$states"
    [[ -n $states ]] && resumed=1
    if ((usable == expected)); then
      say "$expected node(s) idle: Slurm is ready (try: srun -N $expected -n $expected hostname)"
      return 0
    fi
    sleep 1
  done
  printf '%s\n' "$states" >&2
  tail -n 20 "$LOGS"/slurmd*.log >&2 || true
  die "only $usable of $expected node(s) are usable after ${WAIT_S}s (see above)"
}

stop_slurm() {
  local f
  while read -r f; do
    if [[ -n $f ]]; then stop_pidfile slurmd "$f"; fi
  done < <(slurmd_pidfiles)
  stop_pidfile slurmctld "$RUN/slurmctld.pid"
}

# --- commands ------------------------------------------------------------------------------------

rollback() {
  say "start failed: removing what it made"
  stop_slurm >/dev/null 2>&1 || true
  remove_nodes >/dev/null 2>&1 || true
  if [[ $STARTED_MUNGED -eq 1 ]]; then
    stop_pidfile munged /run/munge/munged.pid >/dev/null 2>&1 || true
    rm -f "$RUN/started-munged"
  fi
}

cmd_start() {
  local cpus="" force=0 nodes=1 rate="" subnet=10.213.0
  while [[ $# -gt 0 ]]; do
    case $1 in
      --cpus|--nodes|--link-rate|--subnet)
        [[ $# -ge 2 ]] || bad_usage "$1 needs a value"
        set -- "$1=$2" "${@:3}" ;;
      --cpus=*) cpus=${1#*=}; [[ $cpus =~ ^[1-9][0-9]*$ ]] || bad_usage "--cpus needs a positive integer, not '$cpus'"; shift ;;
      --nodes=*) nodes=${1#*=}
        [[ $nodes =~ ^-?[0-9]+$ ]] || bad_usage "--nodes needs a whole number of nodes, not '$nodes'"
        ((nodes >= 1)) || bad_usage "--nodes must be at least 1, not $nodes"
        ((nodes <= MAX_NODES)) || bad_usage "--nodes must be at most $MAX_NODES, not $nodes"
        shift ;;
      --link-rate=*) rate=${1#*=}
        [[ $rate =~ ^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit|tbit)$ ]] || bad_usage "--link-rate needs a rate like 1gbit, 100mbit or 500kbit, not '$rate'"
        shift ;;
      --subnet=*) subnet=${1#*=}
        [[ $subnet =~ ^(10|172|192)\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || bad_usage "--subnet needs the first three parts of a private /24, like 10.213.0, not '$subnet'"
        shift ;;
      --force) force=1; shift ;;
      *) bad_usage "unknown option for start: $1" ;;
    esac
  done
  ((nodes >= 2)) || [[ -z $rate ]] || bad_usage "--link-rate shapes the links between emulated nodes: it needs --nodes 2 or more"
  need_root start
  if [[ -z $cpus ]]; then
    cpus=$(nproc)
    ((cpus < 4)) && cpus=4
  fi
  if [[ -f $CONF ]] && ! grep -qF "$MARK" "$CONF" && [[ $force -eq 0 ]]; then
    die "$CONF exists and was not written by this script; refusing to replace it (--force replaces it)"
  fi
  # One cluster at a time: the same one again is harmless, another is refused.
  local running=0 have want
  if [[ -f $CLUSTER ]]; then
    running=1
    have="$(cluster_get nodes) nodes on $(cluster_get subnet).0/24"
    if [[ -n $(cluster_get rate) ]]; then have+=", links at $(cluster_get rate)"; fi
  elif pid_alive "$RUN/slurmctld.pid"; then
    running=1
    have="1 node"
  fi
  if ((nodes == 1)); then want="1 node"; else want="$nodes nodes on $subnet.0/24${rate:+, links at $rate}"; fi
  if ((running)) && [[ $want != "$have" ]]; then
    die "a local cluster of $have already runs; stop it first ($0 stop), then start $want"
  fi
  install_packages
  install_pmi_libraries
  if ((nodes > 1)); then
    local tool
    for tool in ip tc nsenter unshare; do command -v "$tool" >/dev/null || die "$tool not found: emulated nodes need iproute2 and util-linux"; done
    if [[ -f $CLUSTER ]]; then
      say "$nodes nodes exist already ($(node_name 1)..$(node_name "$nodes"))"
    else
      check_network_free "$nodes" "$subnet"
      trap rollback EXIT
      make_nodes "$nodes" "$subnet" "$rate"
    fi
  fi
  start_munge
  local changed
  changed=$(write_conf "$cpus" "$nodes" "$subnet")
  if [[ $changed == changed ]]; then
    say "wrote $CONF ($nodes node(s), $cpus CPUs each, oversubscribed)"
    if pid_alive "$RUN/slurmctld.pid" || [[ -n $(slurmd_pidfiles) ]]; then
      say "configuration changed: restarting the daemons"
      stop_slurm
    fi
  else
    say "$CONF is up to date"
  fi
  start_ctld
  start_slurmds "$nodes"
  wait_idle "$nodes"
  trap - EXIT
  if ((nodes > 1)); then
    say "plain MPI across the nodes: mpiexec -f $HOSTFILE -launcher rsh -launcher-exec $RSH -n $nodes ... (MPICH, Intel MPI)"
    say "  or mpiexec --hostfile $HOSTFILE --prtemca plm_ssh_agent $RSH -n $nodes ... (Open MPI)"
  fi
}

cmd_shape() {
  local rate="" given=0 nodes i
  while [[ $# -gt 0 ]]; do
    case $1 in
      --link-rate) [[ $# -ge 2 ]] || bad_usage "--link-rate needs a value"; set -- "--link-rate=$2" "${@:3}" ;;
      --link-rate=*) rate=${1#*=}; given=1
        [[ $rate == none || $rate =~ ^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit|tbit)$ ]] \
          || bad_usage "--link-rate needs a rate like 1gbit, 100mbit or 500kbit, or none, not '$rate'"
        shift ;;
      *) bad_usage "unknown option for shape: $1" ;;
    esac
  done
  ((given)) || bad_usage "shape needs --link-rate RATE (or none)"
  [[ $rate == none ]] && rate=""
  need_root shape
  [[ -f $CLUSTER ]] || die "no emulated nodes run: start them first ($0 start --nodes N)"
  nodes=$(cluster_get nodes)
  [[ -n $nodes ]] || die "no emulated nodes run: start them first ($0 start --nodes N)"
  for ((i = 1; i <= nodes; i++)); do link_shape "$i" "$rate"; done
  sed -i "s/^rate=.*/rate=$rate/" "$CLUSTER"
  if [[ -n $rate ]]; then say "links of $nodes nodes shaped to $rate"; else say "links of $nodes nodes unshaped"; fi
}

nothing_runs() {
  [[ ! -f $CLUSTER ]] && ! pid_alive "$RUN/slurmctld.pid" && [[ -z $(slurmd_pidfiles) ]] \
    && [[ ! -e $RUN/started-munged ]] && ! ip link show "$BRIDGE" >/dev/null 2>&1 \
    && ! compgen -G "/var/run/netns/$NODE_PREFIX*" >/dev/null \
    && ! grep -qF "$HOSTS_BEGIN" "$HOSTS_FILE" 2>/dev/null
}

cmd_stop() {
  need_root stop
  if nothing_runs; then
    say "nothing to stop: no local cluster runs"
    return 0
  fi
  stop_slurm
  remove_nodes
  if [[ -e $RUN/started-munged ]]; then
    stop_pidfile munged /run/munge/munged.pid
    rm -f "$RUN/started-munged"
  fi
  say "stopped"
}

cmd_status() {
  local rc=0 name nodes subnet rate i link d bytes
  nodes=$(cluster_get nodes)
  if pid_alive "$RUN/slurmctld.pid"; then say "slurmctld: running (pid $(cat "$RUN/slurmctld.pid"))"; else say "slurmctld: not running"; rc=1; fi
  if [[ -n $nodes ]]; then
    subnet=$(cluster_get subnet)
    rate=$(cluster_get rate)
    say "nodes: $nodes emulated hosts on bridge $BRIDGE ($subnet.0/24), links ${rate:+shaped to }${rate:-unshaped}"
    for ((i = 1; i <= nodes; i++)); do
      name=$(node_name "$i")
      link=$LINK_PREFIX$i
      d="slurmd not running"
      bytes="no link"
      if pid_alive "$RUN/slurmd-$name.pid" slurmd; then d="slurmd pid $(cat "$RUN/slurmd-$name.pid")"; else rc=1; fi
      if [[ -r /sys/class/net/$link/statistics/rx_bytes ]]; then
        bytes="link $link: $(cat "/sys/class/net/$link/statistics/rx_bytes") bytes sent by the node, $(cat "/sys/class/net/$link/statistics/tx_bytes") received"
        [[ -z $rate ]] || bytes+=", $(link_drops "$i") packets dropped by the shaping"
      else
        rc=1
      fi
      say "  $name $(node_addr "$subnet" "$i"): $d; $bytes"
    done
    say "plain MPI: mpiexec -f $HOSTFILE -launcher rsh -launcher-exec $RSH -n $nodes python ..."
  elif pid_alive "$RUN/slurmd.pid"; then
    say "slurmd: running (pid $(cat "$RUN/slurmd.pid"))"
  else
    say "slurmd: not running"
    rc=1
  fi
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
    stop) [[ $# -eq 0 ]] || bad_usage "stop takes no options"; cmd_stop ;;
    status) [[ $# -eq 0 ]] || bad_usage "status takes no options"; cmd_status ;;
    shape) cmd_shape "$@" ;;
    -h|--help|help) usage ;;
    "") usage >&2; exit 2 ;;
    *) bad_usage "unknown command '$cmd': start, stop, status or shape" ;;
  esac
}

main "$@"
