#!/usr/bin/env bash
# H200 host, device call 2 of 2 (carry [".whl/b", ".whl/t"]: numpy 1.26, tritonclient, grpcio, pydantic, Locust,
# the OpenAI frontend's packages; .whl/t = the tritongen wheel of this checkout). Call 1 (carry [".whl/a"]) ran
# `bash bench/device_setup.sh .whl/a/*.whl` (nvidia-pytriton) on the same warm machine.
# Engine-speed serving path: bench/engine_speed.py at 64 and 256 streams, 8 client processes, every layout, the
# native BLS (default) and the python BLS. Results under $OUT.
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ls -d /tmp/venv/lib/python3*/site-packages/pytriton >/dev/null 2>&1 || { echo "pytriton missing in /tmp/venv: run call 1 first"; exit 3; }
python3 -m pip uninstall -y -q scikit-learn scipy 2>&1 | tail -1
bash bench/device_setup.sh .whl/b/*.whl .whl/t/*.whl > "$OUT/setup2.log" 2>&1 || { cat "$OUT/setup2.log"; exit 3; }
tail -2 "$OUT/setup2.log"
{ nproc; g++ --version | head -1; /tmp/venv/bin/python3 -m pip list 2>/dev/null | grep -i -E "^(torch|transformers|numpy|tritonclient|tritongen|nvidia-pytriton|grpcio) "; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
PY=/tmp/venv/bin/python3
$PY -m tritongen.cli demo-model build/tiny-llama > /dev/null
LEVELS=${LEVELS:-64,256}; DUR=${DUR:-10}
$PY bench/engine_speed.py --levels $LEVELS --duration $DUR --warmup 3 --processes 8 --name h200_engine_speed_native 2>&1 | tee "$OUT/native.log"
$PY bench/engine_speed.py --levels $LEVELS --duration $DUR --warmup 3 --processes 8 --set serving.bls=python \
  --layouts ensemble --name h200_engine_speed_pybls 2>&1 | tail -6 | tee "$OUT/pybls.log"
tar czf "$OUT/results.tgz" bench/results/h200_engine_speed_* 2>/dev/null
ls "$OUT"
