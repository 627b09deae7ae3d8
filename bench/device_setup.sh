#!/usr/bin/env bash
# On the GPU machine: a virtual environment at /tmp/venv whose own site-packages (searched first) hold the
# carried wheels (numpy 1.26 for the python backend, nvidia-pytriton, tritonclient, pydantic, ...) and which then
# sees the machine's torch/transformers through a .pth file. tritonserver's python stub uses the `python3` first
# on PATH and that interpreter's venv (generator/tritongen/serve.py server_env puts sys.executable's folder first).
# Usage: bash bench/device_setup.sh WHEEL...   (idempotent; later calls add wheels)
set -u
BASE=$(python3 -c 'import os,sys; print(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))')
V=/tmp/venv
VER=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
SP=$V/lib/python$VER/site-packages
mkdir -p $V/bin $SP
ln -sf "$BASE" $V/bin/python3; ln -sf "$BASE" $V/bin/python; ln -sf "$BASE" $V/bin/python$VER
printf 'home = %s\ninclude-system-site-packages = false\nversion = %s\n' "$(dirname "$BASE")" "$VER" > $V/pyvenv.cfg
python3 - "$SP" <<'PY'
import site, sys
paths = [p for p in site.getsitepackages() + [site.getusersitepackages()] if p != sys.argv[1]]
open(sys.argv[1] + "/zzz_machine_env.pth", "w").write(
    "import site; " + "; ".join(f"site.addsitedir({p!r})" for p in paths) + "\n")
PY
if [ $# -gt 0 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SP "$@" || exit 1
fi
echo "base=$BASE libdir=$($V/bin/python3 -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')"
ls "$($V/bin/python3 -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')"/libpython* 2>&1 | head -3
$V/bin/python3 -c 'import sys, numpy, torch, transformers; print(sys.prefix, "numpy", numpy.__version__, "torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.cuda.is_available())'
