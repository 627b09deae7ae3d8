#!/usr/bin/env bash
# GPU host, call 2 of 2 (carry [".whl/stop-b", ".whl/ens"]: numpy 1.26, tritonclient, grpcio, psutil, the tritongen
# wheel of this checkout with its compiled backends, prometheus_client). Call 1 (carry [".whl/stop-a"]) ran
# `bash bench/device_setup.sh .whl/stop-a/*.whl` (nvidia-pytriton, pydantic) on the same warm machine.
# `ensemble` served by the BLS itself (serving.ensemble: bls) against Triton's ensemble scheduler (triton):
# bench/engine_speed.py at 64 and 256 streams (8 client processes, exact text checked), then the steps generation
# runs after a client leaves (bench/ensemble_cancel.py). Results under $OUT.
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ls -d /tmp/venv/lib/python3*/site-packages/pytriton >/dev/null 2>&1 || { echo "pytriton missing in /tmp/venv: run call 1 first"; exit 3; }
python3 -m pip uninstall -y -q scikit-learn scipy 2>&1 | tail -1
bash bench/device_setup.sh .whl/stop-b/*.whl .whl/ens/*.whl > "$OUT/setup.log" 2>&1 || { tail -20 "$OUT/setup.log"; exit 3; }
PY=/tmp/venv/bin/python3
# As bench/device_stop_budget.sh (in .whl/stop-b): `import pytriton` imports its own client, which the machine lacks;
# serve only needs the package's folder. The backends are built on the machine from the installed wheel's sources.
mkdir -p /tmp/nl && dpkg -x .whl/stop-b/nlohmann-json3-dev_*.deb /tmp/nl
PKG=$($PY -c 'import os, tritongen; print(os.path.dirname(tritongen.__file__))')
sed -i 's/^        import pytriton$/        import importlib.util, types; pytriton = types.SimpleNamespace(__file__=importlib.util.find_spec("pytriton").origin)/' \
  "$PKG/serve/__init__.py"
[ -e /tmp/backends/tritongen_bls ] || CMAKE_PREFIX_PATH=/tmp/nl/usr bash "$PKG/native/build.sh" --prefix /tmp/backends \
  --build-dir /tmp/native-build > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 3; }
export TRITONGEN_BACKEND_DIR=/tmp/backends
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
