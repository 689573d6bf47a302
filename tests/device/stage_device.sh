#!/usr/bin/env bash
# Stage, on the development machine, what tests/device/gpu_check.sh needs on the device tool's
# H200 and that machine lacks (it reaches no network; its python3 has a CUDA torch, transformers,
# tokenizers, safetensors, numpy, psutil, httpx, prometheus-client, pytest, uvloop):
#   .whl/               wheels for Python 3.12 / x86-64 of the API server's packages and gguf
#   tmp/device-models/  stories260K (2 MB), beside the demo model the checkout already has
# Both are ignored by git; name them in the device call's carry. SmolLM2's GGUF (98 MB) is over
# the 64 MiB a call carries, so its bench steps fail there with "not found" and say so.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SHARED_MODELS=${SHARED_MODELS:-$ROOT/../shared/models}
cd "$ROOT"

# versions: the ones this project's .venv runs with
WHEELS="fastapi==0.165.0 starlette==1.10.0 pydantic==2.14.4 pydantic-core==2.50.5
annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0 opentelemetry-api==1.45.2
uvicorn==0.54.0 httptools==0.9.0 gguf==0.19.0"
PLATFORMS=""
for n in 28 27 17; do PLATFORMS="$PLATFORMS --platform manylinux_2_${n}_x86_64"; done
# shellcheck disable=SC2086  # word splitting wanted
python3 -m pip download -q --no-cache-dir --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    $PLATFORMS --platform manylinux2014_x86_64 --platform any -d .whl $WHEELS

mkdir -p tmp/device-models
if [ -f "$SHARED_MODELS/stories260K/config.json" ]; then
    rsync -a --exclude original "$SHARED_MODELS/stories260K/" tmp/device-models/stories260K/ 2>/dev/null \
        || { rm -rf tmp/device-models/stories260K; cp -r "$SHARED_MODELS/stories260K" tmp/device-models/; \
             rm -rf tmp/device-models/stories260K/original; }
else
    echo "stage_device: no stories260K under $SHARED_MODELS: its parity step will fail" >&2
fi
chmod -R u+w tmp/device-models
du -sh .whl tmp/device-models
echo "carry: [\".whl\", \"tmp/device-models\"]  command: tests/device/gpu_check.sh  timeout_s: 540"
