#!/usr/bin/env bash
# Local Slurm cluster "arena" on this one machine (Debian 12, run as root, no systemd needed):
#   munged + MariaDB + slurmdbd + slurmctld + 8 x slurmd (multiple-slurmd on localhost),
#   8 nodes x 8 fake GPUs = 64 GPUs, accounting with GPU-minute budgets, QOS limits and
#   QOS preemption (requeue).
#
# Idempotent: installs only missing packages, (re)writes the configs, starts only the daemons
# that are not running, converges the cluster-wide accounting objects (QOS normal/preemptible,
# account agents) and ends with a smoke job. Every daemon it starts itself is written to
# $STARTED ("name pid" per line) so that stop.sh stops exactly those and nothing else
# (a MariaDB that was already running is used, never recorded, never stopped).
#
# Usage: sudo infra/slurm/setup.sh        (see infra/slurm/README.md)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
ETC=$REPO/var/slurm/etc                 # generated config (var/ is gitignored)
STATE_DIR=/run/arena-slurm              # tmpfs: forgotten at reboot, like the daemons
STARTED=$STATE_DIR/started              # "name pid" for each daemon this script started

CLUSTER=arena
NNODES=8
GPUS_PER_NODE=8
CPUS_PER_NODE=8
MEM_PER_NODE=64000                      # MB, advertised (config_overrides): 8000 per GPU
# TRES billing weights: a node's CPUs, or its memory, cost what its GPUs cost.
BILLING_PER_CPU=$(awk -v g=$GPUS_PER_NODE -v c=$CPUS_PER_NODE 'BEGIN { printf "%g", g / c }')
BILLING_PER_MB=$(awk -v g=$GPUS_PER_NODE -v m=$MEM_PER_NODE 'BEGIN { printf "%g", g / m }')
BASEPORT=17000                          # slurmd of node nK listens on BASEPORT+K
FAKEGPU_DIR=/var/lib/slurm-fakegpu
DB_NAME=slurm_acct_db
DB_USER=slurm
# The DB password is generated once per install and kept root-only here; it reaches slurmdbd
# only through /etc/slurm/slurmdbd.conf (0600, slurm). The DB user exists for the socket only.
DB_SECRET=/etc/slurm/slurmdbd.pass
PACKAGES=(munge slurm-wlm slurmctld slurmd slurm-client slurmdbd mariadb-server libslurm-dev gcc)
SPANK_DIR=/usr/local/lib/arena-slurm     # arena_jobtmp.so, built here from infra/slurm/

T0=$SECONDS
log() { printf '[slurm-setup %(%T)T +%3ds] %s\n' -1 "$((SECONDS - T0))" "$*"; }
die() { log "ERROR: $*"; exit 1; }

wait_for() {  # wait_for SECONDS WHAT COMMAND...: poll COMMAND every 0.2 s until it succeeds
  local seconds=$1 what=$2; shift 2
  for _ in $(seq 1 $((seconds * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  die "timed out after ${seconds}s waiting for $what"
}

# ---------------------------------------------------------------- bookkeeping of started daemons
running_pid() {  # running_pid PIDFILE COMM: print the PID from PIDFILE if it is a live COMM process
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] && echo "$pid"
}
forget() {  # forget NAME: drop NAME's line from the state file
  [ -f "$STARTED" ] || return 0
  sed -i "/^$1 /d" "$STARTED"
}
note_started() {  # note_started NAME PIDFILE COMM: record the daemon we just started
  local name=$1 pidfile=$2 comm=$3 pid
  wait_for 30 "$name pid file" running_pid "$pidfile" "$comm"
  pid=$(running_pid "$pidfile" "$comm")
  forget "$name"
  echo "$name $pid" >> "$STARTED"
  log "started $name (pid $pid)"
}
prune_state() {  # lines whose process is gone (crash, reboot, PID reuse) are stale
  [ -f "$STARTED" ] || return 0
  local name pid keep=""
  while read -r name pid; do
    if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "${name%%-n*}" ]; then keep+="$name $pid"$'\n'; fi
  done < "$STARTED"
  printf '%s' "$keep" > "$STARTED"
}
recorded_pid() { awk -v n="$1" '$1 == n { print $2 }' "$STARTED" 2>/dev/null; }

# ---------------------------------------------------------------- 1. packages, dirs, fake GPUs
install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  log "packages ok: slurm $(dpkg-query -W -f='${Version}' slurmctld)"
}

