#!/usr/bin/env bash
# Build tritongen's native Triton backends with CMake and install them as DIR/<backend>/libtriton_<backend>.so.
#
#   build.sh --prefix DIR [--triton-include DIR] [--triton-lib DIR] [--build-dir DIR]
#            [--sanitize address,undefined|thread] [--required-api-minor N]
#
# One entry point for `make install`, CI and the serving image's builder stage. Needs cmake (>= 3.17), a C++17
# compiler and nlohmann/json (Debian/Ubuntu: nlohmann-json3-dev). With --triton-include (in the NGC container:
# /opt/tritonserver/include, --triton-lib /opt/tritonserver/lib) the backends compile against Triton's own headers;
# without, against the declarations in triton_api.h.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prefix="" triton_include="" triton_lib="" build_dir="" sanitize="" api_minor=""

usage() { sed -n '4,5p' "${BASH_SOURCE[0]}" | sed 's/^# *//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --prefix) prefix="${2:?}"; shift 2 ;;
    --triton-include) triton_include="${2:?}"; shift 2 ;;
    --triton-lib) triton_lib="${2:?}"; shift 2 ;;
    --build-dir) build_dir="${2:?}"; shift 2 ;;
    --sanitize) sanitize="${2:?}"; shift 2 ;;
    --required-api-minor) api_minor="${2:?}"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "build.sh: unknown argument $1" >&2; usage ;;
  esac
done
[[ -n "$prefix" ]] || { echo "build.sh: --prefix DIR is required" >&2; usage; }
case "$sanitize" in ""|address|undefined|address,undefined|undefined,address|thread) ;;
  *) echo "build.sh: --sanitize $sanitize: expected address,undefined or thread" >&2; exit 2 ;;
esac
if [[ -n "$triton_include" && ! -f "$triton_include/triton/core/tritonbackend.h" ]]; then
  echo "build.sh: --triton-include $triton_include has no triton/core/tritonbackend.h" >&2; exit 2
fi
command -v cmake >/dev/null || { echo "build.sh: cmake not found; install cmake (>= 3.17)" >&2; exit 3; }

cleanup=""
if [[ -z "$build_dir" ]]; then
  build_dir="$(mktemp -d "${TMPDIR:-/tmp}/tritongen-native-build.XXXXXX")"
  cleanup="$build_dir"
fi
trap '[[ -n "$cleanup" ]] && rm -rf "$cleanup"' EXIT

jobs="$(nproc 2>/dev/null || echo 2)"
cmake -S "$here" -B "$build_dir" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-Release}" \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DTRITON_INCLUDE_DIR="$triton_include" -DTRITON_LIB_DIR="$triton_lib" \
  -DTRITONGEN_SANITIZE="$sanitize" -DTRITONGEN_REQUIRED_API_MINOR="$api_minor" >/dev/null
cmake --build "$build_dir" --parallel "$jobs"
cmake --install "$build_dir" >/dev/null
for backend in tritongen_bls tritongen_tokensource; do
  echo "$prefix/$backend/libtriton_$backend.so"
done
