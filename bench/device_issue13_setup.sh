#!/usr/bin/env bash
# The H200 rerun (bench/rerun.py), device call 1 of 2 (carry [".whl/a"]: nvidia-pytriton): makes /tmp/venv on the warm machine.
# Call 2 (bench/device_issue13.sh) must follow within the machine's idle window so /tmp/venv survives.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash bench/device_setup.sh .whl/a/*.whl 2>&1 | tee "$OUT/setup1.log"
