#!/usr/bin/env bash
# The engine on a real NVIDIA GPU in one prepared run (issue 24): doctor, greedy equality with
# transformers, the INT8 kernels against the reference backend, offline benchmarks, a serving run
# and the pytest tests marked `gpu`. Writes $OUT/gpu_check.json (summary) and $OUT/gpu_check.log;
# $OUT defaults to a fresh temporary folder. Each step has its own time limit inside an 8-minute
# budget, and a failing step is recorded, not fatal.
#
#   tests/device/gpu_check.sh                 # exit 0: every step passed (or no GPU: see below)
#
# Without an NVIDIA GPU (no nvidia-smi listing one, or GPU_CHECK_CUDA=0) it says so at once,
# installs nothing, runs the steps a CPU can (doctor), records the CUDA steps as skipped and
# exits 0.
#
# With a GPU it finds a python whose torch sees CUDA (GPU_CHECK_PYTHON, python3, .venv); failing
# that, and with a network, it makes a venv with a CUDA torch ($TORCH_SPEC from $TORCH_INDEX).
# Packages the python lacks come from ./.whl (wheels, offline) or else from the package index,
# into a --target folder on PYTHONPATH; the project itself runs from this checkout.
#
# On the device tool's H200 (torch with CUDA in the image's python3, no network): first, here,
#   tests/device/stage_device.sh              # wheels -> .whl/, small models -> tmp/device-models/
# then run: command "tests/device/gpu_check.sh", carry [".whl", "tmp/device-models"],
# timeout_s 540. Models are looked for in $GPU_CHECK_MODELS, tmp/device-models, shared/models
# and ../shared/models, in that order.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-XXXXXX")}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
say() { echo "[gpu_check $(date +%H:%M:%S)] $*"; }
say "output in $OUT"

# ---------------------------------------------------------------- is there a GPU? (first, cheap)
no_gpu=""
if [ "${GPU_CHECK_CUDA:-auto}" = 0 ]; then
    no_gpu="GPU_CHECK_CUDA=0"
elif command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || no_gpu="nvidia-smi lists no GPU"
elif ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
    no_gpu="no nvidia-smi and no /dev/nvidia* device"
fi

MODELS=${GPU_CHECK_MODELS:-}
if [ -z "$MODELS" ]; then
    for d in "$ROOT/tmp/device-models" "$ROOT/shared/models" "$ROOT/../shared/models"; do
        if [ -d "$d" ]; then MODELS=$(cd "$d" && pwd); break; fi
    done
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-work-XXXXXX")
trap 'rm -rf "$WORK"' EXIT

if [ -n "$no_gpu" ]; then
    say "NO NVIDIA GPU on this machine ($no_gpu): the CUDA steps are skipped, nothing is installed."
    PY=${GPU_CHECK_PYTHON:-}
    [ -z "$PY" ] && { [ -x "$ROOT/.venv/bin/python" ] && PY=$ROOT/.venv/bin/python || PY=python3; }
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
    "$PY" "$ROOT/tests/device/gpu_check.py" --out "$OUT" --work "$WORK" --models "${MODELS:-}" \
        --no-cuda "$no_gpu"
    rc=$?
    say "done without a GPU (orchestrator exit $rc); summary: $OUT/gpu_check.json"
    [ $rc -le 1 ] && exit 0 || exit $rc   # 1 = a CPU step failed: recorded, still a clean skip
fi

# ---------------------------------------------------------------- a python whose torch sees CUDA
nvidia-smi 2>/dev/null | head -15
sees_cuda() { "$1" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; }
PY=""
for cand in ${GPU_CHECK_PYTHON:-} python3 "$ROOT/.venv/bin/python"; do
    if command -v "$cand" >/dev/null 2>&1 && sees_cuda "$cand"; then PY=$(command -v "$cand"); break; fi
done
if [ -z "$PY" ]; then
    VENV=${GPU_CHECK_VENV:-/tmp/npu-gpu-venv}
    say "no python here has a torch that sees CUDA: installing ${TORCH_SPEC:=torch==2.13.0} from ${TORCH_INDEX:=https://download.pytorch.org/whl/cu130} into $VENV"
    python3 -m venv "$VENV" && "$VENV/bin/python" -m pip install -q --retries 1 --timeout 20 "$TORCH_SPEC" --index-url "$TORCH_INDEX" \
        && "$VENV/bin/python" -m pip install -q -e "$ROOT" || say "install failed (see above)"
    PY=$VENV/bin/python
    [ -x "$PY" ] || PY=python3
fi
say "python: $PY ($("$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1))"

# ---------------------------------------------------------------- packages the python lacks
SITE=$WORK/site
mkdir -p "$SITE"
if compgen -G "$ROOT/.whl/*.whl" >/dev/null; then
    say "installing the carried wheels from .whl/ (offline)"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$ROOT"/.whl/*.whl \
        || say "installing .whl/ failed"
fi
export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"
missing=$("$PY" - <<'EOF'
import importlib.util
need = {"transformers": "transformers", "safetensors": "safetensors", "tokenizers": "tokenizers",
        "numpy": "numpy", "psutil": "psutil", "fastapi": "fastapi", "uvicorn": "uvicorn",
        "httptools": "httptools", "httpx": "httpx", "prometheus_client": "prometheus-client",
        "pytest": "pytest", "gguf": "gguf"}
print(" ".join(p for m, p in need.items() if importlib.util.find_spec(m) is None))
EOF
)
if [ -n "$missing" ]; then
    say "missing: $missing; trying the package index (fails fast offline)"
    "$PY" -m pip install -q --no-cache-dir --timeout 10 --retries 0 --target "$SITE" $missing \
        || say "could not install: $missing (the steps that need them will fail and say so)"
fi

"$PY" "$ROOT/tests/device/gpu_check.py" --out "$OUT" --work "$WORK" --models "${MODELS:-}"
rc=$?
say "done (exit $rc); summary: $OUT/gpu_check.json"
exit $rc
