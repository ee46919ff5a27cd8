# graphc: `make demo` and `make test` are all a fresh machine needs.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint install bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,mpi]'
	# Graphviz's dot draws graphs as SVG in the notebooks (graphc.viz); best effort: without
	# it (no apt-get, not root, offline) graphc.viz shows its text view instead
	command -v dot >/dev/null || (command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
		apt-get install -y -q graphviz >/dev/null 2>&1) || true
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m graphc demo

lint: $(STAMP)
	$(VENV)/bin/ruff check graphc tests benchmarks examples/mlp_model.py

test: $(STAMP) lint
	$(PY) -m pytest -q -n 2 --dist loadgroup --durations=25 tests

bench: $(STAMP)
	$(PY) benchmarks/bench_lowering.py
	$(PY) benchmarks/bench_backward.py
	$(PY) benchmarks/bench_step.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
