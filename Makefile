# keeperless — one entry point for running, checking and testing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
CONFIG ?= config/server.properties
SEEDS ?= 2000
RUNS ?= 4
SEED ?=
DURATION ?= 60
VOLUME_MB ?= 300

.PHONY: run test check venv sysdeps sim mutants chaos bench clean fmt

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark]'
	touch $@

venv: $(VENV)/.installed

## run: a single-node combined cluster on 127.0.0.1:9092, data in /tmp/keeperless-combined-logs
run: venv
	$(BIN)/keeperless storage format --ignore-formatted -c $(CONFIG) \
		-t $$($(BIN)/keeperless storage random-uuid)
	exec $(BIN)/keeperless server start $(CONFIG)

## check: format check, lint, types and unit tests
check: venv
	$(BIN)/ruff format --check src tests bench tools examples
	$(BIN)/ruff check src tests bench tools examples
	$(BIN)/mypy
	$(BIN)/pytest -q -n 2 tests/unit

## sysdeps: system packages the integration tests need (kcat; PostgreSQL for change data
## capture and ZooKeeper for migrating ZooKeeper-mode clusters, started by the tests themselves)
sysdeps:
	@command -v kcat >/dev/null 2>&1 || { \
		echo "installing kcat via apt"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null; }
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
		echo "installing postgresql via apt"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }
	@test -f /usr/share/java/zookeeper.jar || { \
		echo "installing zookeeper via apt"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null; }

## test: everything — check, simulations, integration tests with real clients, a short
## fault schedule on real processes, and the mutation self-check of the simulation
test: check sysdeps
	$(BIN)/pytest -q -n 2 tests/sim
	$(BIN)/pytest -q -n 2 --dist loadfile --durations=40 tests/integration tests/connect tests/spark
	$(BIN)/pytest -q tests/chaos
	$(PY) -m tests.sim.mutants --seeds 2000

fmt: venv
	$(BIN)/ruff format src tests bench tools examples
	$(BIN)/ruff check --fix src tests bench tools examples

## sim: more seeded Raft simulations (make sim SEEDS=20000); a failure names its seed
sim: venv
	SIM_SEEDS=$(SEEDS) $(BIN)/pytest -q tests/sim -p no:cacheprovider

## mutants: plant classic Raft safety bugs in a scratch copy, one at a time; the
## simulation's safety invariants must catch each within the CI seed count
mutants: venv
	$(PY) -m tests.sim.mutants --seeds $(SEEDS)

## chaos: the fault harness on real processes in network namespaces (root): RUNS runs
## from seed SEED (random if empty), DURATION seconds of faults each, VOLUME_MB of large
## values written and read back per run; a failing seed replays
chaos: venv
	$(PY) -m tests.chaos.run --runs $(RUNS) $(if $(SEED),--seed $(SEED)) --duration $(DURATION) \
		--volume-mb $(VOLUME_MB)

## bench: produce/consume throughput vs raw file and socket baselines
bench: venv
	$(PY) bench/throughput.py
	$(PY) bench/quorum.py
	$(PY) bench/spark.py

clean:
	rm -rf $(VENV) data
