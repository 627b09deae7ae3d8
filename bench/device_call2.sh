#!/usr/bin/env bash
# Device call 2 (carry .whl/b: numpy 1.26, tritonclient, grpcio, protobuf, python-rapidjson), right after call 1
# on the still-warm machine (its /tmp/venv holds nvidia-pytriton): the served benchmark. Results under $OUT.
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d /tmp/venv/lib ] && /tmp/venv/bin/python3 -c 'import pytriton' 2>/dev/null || { echo "pytriton missing: machine was not warm"; ls /tmp/venv 2>&1; }
# numpy 1.26 breaks the machine's scipy (needs numpy 2), which transformers imports (directly and through scikit-learn) when
# that is installed; this disposable machine drops scikit-learn so transformers does not import it.
python3 -m pip uninstall -y -q scikit-learn scipy 2>&1 | tail -1
bash bench/device_setup.sh .whl/b/*.whl 2>&1 | tee "$OUT/setup2.log"

/tmp/venv/bin/python3 bench/served.py --duration 20 --warmup 5 --long-duration 30 --stub-timeout 600 \
  --inprocess "${INPROC:-/tmp/inprocess_cb.json}" --out "$OUT/served.json" 2>&1 \
  | grep --line-buffered -v -e "Loading weights" -e "Writing model shards" | tee "$OUT/served.log"
cp /tmp/tritongen-bench/tritonserver.log "$OUT/tritonserver.log" 2>/dev/null
cp -r /tmp/tritongen-bench/repo/tensorrt_llm/config.pbtxt "$OUT/tensorrt_llm_config.pbtxt" 2>/dev/null
