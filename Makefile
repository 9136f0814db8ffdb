# The two commands at the top of the README: `make run` and `make test`.
PYTHON ?= python3
export PIP_DISABLE_PIP_VERSION_CHECK = 1

.PHONY: install run test bench

install:
	$(PYTHON) -m pip install -q -r requirements.txt -r requirements-test.txt
	$(PYTHON) -m pip install -q -e .

run: install
	msunmerged demo

test: install
	$(PYTHON) -m pytest -p no:cacheprovider $(PYTEST_ARGS)

bench: install
	$(PYTHON) bench/run_all.py $(BENCH_ARGS)
