# slurm-pool: set-up, demo, tests and benchmarks.  Run as root on Debian 12.
PY := .venv/bin/python
PYTEST_ARGS ?=

# The newer end of the Slurm releases the tests run on, built from ../shared/slurm.
SLURM_NEW ?= 26.05

.PHONY: deps demo test test-unit lint bench k8s-build slurm-build slurm-build-plain slurm-build-nolua notebooks-build elastic-build clean

deps:
	bash scripts/install-deps.sh

k8s-build: deps
	$(PY) -m tests.support.k8s build

# make demo SLURM=26.05: the same demo on Slurm 26.05, built from ../shared/slurm.
demo: deps $(if $(SLURM),slurm-build)
	SLURM=$(SLURM) bash scripts/demo.sh

slurm-build: slurm-build-plain slurm-build-nolua

slurm-build-plain: deps
	$(PY) -m slurm_pool.localcluster.slurmbuild build

slurm-build-nolua: deps
	$(PY) -m slurm_pool.localcluster.slurmbuild build --variant nolua

# JupyterHub, batchspawner, JupyterLab and configurable-http-proxy for the notebook tier, cached.
notebooks-build: deps
	$(PY) -m slurm_pool.localcluster.notebooks build

# torch 2.15.0 for the elastic-training tests only (a ~5.4 GB venv: its wheel pulls the nvidia-* packages), cached.
elastic-build: deps
	$(PY) -m tests.support.elastic_env build

# Every test: the unit tests over both cores, the daemon tests on Debian's Slurm 22.05 and again on
# $(SLURM_NEW) (built from ../shared/slurm), as three streams side by side, with the cached builds
# starting beside them (tests.support.streams).  PYTEST_ARGS go to every stream.
test: deps
	$(PY) -m tests.support.streams --slurm-new $(SLURM_NEW) -- $(PYTEST_ARGS)

# ruff (lint and format), mypy on the package, luacheck on the static job_submit.lua.
lint: deps
	$(PY) -m ruff check slurm_pool tests bench
	$(PY) -m ruff format --check slurm_pool tests bench
	$(PY) -m mypy
	luacheck --no-color slurm_pool/policy/job_submit.lua

test-unit: deps
	$(PY) -m pytest -q tests/unit $(PYTEST_ARGS)

bench: deps
	$(PY) bench/run_all.py

clean:
	rm -rf build dist *.egg-info .pytest_cache
	$(MAKE) -C spank clean

# The release: the wheel, the sdist, a Debian 12 .deb and an EL9 .rpm (noarch), named by
# slurm_pool.__version__, into dist/ (scripts/dist/build.py; the dependencies' wheels are cached).
.PHONY: dist
dist: deps
	$(PY) scripts/dist/build.py --out dist
