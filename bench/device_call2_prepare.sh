# Sourced by a device script after call 1 ran `bash bench/device_setup.sh .whl/a/*.whl` (carry [".whl/a"]) on the
# same warm machine. It installs whichever of .whl/b and .whl/t this call carries into /tmp/venv and builds
# tritongen's backends into /tmp/backends (once; needs .dev/nl). One call cannot carry .whl/b, .whl/t and .dev/nl
# together (more than 64 MiB): carry [".whl/b", ".dev/nl"] in call 2 and [".whl/t"] (plus what the bench needs)
# in call 3, which runs the bench; the log in $OUT/setup.log.
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
# Locust's worker processes import tritongen from the checkout (it is not installed in /tmp/venv).
export PYTHONPATH=$PWD/generator${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ls -d /tmp/venv/lib/python3*/site-packages/pytriton >/dev/null 2>&1 || { echo "pytriton missing in /tmp/venv: run call 1 first"; exit 3; }
# numpy 1.26 (the python stub's) breaks a scipy built for numpy 2, which transformers imports when present.
python3 -m pip uninstall -y -q scikit-learn scipy 2>&1 | tail -1
wheels=$(ls .whl/b/*.whl .whl/t/*.whl 2>/dev/null)
{ { [ -z "$wheels" ] || bash bench/device_setup.sh $wheels; } &&
  { [ -e /tmp/backends/tritongen_bls ] ||
    CMAKE_PREFIX_PATH=$PWD/.dev/nl/usr bash generator/tritongen/native/build.sh --prefix /tmp/backends --build-dir /tmp/native-build; }
} > "$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 3; }
tail -3 "$OUT/setup.log"
