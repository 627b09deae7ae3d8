#!/usr/bin/env bash
# H200 host, device call 2 of 2 (carry [".whl/b", ".whl/t"], after call 1 `bash bench/device_setup.sh .whl/a/*.whl`).
# 1. The OpenAI frontend at engine speed: bench/engine_speed.py with the openai-text / openai-ids layouts (6 workers)
#    beside the source ceiling and the gRPC ensemble, 64 and 256 streams, 8 client processes.
# 2. The hf runtime served vs in-process over the same window (bench/rerun.py) at 1, 16 and 256 in flight.
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ls -d /tmp/venv/lib/python3*/site-packages/pytriton >/dev/null 2>&1 || { echo "pytriton missing in /tmp/venv: run call 1 first"; exit 3; }
python3 -m pip uninstall -y -q scikit-learn scipy 2>&1 | tail -1
bash bench/device_setup.sh .whl/b/*.whl .whl/t/*.whl > "$OUT/setup2.log" 2>&1 || { cat "$OUT/setup2.log"; exit 3; }
PY=/tmp/venv/bin/python3
$PY -m tritongen.cli demo-model build/tiny-llama > /dev/null
$PY bench/engine_speed.py --levels 64,256 --duration 10 --warmup 3 --processes 8 \
  --layouts tensorrt_llm,ensemble,openai-text,openai-ids --openai-workers 6 --name h200_engine_speed_openai 2>&1 \
  | grep -v "Writing model shards" | tee "$OUT/openai.log"
# 256 in flight x 256 tokens at ~100 ms ITL take ~25 s: a longer window so requests complete inside it.
$PY bench/rerun.py --levels 1,16 --warmup 4 --duration 12 --out /tmp/rerun 2>&1 \
  | grep --line-buffered -v -e "Loading weights" -e "Writing model shards" -e "non-existent request_id" | tail -8 | tee "$OUT/rerun.log"
cp /tmp/rerun/rerun.json "$OUT/rerun_1_16.json" 2>/dev/null
$PY bench/rerun.py --levels 256 --warmup 6 --duration 40 --out /tmp/rerun256 2>&1 \
  | grep --line-buffered -v -e "Loading weights" -e "Writing model shards" -e "non-existent request_id" | tail -6 | tee -a "$OUT/rerun.log"
cp /tmp/rerun256/rerun.json "$OUT/rerun_256.json" 2>/dev/null
tar czf "$OUT/results.tgz" bench/results/h200_engine_speed_openai* 2>/dev/null
ls "$OUT"
