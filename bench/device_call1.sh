#!/usr/bin/env bash
# Device call 1 (carry .whl/a: nvidia-pytriton + pydantic): environment facts, NVML placement, the in-process
# continuous-batching levels and the optimisation ladder. Results under $OUT.
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi > "$OUT/env.txt" 2>&1; python3 -m pip list 2>/dev/null | grep -i -E "^(torch|transformers|numpy|nvidia-ml-py|pydantic|grpcio|protobuf|psutil) " >> "$OUT/env.txt"
bash bench/device_setup.sh .whl/a/*.whl > "$OUT/setup.log" 2>&1 &
SETUP=$!
python3 bench/inprocess_cb.py --duration 20 --warmup 5 --long-duration 30 --out "$OUT/inprocess_cb.json" 2>&1 \
  | grep --line-buffered -v -e "non-existent request_id" -e "Loading weights" | tee "$OUT/inprocess.log"
cp "$OUT/inprocess_cb.json" /tmp/inprocess_cb.json
wait $SETUP; cat "$OUT/setup.log"
PYTHONPATH=. /tmp/venv/bin/python3 -c '
from tritongen.placement.inventory import load_inventory
from tritongen.placement.memory import load_memory_model
from tritongen.placement import place
inv = load_inventory("nvml"); print(inv)
print(place(inv, load_memory_model("tests/fixtures/engines/llama3-8b-bf16-tp1/config.json"), max_seq_len=4096).to_table())
' > "$OUT/plan_nvml.txt" 2>&1; cat "$OUT/plan_nvml.txt"
python3 bench/ladder.py --cb-duration 15 --out "$OUT/ladder.json" 2>&1 \
  | grep --line-buffered -v -e "non-existent request_id" -e "Loading weights" | tee "$OUT/ladder.log"
