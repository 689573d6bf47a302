#!/usr/bin/env bash
# Rebuild the built-in demo model (assets/models/demo) and the calibration/held-out texts
# (assets/calib) from the Python standard library's docstrings. CPU only, 2 torch threads,
# fixed seed and step count; about 20-40 minutes on 2 cores. The settings below are the ones
# the shipped model was trained with (they are also the module's defaults).
set -euo pipefail
cd "$(dirname "$0")/.."
# Passive OpenMP waits: on a shared machine spinning worker threads burn the CPU they wait for.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
exec python -m npu_console.engine.demo.train --out assets/models/demo --calib-dir assets/calib \
    --vocab-size 4096 --hidden 256 --layers 4 --heads 4 --kv-heads 2 --intermediate 688 \
    --seq-len 256 --batch-size 4 --steps 800 --lr 0.0025 --warmup 40 --seed 1234 --threads 2 \
    "$@"
