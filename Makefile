# The two commands a new machine needs: `make demo` and `make test`.
# Each bootstraps what it needs (a .venv, the npm chain toolchain) and is quick when done.
SHELL := /bin/bash
# The locks pin CPython 3.11's wheels (the image's Python): python3.11 where it runs,
# else python3, which the venv's creation checks
PYTHON ?= $(shell python3.11 -c '' >/dev/null 2>&1 && echo python3.11 || echo python3)
VENV := .venv
PY := $(VENV)/bin/python
PIP_STAMP := $(VENV)/.stamp-install
NPM_STAMP := node_modules/.stamp-install
# the benchmarks' second node (bench/hardhat_node.py), only `make bench` installs it
BENCH_NPM_STAMP := bench/hardhat/node_modules/.stamp-install
# Debian packages the tests drive for real: a Prometheus server (scrape and rule tests),
# headless Chromium (status page), and a container engine that builds and runs the image
# (podman with runc; debootstrap makes its local base image: tests/ship/test_ship_image.py),
# and a PostgreSQL 15 server (the second store backend: tests/support/postgres.py)
DEBIAN_PACKAGES := prometheus chromium podman runc debootstrap postgresql

.PHONY: demo test lint fmt bench reliability fuzz contracts deps deps-debian bytecode clean

deps: $(PIP_STAMP) $(NPM_STAMP)

deps-debian:
	scripts/ensure-debian-packages $(DEBIAN_PACKAGES)

# requirements-dev.lock is requirements.lock (what the container installs) plus the dev tools
$(PIP_STAMP): pyproject.toml requirements.lock requirements-dev.lock keeper/rpc/_logscan.c
	test -x $(PY) || { $(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
	  || { echo "the locks pin CPython 3.11's wheels and $(PYTHON) is not 3.11 ($$($(PYTHON) -V 2>&1));" \
	       "install Python 3.11, or name it: make PYTHON=/path/to/python3.11"; exit 1; }; \
	  $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.lock
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	touch $@

$(NPM_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(BENCH_NPM_STAMP): bench/hardhat/package.json bench/hardhat/package-lock.json
	npm ci --prefix bench/hardhat --no-audit --no-fund --loglevel=error
	touch $@

# The package's bytecode, as `pip install` of the wheel writes it: the editable install
# leaves none where PYTHONDONTWRITEBYTECODE is set, and every `keeper` command (the
# benchmarks' and the tests' subprocesses among them) would then compile its modules anew
# at each start. Stale files are recompiled; a missing or stale one is only slower.
bytecode: deps
	$(PY) -m compileall -q keeper

demo: deps bytecode
	$(VENV)/bin/keeper devnet

# lint first: CI runs `make test` alone, so the style and type checks are enforced there.
# Two workers (pytest-xdist), one per core of the CI machine: much of a test's time is
# waiting on anvil, daemons and servers. A file's tests share one worker, so its module
# fixtures (an anvil, an installed venv) are made once. TEST_WORKERS=0 runs in-process.
# Before the tests, the C getLogs scanner is fuzzed under ASan and UBSan for
# TEST_FUZZ_SECONDS (millions of replies a minute; `make fuzz` runs longer; 0 skips it).
TEST_WORKERS ?= 2
TEST_FUZZ_SECONDS ?= 60
test: lint deps-debian bytecode
	@if [ "$(TEST_FUZZ_SECONDS)" != 0 ]; then \
	  mkdir -p build && scripts/fuzz-logscan $(TEST_FUZZ_SECONDS) > build/fuzz.log 2>&1 \
	    || { tail -n 60 build/fuzz.log; echo "fuzzing the scanner failed: build/fuzz.log"; exit 1; }; \
	  grep -E '^Done|^stat::(number_of_executed_units|peak_rss_mb)' build/fuzz.log; fi
	$(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS) --dist loadfile --durations=15 $(PYTEST_ARGS)

lint: deps
	$(VENV)/bin/ruff check keeper tests bench scripts
	$(VENV)/bin/ruff format --check keeper tests bench
	$(VENV)/bin/mypy keeper

fmt: deps
	$(VENV)/bin/ruff format keeper tests bench
	$(VENV)/bin/ruff check --fix keeper tests bench

contracts: deps
	$(PY) scripts/build-contracts

# Benchmarks (bench/README.md): quick sizes by default (200,000-event dense backfill, and
# the 1,000,000-event one on a node keeping 64 states: about 8 minutes, 11 GB of anvil);
# `make bench BENCH_ARGS=` runs the full sizes (400,000 dense with every state kept: anvil
# holds no larger such chain in memory, see bench/README.md); the 200,000-event sparse
# backfill over 12,500 blocks runs on Hardhat Network (bench/hardhat, about 5 minutes, 8 GB)
BENCH_ARGS ?= --quick
bench: deps bytecode $(BENCH_NPM_STAMP)
	scripts/ensure-debian-packages wrk postgresql
	PYTHONPATH=. $(PY) -m bench $(BENCH_ARGS)

# the long tortures, and every other test marked slow (which `make test` leaves out)
reliability: deps bytecode
	$(PY) -m pytest -q -m "reliability or slow" tests

# the native getLogs scanner fuzzed (libFuzzer, ASan, UBSan) against the generic path
FUZZ_SECONDS ?= 600
fuzz: deps
	scripts/fuzz-logscan $(FUZZ_SECONDS)

clean:
	rm -rf $(VENV) node_modules bench/hardhat/node_modules .pytest_cache .mypy_cache .ruff_cache
