#!/usr/bin/env bash
# A longer schemathesis run than the test command's (default 500 examples per operation).
# Usage: scripts/fuzz.sh [EXAMPLES]
set -euo pipefail
cd "$(dirname "$0")/.."
ATTNVIZ_FUZZ_EXAMPLES="${1:-500}" .venv/bin/python -m pytest -q -p no:logging tests/server/test_fuzz.py
