#!/usr/bin/env bash
# H200 host, device call 2 (carry [".whl/b", ".whl/t", ".dev/nl"]: numpy 1.26, tritonclient, Locust, the frontend's
# packages and optuna; the tritongen wheel of this checkout; Debian's nlohmann-json3-dev unpacked). Call 1 (carry
# [".whl/a"]) ran `bash bench/device_setup.sh .whl/a/*.whl` (nvidia-pytriton) on the same warm machine.
# The fast path in deployments: the backends built by build.sh (CMake) as the serving image builds them; the
# repository `tritongen deploy --target compose` writes against `tritongen serve`'s (bench/deploy_parity.py); the
# OpenAI frontend at its planned worker count (bench/engine_speed.py). Call 3: bench/device_issue27_stop.sh.
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ls -d /tmp/venv/lib/python3*/site-packages/pytriton >/dev/null 2>&1 || { echo "pytriton missing in /tmp/venv: run call 1 first"; exit 3; }
python3 -m pip uninstall -y -q scikit-learn scipy 2>&1 | tail -1
bash bench/device_setup.sh .whl/b/*.whl .whl/t/*.whl > "$OUT/setup2.log" 2>&1 || { cat "$OUT/setup2.log"; exit 3; }
export CMAKE_PREFIX_PATH=$PWD/.dev/nl/usr TRITONGEN_BACKEND_DIR=/tmp/backends
{ nproc; g++ --version | head -1; cmake --version | head -1; /tmp/venv/bin/python3 -m pip list 2>/dev/null | grep -i -E "^(torch|transformers|numpy|tritonclient|tritongen|nvidia-pytriton|locust) "; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
T0=$(date +%s)
bash generator/tritongen/native/build.sh --prefix /tmp/backends --build-dir /tmp/native-build > "$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; exit 3; }
echo "build.sh: $(( $(date +%s) - T0 )) s"; ls /tmp/backends/*/
PY=/tmp/venv/bin/python3
$PY -m tritongen.cli demo-model build/tiny-llama > /dev/null
timeout 250 $PY bench/deploy_parity.py --streams 256 --processes 8 --duration 10 --warmup 3 --repeat 3 \
  --name h200_deploy_parity 2>&1 | grep -v "model shards" | tail -25
timeout 150 $PY bench/engine_speed.py --levels 256 --duration 10 --warmup 3 --processes 8 \
  --layouts tensorrt_llm,ensemble,openai-text --name h200_engine_speed_planned 2>&1 | grep -v "model shards" | tail -12
tar czf "$OUT/results.tgz" bench/results/h200_deploy_parity* bench/results/h200_engine_speed_planned* 2>/dev/null
ls "$OUT"
