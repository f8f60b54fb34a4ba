#!/usr/bin/env bash
# The shared training environment, as a cluster provides software: a venv that every agent's
# jobs can run (world-readable, built from Debian's /usr/bin/python3, nothing under /root).
#
#   sudo infra/training_env/setup.sh            -> /opt/rsi-arena/train-env
#   TRAIN_ENV=/some/dir infra/training_env/setup.sh
#
# torch is installed first, from the CPU wheel on disk, then the post-training stack, all pinned
# by the project's constraints.txt (a looser torch would pull a multi-GB CUDA build). Idempotent:
# a stamp file holds the hash of the constraints and package list it was built with, and a run
# with the same hash only checks that the interpreter imports the stack (about a second).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
TRAIN_ENV=${TRAIN_ENV:-/opt/rsi-arena/train-env}
CONSTRAINTS=$REPO/constraints.txt
BASE_PYTHON=/usr/bin/python3
TORCH=torch==2.13.0
PACKAGES=(transformers trl peft accelerate datasets safetensors tokenizers jinja2)
STAMP=$TRAIN_ENV/.arena-stamp

log() { printf '[training-env] %s\n' "$*"; }
MODULES="torch transformers trl peft accelerate datasets safetensors tokenizers jinja2"
installed() {  # every module is there (found, not imported: that takes seconds)
  "$TRAIN_ENV/bin/python" -c 'import importlib.util, sys; sys.exit(any(importlib.util.find_spec(m) is None for m in sys.argv[1:]))' \
    $MODULES >/dev/null 2>&1
}
imports_ok() {
  "$TRAIN_ENV/bin/python" -c "import ${MODULES// /, }" >/dev/null 2>&1
}
# pip.conf here names extra index folders that may not exist; pip warns once per package.
quiet_pip() {
  "$TRAIN_ENV/bin/python" -m pip install --quiet --disable-pip-version-check -c "$CONSTRAINTS" "$@" \
    2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
}

wanted=$(
  { cat "$CONSTRAINTS"; echo "$TORCH"; printf '%s\n' "${PACKAGES[@]}"; "$BASE_PYTHON" --version; } \
    | sha256sum | cut -d' ' -f1
)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ] && installed; then
  log "up to date: $TRAIN_ENV"
  exit 0
fi

if ! "$BASE_PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  [ "$(id -u)" -eq 0 ] || { log "python3-venv is missing: apt-get install python3-venv (as root)"; exit 1; }
  log "installing python3-venv"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi

umask 022  # every agent's job must read and run it
mkdir -p "$(dirname "$TRAIN_ENV")"
rm -f "$STAMP"
[ -x "$TRAIN_ENV/bin/python" ] || { log "creating $TRAIN_ENV from $BASE_PYTHON"; "$BASE_PYTHON" -m venv "$TRAIN_ENV"; }
log "installing $TORCH"
quiet_pip "$TORCH"
log "installing ${PACKAGES[*]}"
quiet_pip "${PACKAGES[@]}"
chmod -R a+rX "$TRAIN_ENV"
imports_ok || { log "the environment does not import its packages"; exit 1; }
echo "$wanted" > "$STAMP"
chmod 644 "$STAMP"
log "ready: $TRAIN_ENV ($("$TRAIN_ENV/bin/python" -c 'import torch, transformers, trl, peft; print(f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}, peft {peft.__version__}")'))"
