# Sourced by the GPU-host scripts that serve from this checkout's tritongen wheel (device_stop_budget.sh,
# device_stop_entries.sh, device_ensemble_entry.sh) after call 1 ran `bash bench/device_setup.sh .whl/stop-a/*.whl`
# on the same warm machine. Installs the wheels of $W (default .whl/stop-b) and any $EXTRA into /tmp/venv, builds the
# native backends from the installed wheel's sources into /tmp/backends (Debian's nlohmann-json3-dev .deb in $W) and
# exports TRITONGEN_BACKEND_DIR; sets OUT, PY and PKG. Logs in $OUT/setup.log and $OUT/build.log.
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; W=${W:-.whl/stop-b}; PY=/tmp/venv/bin/python3
ls -d /tmp/venv/lib/python3*/site-packages/pytriton >/dev/null 2>&1 || { echo "pytriton missing in /tmp/venv: run call 1 first"; exit 3; }
# numpy 1.26 (the python stub's) breaks a scipy built for numpy 2, which transformers imports when present.
python3 -m pip uninstall -y -q scikit-learn scipy 2>&1 | tail -1
bash bench/device_setup.sh $W/*.whl ${EXTRA:-} > "$OUT/setup.log" 2>&1 || { tail -20 "$OUT/setup.log"; exit 3; }
mkdir -p /tmp/nl && dpkg -x $W/nlohmann-json3-dev_*.deb /tmp/nl
PKG=$($PY -c 'import os, tritongen; print(os.path.dirname(tritongen.__file__))')
# `import pytriton` imports its own client (gevent, pyzmq, ...), which the machine lacks: only the package's folder
# is needed (serve's _pytriton_root), so the installed copy finds it without importing it.
sed -i 's/^        import pytriton$/        import importlib.util, types; pytriton = types.SimpleNamespace(__file__=importlib.util.find_spec("pytriton").origin)/' \
  "$PKG/serve/__init__.py"
[ -e /tmp/backends/tritongen_bls ] || CMAKE_PREFIX_PATH=/tmp/nl/usr bash "$PKG/native/build.sh" --prefix /tmp/backends \
  --build-dir /tmp/native-build > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 3; }
export TRITONGEN_BACKEND_DIR=/tmp/backends
