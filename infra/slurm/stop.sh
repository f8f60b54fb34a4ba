#!/usr/bin/env bash
# Stop the local Slurm cluster "arena" -- only the daemons infra/slurm/setup.sh started itself,
# by the PIDs it wrote to /run/arena-slurm/started (never by process name). A MariaDB or any
# other daemon that was already running before setup.sh is left alone.
#
# Usage: sudo infra/slurm/stop.sh [--purge]
#   --purge  also wipe Slurm's state (controller/slurmd spool dirs, logs) and the
#            slurm_acct_db database with its DB user -- not MariaDB's datadir.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
STATE_DIR=/run/arena-slurm
STARTED=$STATE_DIR/started
DB_NAME=slurm_acct_db
DB_USER=slurm

STOP_WAIT_STEPS=100   # x 0.2 s: how long a TERMed daemon gets before KILL

T0=$SECONDS
log() { printf '[slurm-stop %(%T)T +%3ds] %s\n' -1 "$((SECONDS - T0))" "$*"; }

recorded() {  # recorded PATTERN: "name pid" lines of the state file whose name matches PATTERN
  [ -f "$STARTED" ] && awk -v re="^($1)\$" '$1 ~ re' "$STARTED" || true
}
is_ours() {  # is_ours NAME PID: the PID is still that daemon (guards against PID reuse)
  [ -n "$2" ] && [ "$(cat "/proc/$2/comm" 2>/dev/null)" = "${1%%-n*}" ]
}
forget() { [ -f "$STARTED" ] && sed -i "/^$1 /d" "$STARTED" || true; }

stop_group() {  # stop_group PATTERN: TERM all recorded daemons matching PATTERN, wait, KILL stragglers
  local name pid pids=() names=()
  while read -r name pid; do
    [ -n "$name" ] || continue
    if is_ours "$name" "$pid"; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid"); names+=("$name")
    else
      log "$name (pid $pid) is no longer running"
    fi
    forget "$name"
  done < <(recorded "$1")
  ((${#pids[@]})) || return 0
  local i alive
  for _ in $(seq 1 "$STOP_WAIT_STEPS"); do   # 20 s (MariaDB flushes InnoDB on the way out)
    alive=0
    for i in "${!pids[@]}"; do is_ours "${names[$i]}" "${pids[$i]}" && alive=1; done
    ((alive)) || break
    sleep 0.2
  done
  # Checked again right before KILL: a daemon that exited meanwhile may have left its PID to
  # an unrelated process.
  for i in "${!pids[@]}"; do
    if is_ours "${names[$i]}" "${pids[$i]}"; then
      log "${names[$i]} (pid ${pids[$i]}) did not exit: KILL"
      kill -KILL "${pids[$i]}" 2>/dev/null || true
    fi
  done
  log "stopped ${names[*]}"
}

cancel_jobs() {
  # Job steps live in slurmstepd processes that outlive slurmd: cancel the jobs first so that
  # no user processes are left behind. Only when the controller is ours to stop.
  [ -n "$(recorded slurmctld)" ] || return 0
  scontrol ping 2>/dev/null | grep -q 'is UP' || return 0
  local jobs
  jobs=$(squeue -h -o %A -t pending,running,suspended,requeued,configuring 2>/dev/null | tr '\n' ' ')
  [ -n "${jobs// /}" ] || return 0
  log "cancelling jobs: $jobs"
  # shellcheck disable=SC2086
  scancel $jobs 2>/dev/null || true
  for _ in $(seq 1 100); do
    [ -z "$(squeue -h -o %A -t running,completing 2>/dev/null)" ] && return 0
    sleep 0.2
  done
  log "jobs still running or completing after 20 s: $(squeue -h -o '%A=%T' | tr '\n' ' ')"
}

purge_state() {
  if pgrep -x slurmctld >/dev/null || pgrep -x slurmdbd >/dev/null; then
    log "a slurmctld/slurmdbd not started by setup.sh is still running: not purging its state"
    return 0
  fi
  if mysqladmin ping >/dev/null 2>&1; then
    mysql -e "DROP DATABASE IF EXISTS $DB_NAME;
              DROP USER IF EXISTS '$DB_USER'@'localhost'; DROP USER IF EXISTS '$DB_USER'@'127.0.0.1';"
    log "dropped database $DB_NAME and its user"
  else
    log "MariaDB is not running: database $DB_NAME left in place"
  fi
  rm -rf /var/spool/slurmctld/* /var/spool/slurmd/* /var/log/slurm/*.log "$STATE_DIR/conf.sha1" \
    "$REPO/var/slurm"
  log "wiped /var/spool/slurmctld, /var/spool/slurmd, /var/log/slurm and var/slurm"
}

main() {
  local purge=0
  case "${1:-}" in
    "") ;;
    --purge) purge=1 ;;
    *) echo "usage: $0 [--purge]" >&2; exit 2 ;;
  esac
  [ "$(id -u)" -eq 0 ] || { echo "run as root" >&2; exit 1; }
  cancel_jobs
  stop_group 'slurmd-n[0-9]+'     # all nodes at once
  stop_group slurmctld
  stop_group slurmdbd
  if ((purge)); then purge_state; fi   # needs MariaDB, after slurmdbd and before our own mariadbd
  stop_group mariadbd
  stop_group munged
  log "done in $((SECONDS - T0))s"
}

# run unless sourced (tests source this file to call single steps)
if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi
