#!/usr/bin/env bash
# The batch sweeps and serving runs of docs/benchmarks.md ("Offline sweep and serving runs"):
# the demo model and the Qwen2.5-0.5B configuration with random weights, float and INT8
# (w8a8-dynamic), through `npu-console bench offline` and `npu-console bench serve` against a
# real `npu-console serve` on loopback. Run it on a quiet machine; results go to OUT/.
#
#   bash tests/bench/bench_matrix.sh OUT [demo|qwen05b|all]
set -euo pipefail
OUT=${1:?usage: bench_matrix.sh OUT [demo|qwen05b|all]}
WHICH=${2:-all}
PY=${PYTHON:-python}
NC="$PY -m npu_console.cli.main"
mkdir -p "$OUT"
QWEN=${QWEN_DIR:-$OUT/qwen05b-random}

serve_and_bench() {  # name folder dtype concurrency num_prompts in out
  local name=$1 dir=$2 dtype=$3 conc=$4 num=$5 len=$6 port=8765
  $NC serve --model "$dir" --name "$name" --dtype "$dtype" --quant w8a8-dynamic \
      --port $port --log-level warning > "$OUT/serve-$name.log" 2>&1 &
  local pid=$!
  trap 'kill $pid 2>/dev/null || true' RETURN
  for _ in $(seq 600); do
    curl -sf http://127.0.0.1:$port/health > /dev/null && break
    kill -0 $pid || { cat "$OUT/serve-$name.log"; return 1; }
    sleep 1
  done
  for variant in "$name" "$name-w8a8-dynamic"; do
    $NC bench serve --base-url http://127.0.0.1:$port --model "$variant" \
        --concurrency "$conc" --num-prompts "$num" --input-len "$len" --output-len "$len" \
        --tokenizer "$dir" --out "$OUT/serve-$variant"
  done
  kill -INT $pid; wait $pid || true
}

sweep() {  # name folder dtype batch-sizes len
  local name=$1 dir=$2 dtype=$3 sizes=$4 len=$5
  $NC bench offline --model "$dir" --dtype "$dtype" --batch-sizes "$sizes" \
      --input-len "$len" --output-len "$len" --out "$OUT/offline-$name-float"
  $NC bench offline --model "$dir" --dtype "$dtype" --quant w8a8-dynamic --batch-sizes "$sizes" \
      --input-len "$len" --output-len "$len" --out "$OUT/offline-$name-int8"
}

if [[ $WHICH == demo || $WHICH == all ]]; then
  sweep demo assets/models/demo float32 1,2,4,8,16 128
  serve_and_bench demo assets/models/demo float32 8 64 128
fi
if [[ $WHICH == qwen05b || $WHICH == all ]]; then
  [[ -f $QWEN/config.json ]] || $PY -m npu_console.engine.bench.random_model --out "$QWEN"
  sweep qwen05b "$QWEN" float32 1,2,4,8 64
  serve_and_bench qwen05b "$QWEN" float32 4 16 64
fi
echo "results in $OUT"
