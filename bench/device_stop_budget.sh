#!/usr/bin/env bash
# GPU host, call 2 on the machine call 1 left warm. Call 1, carry [".whl/stop-a"] (nvidia-pytriton 0.7.0 and pydantic,
# docs/benchmarks.md): bash bench/device_setup.sh .whl/stop-a/*.whl. Call 2, carry [".whl/stop-b"] (numpy 1.26.4,
# tritonclient 2.73.0, grpcio, protobuf, python-rapidjson, gevent, geventhttpclient, greenlet, zope.event,
# zope.interface, brotli, certifi, urllib3 (tritonclient.http), this checkout's tritongen wheel, Debian's
# nlohmann-json3-dev .deb, this script): the backends built from the installed wheel's sources, then stop under load
# with the stop budget of the generated compose file (grace 30 s: --exit-timeout-secs=27, TRITONGEN_DRAIN_S=15):
# SIGTERM to tritonserver with 256 streams of a 5 ms ITL source read by 8 client processes (bench/native_stop.py).
# Usage: bash .whl/stop-b/device_stop_budget.sh REPS
. bench/device_stop_setup.sh
{ nproc; nvidia-smi -L; $PY -c 'from tritongen.plan.deploy import StopBudget as B; print(B.of(30, "compose").describe())'; } \
  | tee "$OUT/env.txt"
timeout "${LIMIT:-400}" $PY bench/native_stop.py --streams 256 --reps "${1:-8}" --target tritonserver --itl-ms 5 \
  --client-processes 8 --grace 30 --out "$OUT/native_stop_budget.json" 2>&1 | grep -v "model shards" \
  | tee "$OUT/native_stop_budget.log" | tail -30
D=$(ls -dt /tmp/native-stop-* | head -1); tar czf "$OUT/logs.tgz" -C "$D" . 2>/dev/null
ls "$OUT"
