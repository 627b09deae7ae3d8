# Two entry points for a fresh machine: `make demo` and `make test`. Both install what they need first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NATIVE_STAMP := $(VENV)/.native-built
NATIVE_SOURCES := $(wildcard generator/tritongen/native/*.h generator/tritongen/native/*.cc generator/tritongen/native/bls/* \
	generator/tritongen/native/tokensource/* \
	generator/tritongen/native/CMakeLists.txt)
# The editable install, with this environment's scikit-build-core (so both calls use the same CMake generator) and a
# kept CMake build folder, so that `make native` recompiles only what changed.
EDITABLE := $(BIN)/python -m pip install -q --no-build-isolation --config-settings=build-dir=build/editable
BUILD_BACKEND := $(BIN)/python -m pip install -q "scikit-build-core>=1.1"

.PHONY: install native demo test test-fast goldens clean

# The serving image's python pins constrain this environment too: the suite runs what Dockerfile.serving installs.
PINS := deploy/templates/serving-packages.txt

# The package build (scikit-build-core, pyproject.toml) compiles the native Triton backends (C++: the BLS and the
# synthetic runtime's token source) and installs them into .venv/lib/tritongen/backends, where `serve` finds them
# (tritongen.native.installed_dir): the same build and place as `pip install` of a wheel. Never on `serve`.
$(STAMP): pyproject.toml $(PINS)
	# docker-compose v1 validates generated compose files offline (PyPI's 1.29 conflicts with our pins).
	command -v docker-compose >/dev/null || (apt-get update -qq && apt-get install -y -qq --no-install-recommends docker-compose) \
		|| echo "docker-compose not installed: compose validation tests will be skipped"
	# What the native backends' build needs (the build's error names the same packages when one is missing).
	test -f /usr/include/nlohmann/json.hpp && command -v cmake >/dev/null && command -v g++ >/dev/null \
		|| (apt-get update -qq && apt-get install -y -qq --no-install-recommends cmake g++ nlohmann-json3-dev)
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# The CPU build of torch; on a GPU machine install torch as usual before `make`.
	$(BIN)/python -m pip install -q -c $(PINS) torch || $(BIN)/python -m pip install -q torch
	$(BUILD_BACKEND)
	$(EDITABLE) -c $(PINS) -e ".[dev]"
	# xgrammar requires OpenAI's triton on Linux x86_64 for its CUDA kernels only (the CPU path never imports it);
	# with the CPU torch it is dead weight that torch._dynamo loads into every stub that generates (~90 MB each).
	# A CUDA torch keeps the triton it brings.
	$(BIN)/python -c "import sys, torch; sys.exit(torch.version.cuda is not None)" \
		&& $(BIN)/python -m pip uninstall -q -y triton || true
	touch $(STAMP) $(NATIVE_STAMP)

# After a change to the backends' sources (or in a .venv made before the package build compiled them): the same
# editable install, without dependencies, recompiling.
$(NATIVE_STAMP): $(NATIVE_SOURCES) | $(STAMP)
	$(BUILD_BACKEND)
	$(EDITABLE) --no-deps -e .
	touch $@

install: $(STAMP) $(NATIVE_STAMP)

native: $(NATIVE_STAMP)

demo: install
	$(BIN)/python -m tritongen.cli demo

# Two passes, each listing its slowest tests (the suite's time budget: docs/maintainers.md): the suite on
# $(TEST_WORKERS) pytest-xdist workers, one test file each at a time, longest files first (tests/conftest.py); then,
# alone, the tests marked `serial` (a latency, pace or refusal that a neighbour would upset). Both passes always run;
# either one failing fails `make test`.
TEST_WORKERS ?= 3
# A tritonserver that dies under a test is recorded in $(CRASHES) (tests/conftest.py), printed last.
CRASHES := build/test-crashes.txt
test: install
	mkdir -p build && rm -f $(CRASHES)
	export TRITONGEN_TEST_CRASHES=$(abspath $(CRASHES)); \
	$(BIN)/python -m pytest -q -ra -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not serial" \
		--durations=25; parallel=$$?; \
	$(BIN)/python -m pytest -q -ra -m serial --durations=10; serial=$$?; \
	if test -s $(CRASHES); then echo "== tritonservers that died under tests:"; tail -n 80 $(CRASHES); fi; \
	test $$parallel -eq 0 && test $$serial -eq 0

# Unit, golden and contract tests: no tritonserver is started (a few minutes on 2 cores).
test-fast: install
	$(BIN)/python -m pytest -q -m "not integration"

# Rewrite the golden folders under tests/golden from what tritongen renders now: only on purpose, then review
# `git diff tests/golden` (tests/specs.py:assert_golden is the one implementation).
goldens: install
	TRITONGEN_REGEN_GOLDEN=1 $(BIN)/python -m pytest -q -m "not integration" -k golden tests

clean:
	rm -rf $(VENV) build demo-output
