#!/usr/bin/env bash
# GPU host, call 2 of 2 (carry [".whl/stop-b"]: numpy 1.26, tritonclient, grpcio, psutil, gevent, geventhttpclient + brotli + certifi (tritonclient.http), this checkout's
# tritongen wheel, nlohmann-json3-dev's .deb). Call 1 (carry [".whl/stop-a"]) ran
# `bash bench/device_setup.sh .whl/stop-a/*.whl` (nvidia-pytriton, pydantic) on the same warm machine.
# Stop under load with streams through every entry at once (ensemble, tensorrt_llm_bls, tensorrt_llm; 256 streams of
# a 5 ms ITL source over 9 client processes, 3 per entry): SIGTERM to tritonserver with the Kubernetes stop budget
# (grace 30 s: preStop 5, drain 10, --exit-timeout-secs=22), then SIGTERM to `tritongen serve` (grace 30 s), then
# SIGKILL to serve (its tritonserver gets SIGTERM from the kernel: PR_SET_PDEATHSIG).
# Usage: bash bench/device_stop_entries.sh K8S_REPS SERVE_REPS [KILL_REPS]   (results under $OUT; 0 skips a kind)
. bench/device_stop_setup.sh
{ nproc; nvidia-smi -L; $PY -c 'from tritongen.plan.deploy import StopBudget as B; print(B.of(30, "k8s").describe())'; } \
  | tee "$OUT/env.txt"
E=ensemble,tensorrt_llm_bls,tensorrt_llm
[ "${1:-8}" = 0 ] || timeout ${K8S_LIMIT:-330} $PY bench/native_stop.py --streams 256 --reps "${1:-8}" --target tritonserver --budget k8s --entries $E \
  --itl-ms 5 --client-processes 9 --grace 30 --out "$OUT/stop_entries_k8s.json" 2>&1 | grep -v "model shards" | tee -a "$OUT/stop_entries.log" | tail -14
[ "${2:-5}" = 0 ] || timeout ${SERVE_LIMIT:-200} $PY bench/native_stop.py --streams 256 --reps "${2:-5}" --target serve --entries $E \
  --itl-ms 5 --client-processes 9 --grace 30 --out "$OUT/stop_entries_serve.json" 2>&1 | grep -v "model shards" | tee -a "$OUT/stop_entries.log" | tail -14
[ "${3:-0}" = 0 ] || timeout ${KILL_LIMIT:-200} $PY bench/native_stop.py --streams 256 --reps "$3" --target serve-kill \
  --entries $E --itl-ms 5 --client-processes 9 --grace 30 --out "$OUT/stop_entries_serve_kill.json" 2>&1 |
  grep -v "model shards" | tee -a "$OUT/stop_entries.log" | tail -14
ls "$OUT"
