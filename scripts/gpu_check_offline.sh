#!/usr/bin/env bash
# `make gpu-check` on a GPU machine that reaches no package index but has a CUDA build of
# torch, transformers and accelerate installed (as the GPU machines lent to AttnViz's
# sessions do): the tests marked cuda and benchmarks/gpu.py, with the machine's python3.
#
#   scripts/gpu_check_offline.sh wheels   # here, with PyPI: the other dependencies as wheels in .whl/
#   scripts/gpu_check_offline.sh run      # there, from the repository root (with .whl/ copied along)
#
# The packaged SmolLM2 (94 MB) is not carried: benchmarks/gpu.py then measures a randomly
# initialised model of its shape. Figures of 2026-11-27: docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  wheels)
    rm -rf .whl && mkdir -p .whl
    for name in fastapi starlette pydantic pydantic-core pydantic-settings python-dotenv \
        annotated-types typing-inspection typing-extensions cachetools orjson plotly \
        fastapi-offline python-multipart gguf uvicorn opentelemetry-api httpx2 httpcore2 \
        truststore; do
      version=$(.venv/bin/python -m pip show "$name" | awk '/^Version/{print $2}')
      python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl "$name==$version"
    done
    ;;
  run)
    out=${OUT:-/tmp/gpu-check}
    mkdir -p "$out"
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site python3 -m pip install -q --no-index --no-deps --no-build-isolation \
      --target /tmp/site . >"$out/install.log" 2>&1
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    nvidia-smi -L
    python3 -m pytest -q -p no:cacheprovider -m cuda -rA tests/attention/test_engine.py \
      tests/packaging/test_gpu_check.py tests/pretrained/test_atlas_shards.py | tail -15 | tee "$out/cuda-tests.log"
    timeout "${BENCH_TIMEOUT:-500}" python3 -m benchmarks.gpu | tee "$out/gpu-bench.log"
    ;;
  *)
    echo "usage: $0 wheels|run" >&2
    exit 2
    ;;
esac
