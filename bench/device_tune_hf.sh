#!/usr/bin/env bash
# `tritongen tune` on the hf runtime on the H200 host (bench/tune_hf.py --target h200), device call 3 of 3
# (call 2 carries [".whl/b", ".dev/nl"] and runs `. bench/device_call2_prepare.sh`; call 3 carries [".whl/t"] and runs
# this; bench/device_call2_prepare.sh). Results under $OUT: tune_hf-h200.json, the
# log, the tune's trials.csv/top.json/changes.md/pareto.png and winning spec.
. bench/device_call2_prepare.sh
PATH=/tmp/venv/bin:$PATH TRITONGEN_BACKEND_DIR=/tmp/backends timeout "${TUNE_TIMEOUT:-520}" \
  /tmp/venv/bin/python3 bench/tune_hf.py --target h200 --out "$OUT/tune_hf-h200.json" --keep "$OUT/tune" "$@" 2>&1 |
  grep --line-buffered -v -e "Loading weights" -e "Writing model shards" | tee "$OUT/tune_hf.log" | tail -40
exit "${PIPESTATUS[0]}"
