"""The Compare tab of / on long inputs (round 5's walkthrough: "the Compare picker lists
pooled labels for long inputs"), in a real Chromium against a real server.

Past 128 tokens the page's maps come block-max pooled, and the response's labels are
blocks ("the…cat"). The pickers of the sequences (Compare's "against sequence" and the
page's Sequence) name each sequence by its own first tokens as typed and its length,
refreshed with every input; the difference A − B is labelled by positions (a block's
first, all of them in its hover), not by block indices.
"""

from __future__ import annotations

import pytest

from tests.support.browser import compute_heads, evaluate_json, open_view, wait_for_heads

pytestmark = pytest.mark.browser

WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "the",
    "mat",
    "and",
    "looked",
    "at",
    "a",
    "dog",
    "who",
    "sat",
    "by",
    "the",
    "door",
]


def words(count: int, step: int) -> list[str]:
    """``count`` words of WORDS, every ``step``-th (13 distinct: within vocab_size 100)."""
    return [WORDS[(i * step) % len(WORDS)] for i in range(count)]


def choices(sequences: list[list[str]]) -> list[str]:
    """The pickers' texts of ``sequences``: number, first 6 tokens, length when longer."""
    return [
        f"{b}: {' '.join(s[:6])}" + (f" … ({len(s)} tokens)" if len(s) > 6 else "")
        for b, s in enumerate(sequences)
    ]


def test_the_compare_picker_names_sequences_by_their_tokens(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    long_inputs = [words(300, 1), words(260, 3)]
    page.fill("#sequences", "\n".join(" ".join(s) for s in long_inputs))
    compute_heads(page, 2)
    response = evaluate_json(page, "() => window.attnviz.lastResponse")
    pooled = response["downsample"]
    assert pooled and pooled["factor_q"] > 1  # the response's labels are blocks
    assert response["key_labels"][0][0] == "the…sat"

    open_view(page, "compare")
    options = page.locator("#compare-sequence option")
    assert options.all_text_contents() == choices(long_inputs)
    assert page.locator("#sequence-index option").all_text_contents() == choices(long_inputs)
    assert page.input_value("#compare-sequence") == "1"

    # The difference's rows and columns: positions, a block's all of them on hover.
    factor = pooled["factor_q"]
    axis = page.evaluate(
        """() => { const d = document.querySelector('#view-compare [data-map=difference]');
            return {ticks: d.layout.yaxis.ticktext, values: d.layout.yaxis.tickvals,
                    hover: d.data[0].customdata.map((row) => row[0])}; }"""
    )
    assert axis["ticks"] == [str(v * factor) for v in axis["values"]]
    rows = -(-300 // factor)
    assert axis["hover"] == [
        f"{i * factor}–{min(i * factor + factor, 300) - 1}" for i in range(rows)
    ]

    # Another input of as many sequences: the choices are its own.
    short_inputs = [words(5, 1), words(9, 5)]
    page.fill("#sequences", "\n".join(" ".join(s) for s in short_inputs))
    page.evaluate("document.getElementById('view-compare').dataset.drawn = 'stale'")
    page.click("#compute")
    page.wait_for_function("document.getElementById('view-compare').dataset.drawn === 'true'")
    assert options.all_text_contents() == choices(short_inputs)
    axis = page.evaluate(
        "document.querySelector('#view-compare [data-map=difference]').data[0].customdata"
    )
    assert [row[0] for row in axis] == [str(i) for i in range(9)]
    assert page.errors == []