prepare_dirs() {
  mkdir -p "$STATE_DIR" && chmod 700 "$STATE_DIR"   # conf.sha1 covers the DB password
  mkdir -p /run/munge /run/slurm /run/mysqld /var/spool/slurmctld /var/log/slurm "$ETC"
  touch "$STARTED"
  chown munge:munge /run/munge && chmod 755 /run/munge
  chown slurm:slurm /run/slurm /var/spool/slurmctld /var/log/slurm
  chown mysql:mysql /run/mysqld
  local n g
  for n in $(seq 1 $NNODES); do mkdir -p "/var/spool/slurmd/n$n"; done
  # gres/gpu needs one device file per GPU; a char device with /dev/null's numbers will do
  mkdir -p "$FAKEGPU_DIR"
  for g in $(seq 0 $((GPUS_PER_NODE - 1))); do
    [ -c "$FAKEGPU_DIR/gpu$g" ] || mknod -m 666 "$FAKEGPU_DIR/gpu$g" c 1 3
  done
}

# ---------------------------------------------------------------- 2. config files
write_configs() {
  cat > "$ETC/slurm.conf" <<EOF
# Generated by infra/slurm/setup.sh -- edit the script, not this file.
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmctldPort=6817
SlurmUser=slurm
AuthType=auth/munge
# A requeued (preempted) job may start again only after cred_expire seconds (default 120).
AuthInfo=cred_expire=10
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# Job processes are tracked in cgroups (v1 here; every slurmd gets its own slurm_nK subtree),
# so nothing a job starts, setsid or double fork included, outlives it. See cgroup.conf below
# for what is and is not constrained.
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
# An agent's job gets /tmp and /var/tmp on the agent's quota volume (agents/sandbox_storage.py)
# and a private /dev/shm: the SPANK plugin arena_jobtmp (plugstack.conf.d/arena.conf, built from
# arena_jobtmp.c). epilog.sh deletes the job's folders after it. (job_container/tmpfs is not
# used: in 22.05 its /tmp cannot be put in a quota, and it hides the host's /tmp from all jobs.)
Epilog=/etc/slurm/arena-epilog.sh
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5
SchedulerType=sched/backfill
# Fast turnaround on this tiny cluster (defaults: 3 / 30 / 60 s). batch_sched_delay=0 starts an
# sbatch job in ~0.5 s instead of ~2.5 s; sched_interval=5 restarts a requeued (preempted) job
# ~5 s after it becomes eligible instead of up to 60 s (backfill skips cycles when nothing
# changed, so only the main loop notices that a job's BeginTime has passed).
SchedulerParameters=batch_sched_delay=0,bf_interval=5,sched_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Without a default, a job would be given the whole node's memory. A CPU's share by default,
# so that a job that asks nothing bills exactly its GPUs; jobs are held to it (cgroup.conf).
DefMemPerCPU=$((MEM_PER_NODE / CPUS_PER_NODE))
# More memory than a CPU's share of the node takes more CPUs (slurmctld raises the job's CPU
# count), so memory is billed through CPUs and billing stays a whole number of GPUs.
MaxMemPerCPU=$((MEM_PER_NODE / CPUS_PER_NODE))
# Advertise the CPUs/memory below, not this 2-core machine's.
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
# no mail on this machine (the default /bin/mail is missing and logs an error)
MailProg=/bin/true
InactiveLimit=0
KillWait=5
# Finished jobs stay visible to scontrol/squeue for 5 minutes.
MinJobAge=300
Waittime=0
SlurmdTimeout=60
GresTypes=gpu
# ---- accounting and limits
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageTRES=gres/gpu
AccountingStorageEnforce=associations,limits,qos,safe
# GrpTRESMins is checked against the usage priority/multifactor accumulates;
# HalfLife=0 + ResetPeriod=NONE make it a plain, never-decaying GPU-minute counter.
PriorityType=priority/multifactor
PriorityDecayHalfLife=0
PriorityUsageResetPeriod=NONE
PriorityCalcPeriod=1
# Billing is the largest of a job's weighted TRES (see TRESBillingWeights), not their sum.
PriorityFlags=MAX_TRES
PriorityWeightQOS=10000
PriorityWeightFairshare=1000
PriorityWeightAge=100
# ---- preemption: QOS normal preempts QOS preemptible, whose jobs are requeued
PreemptType=preempt/qos
PreemptMode=REQUEUE
JobRequeue=1
# ---- $NNODES slurmd daemons on this host, one port each
NodeName=n[1-$NNODES] NodeHostname=localhost Port=[$((BASEPORT + 1))-$((BASEPORT + NNODES))] CPUs=$CPUS_PER_NODE RealMemory=$MEM_PER_NODE Gres=gpu:$GPUS_PER_NODE State=UNKNOWN
# Billing in GPU-equivalents: a GPU is 1, and a node's CPUs or its memory are worth its GPUs
# (one CPU = $GPUS_PER_NODE/$CPUS_PER_NODE GPU, one MB = $GPUS_PER_NODE/$MEM_PER_NODE GPU). With MAX_TRES a job pays for
# whichever it holds most of: GPUs, or the GPUs its CPUs or memory strand. Budgets
# (GrpTRESMins=billing=...) and RawUsage are then GPU-equivalent minutes and seconds.
PartitionName=gpu Nodes=n[1-$NNODES] Default=YES MaxTime=INFINITE State=UP TRESBillingWeights=CPU=$BILLING_PER_CPU,Mem=$BILLING_PER_MB,GRES/gpu=1
EOF

  # cgroup v1 (this machine's hierarchy): every job's processes are tracked, and held to the
  # memory it was given (what it asked for, or a CPU's share: DefMemPerCPU), past which the
  # kernel kills it (OUT_OF_MEMORY). Not constrained: swap (this machine has none to give),
  # cores (config_overrides advertises 8 CPUs per node on a 2-core host, so there are no 8
  # cores to pin) and devices (the fake GPUs are /dev/null's device numbers: fencing them would
  # take /dev/null from every job). See README.md, "Processes and memory".
  cat > "$ETC/cgroup.conf" <<EOF
# Generated by infra/slurm/setup.sh.
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainRAMSpace=yes
ConstrainSwapSpace=no
ConstrainCores=no
ConstrainDevices=no
EOF

  gcc -shared -fPIC -O2 -Wall -Werror -o "$ETC/arena_jobtmp.so" "$HERE/arena_jobtmp.c"
  # required: an agent's job whose /tmp cannot be put on its quota volume does not start
  echo "required $SPANK_DIR/arena_jobtmp.so" > "$ETC/plugstack-arena.conf"
  install -m 755 "$HERE/epilog.sh" "$ETC/arena-epilog.sh"

  cat > "$ETC/gres.conf" <<EOF
# Generated by infra/slurm/setup.sh. Fake GPUs: no NVML here, one device file per GPU.
AutoDetect=off
NodeName=n[1-$NNODES] Name=gpu File=$FAKEGPU_DIR/gpu[0-$((GPUS_PER_NODE - 1))]
EOF

  # This copy has no password: StoragePass is added to the /etc copy only.
  cat > "$ETC/slurmdbd.conf" <<EOF
# Generated by infra/slurm/setup.sh.
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=slurm
DebugLevel=info
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurm/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=$DB_USER
StorageLoc=$DB_NAME
EOF
  chmod 600 "$ETC/slurmdbd.conf"

  # Copies, not links: clients run as other Unix users must be able to read slurm.conf
  # without traversing the repo, and slurmdbd insists on a 0600 file owned by SlurmUser.
  install -m 644 "$ETC/slurm.conf" /etc/slurm/slurm.conf
  install -m 644 "$ETC/gres.conf" /etc/slurm/gres.conf
  install -m 644 "$ETC/cgroup.conf" /etc/slurm/cgroup.conf
  install -d -m 755 "$SPANK_DIR" /etc/slurm/plugstack.conf.d
  install -m 755 "$ETC/arena_jobtmp.so" "$SPANK_DIR/arena_jobtmp.so"
  install -m 644 "$ETC/plugstack-arena.conf" /etc/slurm/plugstack.conf.d/arena.conf
  grep -qs 'plugstack.conf.d' /etc/slurm/plugstack.conf ||
    echo 'include /etc/slurm/plugstack.conf.d/*.conf' >> /etc/slurm/plugstack.conf
  install -m 755 "$ETC/arena-epilog.sh" /etc/slurm/arena-epilog.sh
  local password
  password=$(db_password)
  (
    umask 077
    { cat "$ETC/slurmdbd.conf"; printf 'StoragePass=%s\n' "$password"; } > /etc/slurm/slurmdbd.conf.new
  )
  chown slurm:slurm /etc/slurm/slurmdbd.conf.new
  mv -f /etc/slurm/slurmdbd.conf.new /etc/slurm/slurmdbd.conf
}

