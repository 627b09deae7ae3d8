#!/usr/bin/env bash
# GPU host, issues 39 and 40: guided decoding and LoRA adapters at speed, in two calls on one warm machine.
#   call 1 (carry a folder A with the nvidia-pytriton wheel, 55 MB):  bash bench/device_setup.sh A/*.whl
#   call 2, right after (carry a folder B holding the other wheels, nlohmann-json3-dev's .deb, and this branch's tree
#   where the sending checkout lacks it):  cd TREE && bash bench/device_guided_lora.sh B [HF_ADAPTERS_PY]
# B's wheels (cp312 manylinux): numpy 1.26 (the python stub's), tritonclient, grpcio, protobuf, python-rapidjson,
# xgrammar, apache-tvm-ffi, pydantic (+core, annotated-types, typing-inspection, typing_extensions), peft,
# jsonschema (+attrs, referencing, rpds-py, jsonschema-specifications); the machine has torch, transformers,
# accelerate. HF_ADAPTERS_PY: the lora branch's generator/tritongen/served/hf_adapters.py where this tree lacks it.
# 1. bench/guided_speed.py in process (plain vs json_schema at 64 streams; 8 adapters mixed vs base), while the
#    native backends build; 2. bench/guided_served.py through tritonserver when call 1's pytriton is there.
# Results under $OUT: guided_speed.json, guided_served.json, their logs, env.txt, tritonserver.log.
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
B=$1; ADAPTERS_PY=${2:-}
# numpy 1.26 (the python stub's) breaks the machine's scipy, which transformers imports when present.
python3 -m pip uninstall -y -q scikit-learn scipy 2>&1 | tail -1
bash bench/device_setup.sh "$B"/*.whl > "$OUT/setup.log" 2>&1 || { tail -20 "$OUT/setup.log"; exit 3; }
PY=/tmp/venv/bin/python3
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  $PY -c 'from importlib.metadata import version as v; print(*(f"{n} {v(n)}" for n in
("numpy", "torch", "transformers", "xgrammar", "peft")))'
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
( mkdir -p /tmp/nl && dpkg -x "$B"/nlohmann-json3-dev_*.deb /tmp/nl &&
  CMAKE_PREFIX_PATH=/tmp/nl/usr bash generator/tritongen/native/build.sh --prefix /tmp/backends \
    --build-dir /tmp/native-build ) > "$OUT/native_build.log" 2>&1 &
BUILD=$!
timeout "${INPROC_TIMEOUT:-330}" $PY bench/guided_speed.py --adapters 8 ${ADAPTERS_PY:+--adapters-module "$ADAPTERS_PY"} \
  --warmup 4 --duration 15 --out "$OUT/guided_speed.json" 2>&1 |
  grep --line-buffered -v -e "Loading weights" -e "non-existent request_id" -e "Writing model" | tee "$OUT/guided_speed.log"
wait $BUILD && BLS=auto || { BLS=python; tail -5 "$OUT/native_build.log"; }
if $PY -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("pytriton") is None)'; then
  PATH=/tmp/venv/bin:$PATH TRITONGEN_BACKEND_DIR=/tmp/backends timeout "${SERVED_TIMEOUT:-250}" \
    $PY bench/guided_served.py --bls $BLS --warmup 4 --duration 15 --out "$OUT/guided_served.json" 2>&1 |
    grep --line-buffered -v -e "Loading weights" -e "Writing model" | tee "$OUT/guided_served.log"
  cp /tmp/tritongen-guided-served/tritonserver.log "$OUT/tritonserver.log" 2>/dev/null
else
  echo "served part skipped: nvidia-pytriton is not in /tmp/venv (call 1 did not run on this machine)"
fi
ls "$OUT"
