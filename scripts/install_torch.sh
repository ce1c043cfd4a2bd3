#!/bin/sh
# Install torch into a virtual environment: a local wheel when one matches, else an index.
#
#   scripts/install_torch.sh PYTHON SPEC INDEX
#
# First a wheel from pip's find-links alone (--no-index: the local folders pip is configured
# with, such as PIP_FIND_LINKS; nothing is downloaded), without dependencies, then torch's
# dependencies from the usual index. When no local wheel matches SPEC: SPEC from INDEX
# (PyTorch's CPU wheel index by default; a CUDA one for a CUDA build, with its local label in
# SPEC, e.g. torch==2.13.0+cu128, so that a local CPU wheel does not match).
set -eu
python=$1
spec=$2
index=${3:-https://download.pytorch.org/whl/cpu}
if "$python" -m pip install --quiet --no-index --no-deps "$spec" 2>/dev/null; then
    echo "install_torch: $spec from a local wheel (pip's find-links)"
    "$python" -m pip install --quiet "$spec"
else
    echo "install_torch: no local wheel matches $spec: from $index"
    "$python" -m pip install --quiet "$spec" --index-url "$index"
fi
