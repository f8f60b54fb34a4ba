#!/usr/bin/env bash
# The shared training environment, as a cluster provides software: a venv that every agent's
# jobs can run (world-readable, built from an interpreter every Unix user may execute).
#
#   sudo infra/training_env/setup.sh            -> /opt/rsi-arena/train-env
#   TRAIN_ENV=/some/dir infra/training_env/setup.sh
#   BASE_PYTHON=/usr/local/bin/python3.11 infra/training_env/setup.sh
#
# torch is installed first, from the CPU wheel on disk, then the post-training stack and
# DeepSpeed, all pinned by the project's constraints.txt (a looser torch would pull a multi-GB
# CUDA build). Idempotent: a stamp file holds the hash of the constraints and package list it
# was built with, and a run with the same hash only checks that the stack is there.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
TRAIN_ENV=${TRAIN_ENV:-/opt/rsi-arena/train-env}
CONSTRAINTS=$REPO/constraints.txt
TORCH=torch==2.13.0
PACKAGES=(transformers trl peft accelerate datasets safetensors tokenizers jinja2)
# DeepSpeed ships only a source archive; its setup.py imports torch, so it builds against the
# torch installed above (no build isolation). The one op a CPU job loads, the shared-memory
# collectives, is compiled here, once: left to DeepSpeed's JIT, every agent's user would compile
# it again on its first job (minutes, into its own ~/.cache/torch_extensions), and a shared
# writable cache would let one agent plant a library in another's job. GPU ops stay JIT: they
# need the cluster's CUDA toolkit, which this build machine may not have.
DEEPSPEED=(deepspeed hjson ninja py-cpuinfo einops msgpack psutil pydantic wheel)
DEEPSPEED_BUILD=(DS_BUILD_OPS=0 DS_BUILD_SHM_COMM=1 DS_ACCELERATOR=cpu)
MODULES="torch transformers trl peft accelerate datasets safetensors tokenizers jinja2 deepspeed"
STAMP=$TRAIN_ENV/.arena-stamp

log() { printf '[training-env] %s\n' "$*"; }
is_root() { [ "$(id -u)" -eq 0 ]; }

# Every agent's Unix user must be able to execute the interpreter, wherever `python3` happens
# to live for root (on some machines it is a pyenv shim inside /root, mode 0700). Checked by
# running it as `nobody`, the least any agent can do.
runs_for_everyone() {  # runs_for_everyone PYTHON
  if is_root; then
    runuser -u nobody -- "$1" -c 'import ensurepip, venv' >/dev/null 2>&1
  else
    "$1" -c 'import ensurepip, venv' >/dev/null 2>&1
  fi
}
pick_base_python() {
  local candidate
  for candidate in ${BASE_PYTHON:-} /usr/bin/python3.11 /usr/bin/python3; do
    [ -x "$candidate" ] && runs_for_everyone "$candidate" && { echo "$candidate"; return 0; }
  done
  return 1
}
if ! BASE=$(pick_base_python); then
  is_root || { log "no Python that every user can run: apt-get install python3 python3-venv (as root)"; exit 1; }
  log "installing Debian's python3 and python3-venv (an interpreter every agent's user can run)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 python3-venv python3-dev >/dev/null
  BASE=$(pick_base_python) || { log "Debian's python3 is installed but not runnable by other users"; exit 1; }
fi

installed() {  # every module is there (found, not imported: that takes seconds)
  "$TRAIN_ENV/bin/python" -c 'import importlib.util, sys; sys.exit(any(importlib.util.find_spec(m) is None for m in sys.argv[1:]))' \
    $MODULES >/dev/null 2>&1
}
imports_for_everyone() {  # the whole stack imports, as an unprivileged user would run it
  local check=("$TRAIN_ENV/bin/python" -c "import ${MODULES// /, }")
  if is_root; then (cd / && runuser -u nobody -- env HOME=/nonexistent "${check[@]}") >/dev/null 2>&1; else "${check[@]}" >/dev/null 2>&1; fi
}
# pip.conf here names extra index folders that may not exist; pip warns once per package.
quiet_pip() {
  "$TRAIN_ENV/bin/python" -m pip install --quiet --disable-pip-version-check -c "$CONSTRAINTS" "$@" \
    2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
}

wanted=$(
  { cat "$CONSTRAINTS"; echo "$TORCH"; printf '%s\n' "${PACKAGES[@]}" "${DEEPSPEED[@]}" "${DEEPSPEED_BUILD[@]}"; "$BASE" --version; echo "$BASE"; } \
    | sha256sum | cut -d' ' -f1
)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ] && installed; then
  log "up to date: $TRAIN_ENV"
  exit 0
fi

umask 022  # every agent's job must read and run it
mkdir -p "$(dirname "$TRAIN_ENV")"
rm -f "$STAMP"
if [ -x "$TRAIN_ENV/bin/python" ] && ! runs_for_everyone "$TRAIN_ENV/bin/python"; then
  log "$TRAIN_ENV was built from an interpreter other users cannot run: rebuilding it"
  rm -rf "$TRAIN_ENV"
fi
[ -x "$TRAIN_ENV/bin/python" ] || { log "creating $TRAIN_ENV from $BASE"; "$BASE" -m venv "$TRAIN_ENV"; }
log "installing $TORCH"
quiet_pip "$TORCH"
log "installing ${PACKAGES[*]}"
quiet_pip "${PACKAGES[@]}"
log "installing DeepSpeed (built from its source archive against this torch)"
quiet_pip "${DEEPSPEED[@]:1}"
# --no-cache-dir: pip's wheel cache does not key on the build variables, and a wheel built
# without the op would be reused silently.
build_deepspeed() {
  env "${DEEPSPEED_BUILD[@]}" "$TRAIN_ENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    -c "$CONSTRAINTS" --no-build-isolation --no-cache-dir "$@" "${DEEPSPEED[0]}" \
    2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
}
has_shm_op() { "$TRAIN_ENV/bin/python" -c 'import torch, deepspeed.ops.comm.deepspeed_shm_comm_op' >/dev/null 2>&1; }
build_deepspeed
# An environment from before the op was built ahead has DeepSpeed already: build it again.
has_shm_op || build_deepspeed --force-reinstall --no-deps
has_shm_op || { log "DeepSpeed was built without its shared-memory op (deepspeed.ops.comm.deepspeed_shm_comm_op)"; exit 1; }
chmod -R a+rX "$TRAIN_ENV"
imports_for_everyone || { log "the environment does not import its packages as an unprivileged user"; exit 1; }
echo "$wanted" > "$STAMP"
chmod 644 "$STAMP"
log "ready: $TRAIN_ENV ($("$TRAIN_ENV/bin/python" -c 'import torch, transformers, trl, peft, deepspeed; print(f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}, peft {peft.__version__}, deepspeed {deepspeed.__version__}")' 2>/dev/null | tail -n 1))"
