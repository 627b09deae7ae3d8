#!/usr/bin/env bash
# H200 host, after call 1 (bench/device_setup.sh with the nvidia-pytriton wheel) on the same warm machine
# (carry [".whl/b", ".whl/t", ".dev/nl"]): builds the backends and runs SIGTERM-to-tritonserver with 256 streams in
# flight, keeping the server logs and, for a server that does not exit, its threads' stacks, under $OUT.
# Usage: bash bench/device_stop_diag.sh [REPS] [TARGET]
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if ! ls /tmp/backends/*/ >/dev/null 2>&1; then
  python3 -m pip uninstall -y -q scikit-learn scipy 2>&1 | tail -1
  bash bench/device_setup.sh .whl/b/*.whl .whl/t/*.whl > "$OUT/setup2.log" 2>&1 || { cat "$OUT/setup2.log"; exit 3; }
  CMAKE_PREFIX_PATH=$PWD/.dev/nl/usr bash generator/tritongen/native/build.sh --prefix /tmp/backends \
    --build-dir /tmp/native-build > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 3; }
fi
export TRITONGEN_BACKEND_DIR=/tmp/backends
{ nproc; command -v gdb || echo "no gdb"; } | tee "$OUT/env.txt"
for ITL in ${ITLS:-5}; do
timeout 400 /tmp/venv/bin/python3 bench/native_stop.py --streams ${STREAMS:-256} --reps "${1:-1}" --target "${2:-tritonserver}" --itl-ms $ITL \
  --out "$OUT/native_stop_$ITL.json" 2>&1 | grep -v "model shards" | tee "$OUT/native_stop_$ITL.log" | tail -20
W=$(ls -dt /tmp/native-stop-* | head -1); mkdir -p "$OUT/$ITL"; cp "$W"/tritonserver* "$W"/stacks-* "$OUT/$ITL/" 2>/dev/null
done
ls "$OUT"
