#!/usr/bin/env bash
# Make sure what the test suite talks to is installed and answering: PostgreSQL, Redis,
# Debian's Chromium (for the browser tests), Debian's nginx and supervisor (the deployment kit,
# infra/deploy/) and the local Slurm cluster. As root it installs and starts what is missing;
# as another user it says what is missing and stops.
set -euo pipefail

log() { printf '[services] %s\n' "$*"; }
is_root() { [ "$(id -u)" -eq 0 ]; }
apt_updated=0
apt_install() {
  is_root || { log "not root: install $* by hand (apt-get install $*)"; exit 1; }
  if [ "$apt_updated" -eq 0 ]; then apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
wait_for() {  # wait_for SECONDS WHAT COMMAND...
  local seconds=$1 what=$2; shift 2
  for _ in $(seq 1 $((seconds * 4))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  log "timed out waiting for $what"; return 1
}

# --- PostgreSQL ---------------------------------------------------------------------------
command -v pg_ctlcluster >/dev/null || apt_install postgresql postgresql-client
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  is_root || { log "PostgreSQL is not answering on 127.0.0.1:5432"; exit 1; }
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  log "starting PostgreSQL $version"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start
  wait_for 30 PostgreSQL pg_isready -q -h 127.0.0.1 -p 5432
fi
# The suite connects as postgres over TCP without a password (trust, as on these machines).
if ! psql -h 127.0.0.1 -U postgres -d postgres -Atc 'select 1' >/dev/null 2>&1; then
  log "cannot connect to PostgreSQL as postgres@127.0.0.1 without a password; allow trust for 127.0.0.1 in pg_hba.conf"
  exit 1
fi

# --- Redis --------------------------------------------------------------------------------
command -v redis-server >/dev/null || apt_install redis-server
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  is_root || { log "Redis is not answering on 127.0.0.1:6379"; exit 1; }
  log "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_for 15 Redis redis-cli -h 127.0.0.1 -p 6379 ping
fi

# --- Chromium for the browser tests -------------------------------------------------------
command -v chromium >/dev/null || { log "installing Debian's chromium"; apt_install chromium; }

# --- nginx and supervisord for the deployment kit (infra/deploy/) ----------------------------
# The kit starts its own nginx and supervisord with its own configs and pid files; whatever the
# packages' own services do (started or not, by policy-rc.d) does not matter to it.
command -v nginx >/dev/null || { log "installing Debian's nginx"; apt_install nginx; }
command -v supervisord >/dev/null || { log "installing Debian's supervisor"; apt_install supervisor; }

# --- The local Slurm cluster (8 nodes x 8 fake GPUs) ----------------------------------------
if is_root; then
  bash "$(dirname "$0")/../slurm/setup.sh"
else
  log "not root: the local Slurm cluster is not set up, so the Slurm tests will fail (run infra/slurm/setup.sh as root)"
fi

if is_root; then bash "$(dirname "$0")/../training_env/setup.sh"; fi  # the agents' training venv (/opt/rsi-arena/train-env)
if is_root; then bash "$(dirname "$0")/../firewall/setup.sh"; fi  # agents' users off the platform's ports (nftables)
log "PostgreSQL, Redis, Chromium, nginx, supervisor and Slurm are ready"
