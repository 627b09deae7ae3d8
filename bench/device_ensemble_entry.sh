#!/usr/bin/env bash
# GPU host, call 2 of 2 (carry [".whl/stop-b", ".whl/ens"]: numpy 1.26, tritonclient, grpcio, psutil, the tritongen
# wheel of this checkout with its compiled backends, prometheus_client). Call 1 (carry [".whl/stop-a"]) ran
# `bash bench/device_setup.sh .whl/stop-a/*.whl` (nvidia-pytriton, pydantic) on the same warm machine.
# `ensemble` served by the BLS itself (serving.ensemble: bls) against Triton's ensemble scheduler (triton):
# bench/engine_speed.py at 64 and 256 streams (8 client processes, exact text checked), then the steps generation
# runs after a client leaves (bench/ensemble_cancel.py). Results under $OUT.
EXTRA=".whl/ens/*.whl" . bench/device_stop_setup.sh
{ nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$OUT/env.txt" 2>&1; cat "$OUT/env.txt"
$PY -m tritongen.cli demo-model build/tiny-llama > /dev/null || exit 3
for setting in ${SETTINGS:-bls triton}; do
  $PY bench/engine_speed.py --levels ${LEVELS:-64,256} --duration ${DUR:-10} --warmup 3 --processes 8 \
    --layouts tensorrt_llm,tensorrt_llm_bls,ensemble --set serving.ensemble=$setting --repeat ${REPEAT:-2} \
    --name ensemble_entry_$setting 2>&1 | tail -14 | tee "$OUT/speed_$setting.log"
done
$PY bench/ensemble_cancel.py --streams 64 --repeat 3 --name ensemble_cancel_gpu 2>&1 | tail -9 | tee "$OUT/cancel.log"
cp bench/results/ensemble_entry_* bench/results/ensemble_cancel_gpu.json "$OUT/" 2>/dev/null
ls "$OUT"
