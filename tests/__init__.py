"""AttnViz's tests; REPO_ROOT is the repository they belong to."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
