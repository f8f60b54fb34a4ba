#!/usr/bin/env bash
# GPU check of the evaluation and training paths (see evalsuite/README.md, "GPU path").
#
# Run from the repository root on a GPU machine, with a Python that has CUDA torch and
# transformers; MODELS is the tiny model kit (python -m infra.tiny_models build --out DIR).
#   MODELS=var/test-models PYTHON=python3 bash infra/gpu/check_evaluation.sh
# 1. serves MODELS/instruct as an agent's on-demand evaluation job does (vLLM when installed,
#    else guarded `transformers serve` on CUDA) and runs one proxy benchmark through the runner;
# 2. runs the FSDP2 SFT script for a few steps on the GPU (NCCL, bf16), printing the step time
#    and the peak GPU memory.
# Each part reports on its own; the script fails when either failed.
set -uo pipefail
MODELS=${MODELS:-var/test-models}
PYTHON=${PYTHON:-python3}
OUT=${CHECK_OUT:-/tmp/arena-gpu-check}
STEPS=${STEPS:-30}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p "$OUT"
status=0

echo "== GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PYTHON" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__)'
if "$PYTHON" -c 'import vllm' 2>/dev/null || command -v vllm >/dev/null; then
    echo "vLLM: installed"
else
    echo "vLLM: not installed (the evaluation falls back to transformers serve on CUDA)"
fi

echo "== evaluation: serve $MODELS/instruct, run a proxy benchmark through the runner"
"$PYTHON" -m infra.gpu.check_evaluation --model "$MODELS/instruct" --out "$OUT/eval" \
    --server "${EVALS_SERVER:-auto}" --benchmark gsm8k || { echo "evaluation check FAILED"; status=1; }
[ -f "$OUT/eval/serve.log" ] && { echo "-- end of serve.log"; tail -n 15 "$OUT/eval/serve.log"; }

echo "== training: FSDP2 SFT, $STEPS steps, NCCL, bf16"
"$PYTHON" -m torch.distributed.run --standalone --nproc_per_node="${NPROC:-1}" \
    -m cluster.training.sft_fsdp2 --model "$MODELS/base" --out "$OUT/sft" \
    --steps "$STEPS" --log-every 10 --batch-size 8 --bf16 || { echo "training check FAILED"; status=1; }

exit $status
