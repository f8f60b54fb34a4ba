#!/bin/bash
# Slurm Epilog (root, on each node of a job, once its processes are gone): the job's /tmp and
# /var/tmp folders on the agent's quota volume (arena_jobtmp.c) are deleted.
set -uo pipefail
IMAGES=/srv/rsi-arena/images
job=${SLURM_JOB_ID:?}
user=${SLURM_JOB_USER:?}
[[ $job =~ ^[0-9]+$ && $user =~ ^[a-z_][a-z0-9_-]*$ ]] || exit 0
mountpoint -q "$IMAGES/$user" || exit 0
[ -d "$IMAGES/$user/jobs/$job" ] && rm -rf --one-file-system "${IMAGES:?}/$user/jobs/$job"
exit 0
