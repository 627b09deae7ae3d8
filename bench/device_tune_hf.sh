#!/usr/bin/env bash
# `tritongen tune` on the hf runtime on the H200 host (bench/tune_hf.py --target h200), device call 2 of 2
# (carry [".whl/b", ".whl/t", ".dev/nl"]), right after `bash bench/device_setup.sh .whl/a/*.whl` (carry [".whl/a"]).
# Results under $OUT: tune_hf-h200.json, the log, the tune directory's trials.csv/top.json.
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# numpy 1.26 (the stub needs numpy < 2) breaks a scipy built for numpy 2, which transformers imports when present.
python3 -m pip uninstall -y -q scikit-learn scipy 2>&1 | tail -1
{ bash bench/device_setup.sh .whl/b/*.whl .whl/t/*.whl &&
  CMAKE_PREFIX_PATH=$PWD/.dev/nl/usr bash generator/tritongen/native/build.sh --prefix /tmp/backends --build-dir /tmp/native-build
} > "$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 3; }
tail -3 "$OUT/setup.log"
PATH=/tmp/venv/bin:$PATH TRITONGEN_BACKEND_DIR=/tmp/backends timeout "${TUNE_TIMEOUT:-520}" \
  /tmp/venv/bin/python3 bench/tune_hf.py --target h200 --out "$OUT/tune_hf-h200.json" --keep "$OUT/tune" "$@" 2>&1 |
  grep --line-buffered -v -e "Loading weights" -e "Writing model shards" | tee "$OUT/tune_hf.log" | tail -40
exit "${PIPESTATUS[0]}"
