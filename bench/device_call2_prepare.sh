# Sourced by a device call 2 script (carry [".whl/b", ".whl/t", ".dev/nl"]) after call 1 ran
# `bash bench/device_setup.sh .whl/a/*.whl` (carry [".whl/a"]) on the same warm machine: the carried wheels into
# /tmp/venv and tritongen's backends built by build.sh into /tmp/backends; the log in $OUT/setup.log.
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ls -d /tmp/venv/lib/python3*/site-packages/pytriton >/dev/null 2>&1 || { echo "pytriton missing in /tmp/venv: run call 1 first"; exit 3; }
# numpy 1.26 (the python stub's) breaks a scipy built for numpy 2, which transformers imports when present.
python3 -m pip uninstall -y -q scikit-learn scipy 2>&1 | tail -1
{ bash bench/device_setup.sh .whl/b/*.whl .whl/t/*.whl &&
  CMAKE_PREFIX_PATH=$PWD/.dev/nl/usr bash generator/tritongen/native/build.sh --prefix /tmp/backends --build-dir /tmp/native-build
} > "$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 3; }
tail -3 "$OUT/setup.log"
