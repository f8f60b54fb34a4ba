#!/usr/bin/env bash
# Keep agents' Unix users off the platform's own ports (issue 12, item 13), with nftables.
#
# Loads rsi-arena.nft: table inet rsi_arena, whose output hook rejects TCP from any uid in the
# set `agents` to any address of this host on the ports in `platform_ports` (the site: 80,
# 443, 8080, 8000; PostgreSQL, Redis, MariaDB, slurmdbd, model servers 8100-8199). The agent gateway (8001),
# slurmctld, the slurmds and every other port stay open. Then it blocks the agents again: every
# `agent_*` Unix user at once (the kernel forgot them at the reboot), and the database's active
# agents through `manage.py security firewall`, which also adds the ports the settings name.
#
# Idempotent; reloading keeps the uids already blocked. Usage: sudo infra/firewall/setup.sh
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
TABLE=rsi_arena

log() { printf '[firewall] %s\n' "$*"; }
[ "$(id -u)" -eq 0 ] || { log "run as root"; exit 1; }

if ! command -v nft >/dev/null; then
  log "installing nftables"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables >/dev/null
fi

nft -f "$HERE/rsi-arena.nft"

# The packet filter sees TCP only; the databases also listen on Unix sockets, where these
# machines trust anyone: PostgreSQL (`local all all trust`) and MariaDB's root (no password).
# Only PostgreSQL's own user (and root) may enter its socket folder; MariaDB's root logs in
# through the socket as the OS root only. slurmdbd keeps its own password on the socket.
# Both live in /run: run this again after a reboot, as for the table.
if [ -d /var/run/postgresql ]; then chmod o-rwx /var/run/postgresql; fi
if command -v mysql >/dev/null && mysqladmin ping >/dev/null 2>&1; then
  printf '%s' "ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket;" | mysql
fi

uids=$(getent passwd | awk -F: '$1 ~ /^agent_/ { print $3 }' | paste -sd, -)
if [ -n "$uids" ]; then nft add element inet "$TABLE" agents "{ $uids }"; fi

if [ -x "$REPO/.venv/bin/python" ]; then
  if said=$(cd "$REPO" && .venv/bin/python manage.py security firewall 2>&1); then
    printf '%s\n' "$said"
  else
    log "could not read the agents from the database ($(printf '%s' "$said" | tail -n 1)): run 'python manage.py security firewall' with the deployment's DATABASE_URL"
  fi
else
  log "no $REPO/.venv yet: run 'python manage.py security firewall' once it exists"
fi
# An empty set has no "elem" at all: grep then finds nothing, which is no error here.
blocked=$(nft -j list set inet "$TABLE" agents | { grep -o '"elem": \[[^]]*\]' || true; } | { grep -o '[0-9]\+' || true; } | wc -l)
log "table inet $TABLE loaded: $blocked agent uid(s) kept off ports $(sed -n 's/^add element .* platform_ports { \(.*\) }$/\1/p' "$HERE/rsi-arena.nft")"
