#!/usr/bin/env bash
# GPU host, call 2 of 2 (carry [".whl/stop-b"]: numpy 1.26, tritonclient, grpcio, psutil, gevent, this checkout's
# tritongen wheel, nlohmann-json3-dev's .deb). Call 1 (carry [".whl/stop-a"]) ran
# `bash bench/device_setup.sh .whl/stop-a/*.whl` (nvidia-pytriton, pydantic) on the same warm machine.
# Stop under load with streams through every entry at once (ensemble, tensorrt_llm_bls, tensorrt_llm; 256 streams of
# a 5 ms ITL source over 9 client processes, 3 per entry): SIGTERM to tritonserver with the Kubernetes stop budget
# (grace 30 s: preStop 5, drain 10, --exit-timeout-secs=22), then SIGTERM to `tritongen serve` (grace 30 s).
# Usage: bash bench/device_stop_entries.sh K8S_REPS SERVE_REPS   (results under $OUT)
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; W=.whl/stop-b; PY=/tmp/venv/bin/python3
ls -d /tmp/venv/lib/python3*/site-packages/pytriton >/dev/null 2>&1 || { echo "pytriton missing in /tmp/venv: run call 1 first"; exit 3; }
python3 -m pip uninstall -y -q scikit-learn scipy 2>&1 | tail -1
bash bench/device_setup.sh $W/*.whl > "$OUT/setup.log" 2>&1 || { tail -20 "$OUT/setup.log"; exit 3; }
mkdir -p /tmp/nl && dpkg -x $W/nlohmann-json3-dev_*.deb /tmp/nl
PKG=$($PY -c 'import os, tritongen; print(os.path.dirname(tritongen.__file__))')
# `import pytriton` imports its own client, which the machine lacks: serve only needs the package's folder.
sed -i 's/^        import pytriton$/        import importlib.util, types; pytriton = types.SimpleNamespace(__file__=importlib.util.find_spec("pytriton").origin)/' \
  "$PKG/serve/__init__.py"
CMAKE_PREFIX_PATH=/tmp/nl/usr bash "$PKG/native/build.sh" --prefix /tmp/backends --build-dir /tmp/native-build \
  > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 3; }
export TRITONGEN_BACKEND_DIR=/tmp/backends
{ nproc; nvidia-smi -L; $PY -c 'from tritongen.plan.deploy import StopBudget as B; print(B.of(30, "k8s").describe())'; } \
  | tee "$OUT/env.txt"
E=ensemble,tensorrt_llm_bls,tensorrt_llm
timeout 330 $PY bench/native_stop.py --streams 256 --reps "${1:-8}" --target tritonserver --budget k8s --entries $E \
  --itl-ms 5 --client-processes 9 --grace 30 --out "$OUT/stop_entries_k8s.json" 2>&1 | grep -v "model shards" | tail -14
timeout 200 $PY bench/native_stop.py --streams 256 --reps "${2:-5}" --target serve --entries $E \
  --itl-ms 5 --client-processes 9 --grace 30 --out "$OUT/stop_entries_serve.json" 2>&1 | grep -v "model shards" | tail -14
ls "$OUT"
