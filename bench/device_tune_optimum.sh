#!/usr/bin/env bash
# `python bench/tune_optimum.py --mode served` on the H200 host (16 cores), device call 2 of 2
# (carry [".whl/b", ".whl/t", ".dev/nl", "build/tiny-llama"]), right after `bash bench/device_setup.sh .whl/a/*.whl`
# (carry [".whl/a"]). Usage: bash bench/device_tune_optimum.sh [SLO] (default tight_itl). Results under $OUT.
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip uninstall -y -q scikit-learn scipy 2>&1 | tail -1   # numpy 1.26 (the stub's) breaks a numpy-2 scipy
{ bash bench/device_setup.sh .whl/b/*.whl .whl/t/*.whl &&
  CMAKE_PREFIX_PATH=$PWD/.dev/nl/usr bash generator/tritongen/native/build.sh --prefix /tmp/backends --build-dir /tmp/native-build
} > "$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 3; }
PATH=/tmp/venv/bin:$PATH TRITONGEN_BACKEND_DIR=/tmp/backends timeout "${TUNE_TIMEOUT:-520}" \
  /tmp/venv/bin/python3 bench/tune_optimum.py --mode served --slo "${1:-tight_itl}" 2>&1 | tee "$OUT/tune_optimum.log" | grep -E "^\[trial|optimum|winner|goodput|Error|error" | tail -40
rc=${PIPESTATUS[0]}
cp bench/results/tune_optimum-served-*.json "$OUT/" 2>/dev/null
exit $rc
