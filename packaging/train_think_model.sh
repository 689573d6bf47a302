#!/usr/bin/env bash
# Rebuild the reasoning demo model (assets/models/demo-think): a tiny Llama trained on synthetic
# chats whose replies think in <think> blocks before answering (engine/demo/think_data.py).
# CPU only, 2 torch threads, fixed seed and step count; a few minutes on 2 cores. The command
# also checks the saved model's greedy replies in the real engine and writes the result into
# training_result.json and the model card.
set -euo pipefail
cd "$(dirname "$0")/.."
# Passive OpenMP waits: on a shared machine spinning worker threads burn the CPU they wait for.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
exec python -m npu_console.engine.demo.train_think --out assets/models/demo-think "$@"
