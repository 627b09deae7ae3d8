#!/usr/bin/env bash
# H200 host, device call 3, on the machine calls 1-2 (bench/device_issue27.sh) left warm (/tmp/venv, /tmp/backends):
# the ensemble at a 2 ms ITL source (128k tok/s offered at 256 streams), then stop under load: SIGTERM to
# tritonserver and to `tritongen serve` with 256 streams in flight through the native BLS (bench/native_stop.py).
# Usage: bash bench/device_issue27_stop.sh REPS
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TRITONGEN_BACKEND_DIR=/tmp/backends
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PY=/tmp/venv/bin/python3
ls /tmp/backends/*/ >/dev/null 2>&1 || { echo "no backends: the machine was not warm"; exit 3; }
timeout 120 $PY bench/engine_speed.py --levels 256 --duration 10 --warmup 3 --processes 8 --itl-ms 2 \
  --layouts tensorrt_llm,ensemble --name h200_engine_speed_itl2 2>&1 | grep -v "model shards" | tail -10
timeout 420 $PY bench/native_stop.py --streams 256 --reps "${1:-10}" --out bench/results/native_stop_h200.json 2>&1 | tail -30
tar czf "$OUT/results3.tgz" bench/results/h200_engine_speed_itl2* bench/results/native_stop_h200.json 2>/dev/null
ls "$OUT"
