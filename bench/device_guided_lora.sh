#!/usr/bin/env bash
# GPU host, one call: bench/guided_speed.py (plain vs json_schema at 64 streams on the hf runtime's loop; then
# 8 LoRA adapters mixed evenly vs base). Run from a folder holding this branch's bench/, generator/ and tests/data/.
# Usage: bash bench/device_guided_lora.sh WHEEL_DIR [HF_ADAPTERS_PY] [guided_speed.py options...]
#   WHEEL_DIR: cp312 manylinux wheels of xgrammar, apache-tvm-ffi, pydantic (+core, annotated-types,
#   typing-inspection, typing_extensions), peft, jsonschema (+attrs, referencing, rpds-py, jsonschema-specifications)
#   (the machine has torch, transformers, accelerate, numpy); HF_ADAPTERS_PY: the lora branch's
#   generator/tritongen/served/hf_adapters.py where this tree lacks it ("" when it has it).
# Results under $OUT: guided_speed.json, guided_speed.log, env.txt.
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
WHEELS=$1; ADAPTERS_PY=${2:-}; shift; shift || true
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
  || exit 3
export PYTHONPATH=/tmp/site
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import torch, transformers, xgrammar, peft; print("torch", torch.__version__, "transformers",
transformers.__version__, "xgrammar", xgrammar.__version__, "peft", peft.__version__)'; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
python3 bench/guided_speed.py --adapters 8 ${ADAPTERS_PY:+--adapters-module "$ADAPTERS_PY"} \
  --out "$OUT/guided_speed.json" "$@" 2>&1 |
  grep --line-buffered -v -e "Loading weights" -e "non-existent request_id" | tee "$OUT/guided_speed.log"
exit "${PIPESTATUS[0]}"
