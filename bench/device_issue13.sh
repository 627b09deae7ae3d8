#!/usr/bin/env bash
# The H200 rerun (bench/rerun.py), device call 2 of 2 (carry [".whl/b", ".whl/t"]: numpy 1.26, tritonclient, grpcio, Locust and its
# dependencies; .whl/t = the tritongen wheel built from this checkout). One command: in-process and served (driven by
# `tritongen loadtest`) at 1/4/16/64/256 in flight, 128 in / 256 out, Llama-3.2-1B shape. Results under $OUT.
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ls -d /tmp/venv/lib/python3*/site-packages/pytriton >/dev/null 2>&1 || { echo "pytriton missing in /tmp/venv: run bench/device_issue13_setup.sh first"; exit 3; }
# numpy 1.26 (the stub needs numpy < 2) breaks a scipy built for numpy 2, which transformers imports when present.
python3 -m pip uninstall -y -q scikit-learn scipy 2>&1 | tail -1
bash bench/device_setup.sh .whl/b/*.whl .whl/t/*.whl > "$OUT/setup2.log" 2>&1 || { cat "$OUT/setup2.log"; exit 3; }
tail -3 "$OUT/setup2.log"
{ nvidia-smi; /tmp/venv/bin/python3 -m pip list 2>/dev/null | grep -i -E "^(torch|transformers|numpy|locust|tritonclient|tritongen|nvidia-pytriton) "; } > "$OUT/env.txt" 2>&1
/tmp/venv/bin/python3 bench/rerun.py --out "$OUT" 2>&1 | grep --line-buffered -v -e "Loading weights" -e "Writing model shards" -e "non-existent request_id" | tee "$OUT/rerun.log"
rc=${PIPESTATUS[0]}
cp /tmp/tritongen-rerun/tritonserver.log "$OUT/tritonserver.log" 2>/dev/null
cp /tmp/tritongen-rerun/repo/tensorrt_llm/config.pbtxt "$OUT/tensorrt_llm_config.pbtxt" 2>/dev/null
echo "rerun.py exit code $rc"
exit $rc
