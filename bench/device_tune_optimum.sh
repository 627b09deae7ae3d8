#!/usr/bin/env bash
# `python bench/tune_optimum.py --mode served` on the H200 host (16 cores), device call 3 of 3
# (call 2 carries [".whl/b", ".dev/nl"] and runs `. bench/device_call2_prepare.sh`; call 3 carries [".whl/t",
# "build/tiny-llama"] and runs this; bench/device_call2_prepare.sh).
# Usage: bash bench/device_tune_optimum.sh [SLO] (default tight_itl). Results under $OUT.
. bench/device_call2_prepare.sh
PATH=/tmp/venv/bin:$PATH TRITONGEN_BACKEND_DIR=/tmp/backends timeout "${TUNE_TIMEOUT:-520}" \
  /tmp/venv/bin/python3 bench/tune_optimum.py --mode served --slo "${1:-tight_itl}" 2>&1 | tee "$OUT/tune_optimum.log" |
  grep -E "^\[trial|optimum|winner|goodput|Error|error" | tail -40
rc=${PIPESTATUS[0]}
cp bench/results/tune_optimum-served-*.json "$OUT/" 2>/dev/null
exit $rc
