#!/bin/sh
# Install torch into a virtual environment: a local wheel when one matches, else an index.
#
#   scripts/install_torch.sh PYTHON SPEC [INDEX [MODE]]
#
# First a wheel from pip's find-links alone (--no-index: the local folders pip is configured
# with, such as PIP_FIND_LINKS; nothing is downloaded), without dependencies. MODE "full"
# (the default) then installs torch's dependencies from the usual index with pip; MODE
# "wheel-only" leaves them to the install that follows (make install's uv step resolves them
# with the project's: make install 3-5 s sooner on two cores, the same packages). When
# no local wheel matches SPEC, whatever MODE: SPEC and its dependencies from INDEX (PyTorch's
# CPU wheel index by default; a CUDA one for a CUDA build, with its local label in SPEC,
# e.g. torch==2.13.0+cu128, so that a local CPU wheel does not match).
set -eu
python=$1
spec=$2
index=${3:-https://download.pytorch.org/whl/cpu}
mode=${4:-full}
case $mode in
    full | wheel-only) ;;
    *) echo "install_torch: MODE is full or wheel-only, not $mode" >&2; exit 2 ;;
esac
if "$python" -m pip install --quiet --no-index --no-deps "$spec" 2>/dev/null; then
    echo "install_torch: $spec from a local wheel (pip's find-links)"
    if [ "$mode" = full ]; then
        "$python" -m pip install --quiet "$spec"
    fi
else
    echo "install_torch: no local wheel matches $spec: from $index"
    "$python" -m pip install --quiet "$spec" --index-url "$index"
fi
