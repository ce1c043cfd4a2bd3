"""Usage errors of the attnviz command: a malformed model name stops it at once (issue 53).

Every name that is neither a packaged model, an existing path nor a Hugging Face id, given
to ``serve --model``, in ``ATTNVIZ_MODELS``, to ``export --model`` or as ``atlas``'s MODEL,
is one line on stderr naming the option, the name (cut, with its length, when long) and
the rule, and exit 2 (a usage error), before anything is loaded, started or read: no
traceback, no server start-up. Run in this process (:func:`tests.support.cli.attnviz_here`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import attnviz_here

MALFORMED = [
    "org/name/../../x",
    "x@../../etc",
    "x#main",
    "https://huggingface.co/gpt2",
    "a b",
    "line\nbreak",
    "x" * 5000,
    "org//name",
]


def refused(run: object, where: str) -> str:
    code, stderr = run.returncode, run.stderr  # type: ignore[attr-defined]
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"attnviz: {where}: "), stderr
    assert "Traceback" not in stderr and "Hugging Face id is name, org/name" in lines[0]
    return str(lines[0])


@pytest.mark.parametrize("name", MALFORMED, ids=range(len(MALFORMED)))
def test_a_malformed_model_name_is_a_usage_error_at_once(name: str, tmp_path: Path) -> None:
    line = refused(attnviz_here("serve", "--model", name), "--model")
    assert len(line) < 600  # a 5,000-character name is cut, its length said
    if len(name) > 80:
        assert "5,000 characters" in line
    refused(
        attnviz_here("export", "--model", name, "--text", "hi", "--output", "x.html"), "--model"
    )
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"text": "a b c"}) + "\n")
    out = tmp_path / "out"
    refused(attnviz_here("atlas", name, "--corpus", str(corpus), "--out", str(out)), "MODEL")
    assert not out.exists()  # checked before the output folder is made


def test_a_malformed_name_in_attnviz_models_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ATTNVIZ_MODELS", json.dumps(["gpt2", "x@../../etc"]))
    refused(attnviz_here("serve"), "ATTNVIZ_MODELS")
    monkeypatch.setenv("ATTNVIZ_MODELS", "not json")
    run = attnviz_here("serve")
    assert run.returncode == 2 and "ATTNVIZ_MODELS is not JSON" in run.stderr
