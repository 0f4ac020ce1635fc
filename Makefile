# The two set-up commands of the README: `make demo` (the main job) and `make test`.
# Both create .venv on first use and install what they need into it.
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is pinned for tests (see DEVELOPERS.md); /opt/wheels holds its CPU wheel where present.
PIP_LOCAL := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)

.PHONY: test demo lint bench fuzz clean

# What the main job needs (the package and torch, for capture), then the test extras on top.
$(VENV)/.main: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(PIP_LOCAL) "torch==2.13.0" -e ".[capture]"
	touch $@

$(VENV)/.installed: $(VENV)/.main
	$(PY) -m pip install -q $(PIP_LOCAL) "torch==2.13.0" -e ".[test]"
	touch $@

lint: $(VENV)/.installed
	$(PY) -m ruff check neurontrace cli tests bench
	$(PY) -m mypy neurontrace cli

test: lint
	NEURONTRACE_CORPUS=$${NEURONTRACE_CORPUS:-$(abspath ../shared/corpus/kineto)} \
	  $(PY) -m pytest

demo: $(VENV)/.main
	$(VENV)/bin/neurontrace capture --out runs/demo

bench: $(VENV)/.installed
	$(PY) bench/convert.py

# 10,000 generated hostile inputs through the command line (tests/fuzzing.py; --show N
# writes case N out to reproduce it). CI runs a 300-case slice in tests/test_fuzz.py.
fuzz: $(VENV)/.installed
	$(PY) tests/fuzzing.py --cases 10000

clean:
	rm -rf $(VENV) runs
