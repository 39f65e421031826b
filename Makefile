# slurm-pool: set-up, demo, tests and benchmarks.  Run as root on Debian 12.
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: deps demo test test-unit bench k8s-build clean

deps:
	bash scripts/install-deps.sh

k8s-build: deps
	$(PY) -m slurm_pool.testing.k8s build

demo: deps
	bash scripts/demo.sh

test: deps k8s-build
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-unit: deps
	$(PY) -m pytest -q tests/unit $(PYTEST_ARGS)

bench: deps
	$(PY) bench/run_all.py

clean:
	rm -rf build dist *.egg-info .pytest_cache
	$(MAKE) -C spank clean