db_password() {  # print the install's DB password, generating it the first time (root-only file)
  if [ ! -s "$DB_SECRET" ]; then
    ( umask 077; od -An -tx1 -N24 /dev/urandom | tr -d ' \n' > "$DB_SECRET.new" )
    mv -f "$DB_SECRET.new" "$DB_SECRET"
  fi
  chown root:root "$DB_SECRET" && chmod 600 "$DB_SECRET"
  cat "$DB_SECRET"
}

config_changed() {  # true if the configs differ from those the running daemons were started with
  local new old
  # the /etc copy of slurmdbd.conf: a new DB password must restart slurmdbd too
  new=$(cat "$ETC"/* /etc/slurm/slurmdbd.conf | sha1sum | cut -d' ' -f1)
  old=$(cat "$STATE_DIR/conf.sha1" 2>/dev/null || true)
  echo "$new" > "$STATE_DIR/conf.sha1"
  [ -n "$old" ] && [ "$old" != "$new" ]
}

is_ours() {  # is_ours NAME PID: the PID is still that daemon (guards against PID reuse)
  [ -n "$2" ] && [ "$(cat "/proc/$2/comm" 2>/dev/null)" = "${1%%-n*}" ]
}
STOP_WAIT_STEPS=100                     # x 0.2 s: how long a TERMed daemon gets before KILL

restart_changed_daemons() {
  # Only daemons we started can be restarted (below, by start_*); daemons someone else runs
  # get "scontrol reconfigure" in main. TERM them all at once, then wait: one at a time is slow.
  # Every signal goes to a PID only while it is still the daemon we recorded: one that exited
  # may have been reused by an unrelated process.
  local name pid i pids=() names=()
  for name in $(awk '$1 ~ /^slurm/ { print $1 }' "$STARTED"); do
    pid=$(recorded_pid "$name")
    if is_ours "$name" "$pid" && kill "$pid" 2>/dev/null; then pids+=("$pid"); names+=("$name"); fi
    forget "$name"
  done
  ((${#pids[@]})) || return 0
  log "config changed: stopping the slurm daemons we started (${pids[*]}) to restart them"
  for i in "${!pids[@]}"; do
    for _ in $(seq 1 "$STOP_WAIT_STEPS"); do is_ours "${names[$i]}" "${pids[$i]}" || break; sleep 0.2; done
    if is_ours "${names[$i]}" "${pids[$i]}"; then
      log "${names[$i]} (pid ${pids[$i]}) did not exit: KILL"
      kill -9 "${pids[$i]}" 2>/dev/null || true
    fi
  done
}

# ---------------------------------------------------------------- 3. munge, MariaDB
munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
start_munge() {
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key && chmod 600 /etc/munge/munge.key
  fi
  munge_ok && return 0
  runuser -u munge -- /usr/sbin/munged
  wait_for 10 munged munge_ok
  note_started munged /run/munge/munged.pid munged
}

start_mariadb() {
  if mysqladmin ping >/dev/null 2>&1; then log "MariaDB already running: using it"; return 0; fi
  if [ ! -d /var/lib/mysql/mysql ]; then
    log "initialising the MariaDB datadir"
    mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
  fi
  # slurmdbd's recommended InnoDB settings, as options of our own instance only
  # (a MariaDB that someone else runs keeps its own configuration).
  start-stop-daemon --start --background --make-pidfile --pidfile "$STATE_DIR/mariadbd.pid" \
    --exec /usr/sbin/mariadbd -- --user=mysql \
    --innodb-buffer-pool-size=256M --innodb-lock-wait-timeout=900
  wait_for 60 MariaDB mysqladmin ping
  note_started mariadbd "$STATE_DIR/mariadbd.pid" mariadbd
}

ensure_database() {
  # ALTER USER each time, so an install that still has the old fixed password (or any other)
  # converges to its own secret. Only '$DB_USER'@'localhost', the unix socket (slurmdbd uses
  # StorageHost=localhost): with skip-name-resolve, '$DB_USER'@'127.0.0.1' is a separate TCP
  # account, which earlier installs created and which is dropped. The SQL goes through stdin,
  # never argv, so the password never shows in /proc/*/cmdline.
  local password
  password=$(db_password)
  printf '%s' "CREATE DATABASE IF NOT EXISTS $DB_NAME;
    CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$password';
    ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$password';
    GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'localhost';
    DROP USER IF EXISTS '$DB_USER'@'127.0.0.1';" | mysql
}

# ---------------------------------------------------------------- 4. slurm daemons
slurmdbd_ok() { sacctmgr -n -P show cluster format=cluster >/dev/null 2>&1; }
start_slurmdbd() {
  if ! slurmdbd_ok; then
    # one may be alive but still starting: wait for it rather than start a second one
    if ! running_pid /run/slurm/slurmdbd.pid slurmdbd >/dev/null; then
      slurmdbd
      note_started slurmdbd /run/slurm/slurmdbd.pid slurmdbd
    fi
    wait_for 60 slurmdbd slurmdbd_ok
  fi
  # slurmctld registers with slurmdbd under its ClusterName, which must exist first
  sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER" ||
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
}

slurmctld_ok() { scontrol ping 2>/dev/null | grep -q 'is UP'; }
start_slurmctld() {
  if slurmctld_ok; then return 0; fi
  if ! running_pid /run/slurm/slurmctld.pid slurmctld >/dev/null; then
    slurmctld
    note_started slurmctld /run/slurm/slurmctld.pid slurmctld
  fi
  wait_for 60 slurmctld slurmctld_ok
}

start_slurmds() {
  local n
  for n in $(seq 1 $NNODES); do
    running_pid "/run/slurm/slurmd-n$n.pid" slurmd >/dev/null && continue
    slurmd -N "n$n"
    note_started "slurmd-n$n" "/run/slurm/slurmd-n$n.pid" slurmd
  done
}

nodes_ready() {  # all nodes up and schedulable (idle, mixed or allocated)
  [ "$(sinfo -h -N -t idle,mix,alloc -o %N | sort -u | wc -l)" -eq $NNODES ]
}
wait_nodes() {
  local i
  for i in $(seq 1 150); do nodes_ready && return 0; sleep 0.2; done
  # e.g. left drained or down by an earlier run with another config
  log "nodes not ready: $(sinfo -h -N -o '%N=%t' | sort -u | tr '\n' ' '); resuming them"
  scontrol update nodename="n[1-$NNODES]" state=resume 2>/dev/null || true
  wait_for 30 "all $NNODES nodes ready" nodes_ready
}

# ---------------------------------------------------------------- 5. accounting objects
sacctmgr_set() {  # sacctmgr_set ARGS...: sacctmgr -i modify, where "nothing to change" is fine
  local out
  if ! out=$(sacctmgr -i modify "$@" 2>&1); then
    grep -q 'Nothing modified' <<<"$out" || die "sacctmgr modify $*: $out"
  fi
}
has_qos() { sacctmgr -n -P show qos format=name | grep -qx "$1"; }
has_account() { sacctmgr -n -P show account format=account | grep -qx "$1"; }
has_assoc() { [ -n "$(sacctmgr -n -P show assoc where cluster="$CLUSTER" user="$1" account="$2" format=user)" ]; }

# An agent's share at once per QOS: 8 GPUs, and the CPUs and memory that go with 8 GPUs on a
# node (CPU-only or memory-only jobs must not fill nodes and strand other agents' GPUs).
AGENT_GPUS=8
AGENT_TRES="cpu=$((AGENT_GPUS * CPUS_PER_NODE / GPUS_PER_NODE)),mem=$((AGENT_GPUS * MEM_PER_NODE / GPUS_PER_NODE)),gres/gpu=$AGENT_GPUS"
# Jobs an agent may have queued at once are capped per account association (GrpSubmitJobs, set
# by the platform: cluster/backends/base.py MAX_QUEUED_JOBS), not on the QOS: a QOS submit limit
# would override the association's MaxSubmitJobs=0 with which the platform closes an account.

ensure_accounting() {
  # Create if missing, then always set the wanted values so re-runs converge. The platform
  # later changes the agents' numbers itself (sacctmgr modify qos ...); this only establishes
  # them. `platform` is the organizers' QOS (evaluation, serving jobs): the platform never
  # changes it; each organizers' account gets its own GPU cap (GrpTRES) instead. It preempts
  # `preemptible` like `normal` does (that tier is spare capacity for everyone), and nothing
  # preempts it: the arena's model servers must not disappear under the voters.
  has_qos preemptible || sacctmgr -i add qos preemptible >/dev/null
  has_qos normal || sacctmgr -i add qos normal >/dev/null
  has_qos platform || sacctmgr -i add qos platform >/dev/null
  sacctmgr_set qos where name=preemptible set Priority=0 PreemptMode=requeue \
    MaxWall=24:00:00 MaxTRESPerAccount="$AGENT_TRES" MaxSubmitJobsPerAccount=-1 \
    Flags=DenyOnLimit
  sacctmgr_set qos where name=normal set Priority=100 Preempt=preemptible \
    MaxWall=24:00:00 MaxTRESPerAccount="$AGENT_TRES" MaxSubmitJobsPerAccount=-1 \
    Flags=DenyOnLimit
  sacctmgr_set qos where name=platform set Priority=100 Preempt=preemptible \
    MaxWall=24:00:00 Flags=DenyOnLimit
  # Parent of the per-agent accounts; children inherit its QOS list and default.
  has_account agents || sacctmgr -i add account agents cluster="$CLUSTER" \
    Description="arena agents" Organization=arena >/dev/null
  sacctmgr_set account where name=agents cluster="$CLUSTER" set QOS=normal,preemptible DefaultQOS=normal
  migrate_gpu_budgets
  # root in agents, for the smoke test below and for admin jobs
  has_assoc root agents || sacctmgr -i add user root account=agents cluster="$CLUSTER" >/dev/null
  log "accounting: $(sacctmgr -n -P show qos format=name,priority,preempt,maxwall,maxtrespa,flags \
    | grep -E '^(normal|preemptible|platform)\|' | tr '\n' ' ')"
}

migrate_gpu_budgets() {
  # Budgets are in billing units (GPU-equivalents) now; an account the platform made before
  # with a GPU-only budget (GrpTRESMins=gres/gpu=N) gets the same N as billing, so CPU- or
  # memory-only jobs cannot run free until the platform next applies its limits.
  local account minutes
  while IFS='|' read -r account minutes; do
    sacctmgr_set account where name="$account" cluster="$CLUSTER" set \
      GrpTRESMins="billing=$minutes,gres/gpu=-1"
    log "budget of $account is now billing=$minutes GPU-equivalent minutes"
  done < <(sacctmgr -n -P show assoc where cluster="$CLUSTER" format=account,user,grptresmins |
    awk -F'|' '$2 == "" && $3 ~ /gres\/gpu=[0-9]/ && $3 !~ /billing=/ {
      match($3, /gres\/gpu=[0-9]+/); print $1 "|" substr($3, RSTART + 9, RLENGTH - 9) }')
}

# ---------------------------------------------------------------- 6. smoke test
smoke_test() {
  # --immediate: fail instead of hanging when the cluster (or account agents) is busy
  local out
  out=$(cd /tmp && srun -A agents --gres=gpu:2 -t 1 -J arena-smoke --immediate=60 \
    bash -c 'echo "node=$SLURMD_NODENAME CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"') ||
    die "smoke job did not run within 60 s: $(squeue -h -o '%i %u %a %T %r %b' | head -5 | tr '\n' ';')"
  log "smoke test: $out"
}

check_association_tree() {
  # slurmdbd keeps associations as a nested set (lft/rgt). Changes sent by several processes
  # at once corrupt it (the platform now takes a lock for each: cluster/slurm/cli.py), and a
  # corrupt tree blocks or opens the wrong agents. Each association must lie directly inside
  # its own account (a user's) or its parent account (an account's).
  local wrong
  wrong=$(mysql -N -B "$DB_NAME" -e "
    SELECT CONCAT(c.acct, IF(c.user = '', '', CONCAT('/', c.user)), ' lies in ',
                  IFNULL(e.acct, 'nothing'))
    FROM ${CLUSTER}_assoc_table c
    LEFT JOIN ${CLUSTER}_assoc_table e ON e.id_assoc = (
      SELECT p.id_assoc FROM ${CLUSTER}_assoc_table p
      WHERE p.deleted = 0 AND p.user = '' AND p.lft < c.lft AND p.rgt > c.rgt
      ORDER BY p.lft DESC LIMIT 1)
    WHERE c.deleted = 0 AND NOT (c.acct = 'root' AND c.user = '')
      AND IFNULL(e.acct, '') <> IF(c.user = '', c.parent_acct, c.acct)" 2>&1) \
    || die "could not read slurmdbd's associations: $wrong"
  [ -z "$wrong" ] || die "slurmdbd's association tree is inconsistent (changed by several \
processes at once?): $(tr '\n' ';' <<<"$wrong"). Remove the accounts named with sacctmgr, or \
on a test machine drop $DB_NAME and rerun this script"
}

main() {
  [ "$(id -u)" -eq 0 ] || die "run as root"
  install_packages
  prepare_dirs
  prune_state
  write_configs
  local changed=0
  if config_changed; then changed=1; restart_changed_daemons; fi
  start_munge
  start_mariadb
  ensure_database
  start_slurmdbd
  start_slurmctld
  start_slurmds
  # daemons we did not start ourselves could not be restarted: make them re-read the config
  if ((changed)); then scontrol reconfigure >/dev/null 2>&1 || true; fi
  wait_nodes
  log "cluster up: $(sinfo -h -o '%P %D nodes %T %G' | tr '\n' ' ')"
  ensure_accounting
  check_association_tree
  smoke_test
  log "done in $((SECONDS - T0))s; started by this script: $(tr '\n' ' ' < "$STARTED")"
}

# run unless sourced (tests source this file to call single steps)
if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi
