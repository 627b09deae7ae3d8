#!/usr/bin/env bash
# GPU host, issue 40: batched LoRA on the hf runtime's loop, in process (no tritonserver), one call.
#   carry [".whl/lora"]: cp312 wheels of peft, xgrammar, apache-tvm-ffi, jsonschema (+attrs, referencing, rpds-py,
#   jsonschema-specifications); the machine has torch, transformers, accelerate.
#   bash bench/device_lora_speed.sh [WHEELS]     (results under $OUT: lora_speed.json, lora_speed.log, env.txt)
# Runs bench/guided_speed.py --skip-guided --adapters 8 --lora-peft: the Llama-3.2-1B-shaped random checkpoint (bf16),
# 64 streams, 128 prompt / 256 output tokens: the base alone (CUDA graphs), then 8 rank-16 q/k/v/o adapters: base
# traffic and evenly spread traffic through batched LoRA, then the spread traffic through PEFT's mixed forward.
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; W=${1:-.whl/lora}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/lora-site "$W"/*.whl > "$OUT/setup.log" 2>&1 ||
  { tail -20 "$OUT/setup.log"; exit 3; }
export PYTHONPATH=/tmp/lora-site:$PWD/generator
{ nproc; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'from importlib.metadata import version as v; print(*(f"{n} {v(n)}" for n in
("numpy", "torch", "transformers", "peft")))'; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout "${LORA_LIMIT:-420}" python3 bench/guided_speed.py --skip-guided --adapters 8 --lora-peft --warmup "${WARMUP:-4}" \
  --duration "${DURATION:-15}" --out "$OUT/lora_speed.json" 2>&1 |
  grep --line-buffered -v -e "Loading weights" -e "non-existent request_id" -e "Writing model" | tee "$OUT/lora_speed.log"
