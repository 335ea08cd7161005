# Every target creates .venv on first use. torch is installed first, from the local CPU wheel,
# so that no dependency can pull a CUDA build.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rlcap-installed

.PHONY: demo test bench bench-metrics bench-decode bench-scst bench-methods bench-demo clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m rlcap.cli demo --out runs/demo

test: $(STAMP)
	$(PY) -m pytest -q

bench-metrics: $(STAMP)
	$(PY) benchmarks/bench_metrics.py

bench-decode: $(STAMP)
	$(PY) benchmarks/bench_decode.py

bench-demo: $(STAMP)
	$(PY) benchmarks/bench_demo.py

bench-scst: $(STAMP)
	$(PY) benchmarks/bench_scst.py

bench-methods: $(STAMP)
	$(PY) benchmarks/bench_methods.py

bench: bench-metrics bench-decode bench-scst bench-demo bench-methods

clean:
	rm -rf runs
