# The two commands at the top of the README: `make run` and `make test`.
PYTHON ?= python3
export PIP_DISABLE_PIP_VERSION_CHECK = 1

.PHONY: install run test bench

install:
	$(PYTHON) -m pip install -q -r requirements.txt -r requirements-test.txt
	$(PYTHON) -m pip install -q -e .

run: install
	msunmerged demo

# The suite in TEST_WORKERS pytest-xdist processes (TEST_WORKERS=0: in one); the tests of the machine-wide servers
# (HTCondor pool, Slurm) run in one of them, one after the other (--dist loadgroup, test/python/servers/markers.py).
# The slowest tests are listed before pytest's summary line.
TEST_WORKERS ?= 2

test: install
	$(PYTHON) -m pytest -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup --durations=25 $(PYTEST_ARGS)

bench: install
	$(PYTHON) bench/run_all.py $(BENCH_ARGS)
