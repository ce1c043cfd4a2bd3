"""attnviz.head_scores and attnviz.atlas_view: the head atlas from Python (issue 33).

A tiny decoder built from a config (tests/pretrained/tiny.py); the scores themselves are
checked against brute force in tests/pretrained/test_heads.py: here, that the table holds
them (as a DataFrame, or the HeadScores without pandas), that the cache is used, and that
the atlas widget draws the page's atlas and syncs a clicked head.
"""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import traitlets
from attnviz import atlas_view, head_examples, head_scores, read_atlas
from attnviz.pretrained.atlas import SCORES, HeadScores, repeat_length
from attnviz.pretrained.atlas import head_scores as compute
from attnviz.views.display import display_token

from tests.pretrained.support import require_transformers
from tests.pretrained.tiny import save_tiny
from tests.support.browser import HANG_MS, close_page

TEXTS = ["the cat sat on the mat", "a dog ran in the park"]


# Every test here scores the tiny model on TEXTS: head_scores warns each time that its
# random-token scores are not of them (one test checks that it does).
pytestmark = pytest.mark.filterwarnings("ignore:head_scores. induction:UserWarning")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Any:
    require_transformers()
    from attnviz.pretrained.loading import load_model_dir

    folder = save_tiny("llama", tmp_path_factory.mktemp("atlas-view") / "tiny-llama")
    return load_model_dir("tiny-llama", folder)


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """AttnViz's cache folder in the test's own directory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "attnviz"


def shown_score(atlas: dict[str, Any], name: str) -> Any:
    """A score as the atlas draws it: entropy in bits (nats / ln 2, the lessons' unit)."""
    unit = atlas["definitions"][name]["unit"]
    values = np.asarray(atlas["scores"][name], dtype=np.float64)
    return values / np.log(2) if unit == "nats" else values


def test_the_table_is_one_row_per_head_with_every_score(tiny: Any, own_cache: Path) -> None:
    pd = pytest.importorskip("pandas")
    with pytest.warns(UserWarning, match="induction and duplicate_token are scored on repeated"):
        table = head_scores(tiny, TEXTS)  # the user's texts: the random-token scores say so
    reference = compute(tiny, TEXTS, repeat_length=repeat_length(tiny))
    assert isinstance(table, pd.DataFrame)
    assert list(table.columns) == ["layer", "head", *SCORES]
    assert len(table) == reference.num_layers * reference.num_heads
    for name in SCORES:
        grid = table.pivot(index="layer", columns="head", values=name).to_numpy()
        np.testing.assert_allclose(grid, reference.scores[name], rtol=1e-9)
    assert set(table.attrs["definitions"]) == set(SCORES)
    assert table.attrs["corpus"]["sequences"] == len(TEXTS)
    assert table.attrs["model"] == "tiny-llama"
    assert list((own_cache / "head-atlas").glob("tiny-llama-*.json"))  # kept for next time


def test_without_pandas_the_table_is_the_head_scores(
    tiny: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_import = builtins.__import__

    def no_pandas(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pandas":
            raise ImportError("no pandas here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    scores = head_scores(tiny, TEXTS, cache=False)
    assert isinstance(scores, HeadScores)
    assert scores.to_csv().splitlines()[0] == ",".join(["layer", "head", *SCORES])


def test_the_atlas_widget_holds_the_atlas_and_checks_the_head(tiny: Any) -> None:
    pytest.importorskip("anywidget")
    widget = atlas_view(head_scores(tiny, TEXTS))
    atlas = widget.atlas
    reference = compute(tiny, TEXTS, repeat_length=repeat_length(tiny))
    for name in SCORES:
        np.testing.assert_allclose(atlas["scores"][name], reference.scores[name], rtol=1e-9)
    widget.head = [1, 2]
    assert widget.head == [1, 2]
    for bad in ([reference.num_layers, 0], [0, reference.num_heads], [0], [-1, 0]):
        with pytest.raises(traitlets.TraitError):
            widget.head = bad
    assert widget.head == [1, 2]
    with pytest.raises(ValueError, match="head_scores"):
        atlas_view(object())
    if hasattr(head_scores(tiny, TEXTS), "attrs"):  # pandas keeps attrs through head()
        with pytest.raises(ValueError, match="every one of the"):
            atlas_view(head_scores(tiny, TEXTS).head(3))


def test_an_atlas_file_reads_back_with_its_examples(tiny: Any, tmp_path: Path) -> None:
    # What attnviz atlas writes (HeadScores.to_dict() as atlas.json), read from Python: the
    # scores, the examples with their passages' texts (a DataFrame), and the widget.
    import json

    from attnviz.pretrained.atlas import plan_atlas
    from attnviz.pretrained.atlas.shards import example_rows, run_shard

    plan = plan_atlas(tiny, TEXTS, repeat_length=repeat_length(tiny))
    scores = compute(plan, top_k=3)
    path = tmp_path / "atlas.json"
    path.write_text(json.dumps(scores.to_dict()))
    table = read_atlas(path)
    for name in SCORES:
        grid = np.zeros((scores.num_layers, scores.num_heads))
        for row in table.to_dict("records") if hasattr(table, "to_dict") else table.to_rows():
            grid[row["layer"], row["head"]] = row[name]
        np.testing.assert_allclose(grid, scores.scores[name], rtol=1e-12)
    expected = example_rows(plan, run_shard(plan, range(len(plan.passes)), top_k=3))
    for given in (path, table, scores):
        examples = head_examples(given)
        rows = examples.to_dict("records") if hasattr(examples, "to_dict") else examples
        assert len(rows) == len(expected) > 0
        for row, want in zip(rows, expected, strict=True):
            assert {k: row[k] for k in ("score", "layer", "head", "rank", "passage", "kind")} == {
                k: want[k] for k in ("score", "layer", "head", "rank", "passage", "kind")
            }
            assert row["value"] == pytest.approx(want["value"], rel=1e-12)
            text = row["text"] if isinstance(row["text"], str) else None  # pandas: NaN
            assert text == want["text"] and row["raw_token"] == want["token"]
            assert row["token"] == display_token(want["token"])  # as the page shows it
    shown = atlas_view(path).atlas  # the notebook extra's widget (make install has it)
    np.testing.assert_allclose(shown["scores"]["self"], scores.scores["self"], rtol=1e-12)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        read_atlas(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"scores": {}}')
    with pytest.raises(ValueError, match="not a head atlas"):
        read_atlas(tmp_path / "other.json")
    old = {k: v for k, v in scores.to_dict().items() if k not in ("examples", "passages")}
    (tmp_path / "old.json").write_text(json.dumps(old))
    with pytest.raises(ValueError, match="keeps no examples"):
        head_examples(tmp_path / "old.json")


def test_the_atlas_widget_draws_the_page_atlas_and_syncs_a_click(tiny: Any, browser: Any) -> None:
    """The widget's ESM in Chromium with a stand-in anywidget model: the maps are the
    atlas's, and a click on the table's first row sets head to that row's head."""
    pytest.importorskip("anywidget")
    import json

    from attnviz.views.interactive import plotly_js

    widget = atlas_view(head_scores(tiny, TEXTS))
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.set_content("<!doctype html><div id='out'></div>")
    page.add_script_tag(content=plotly_js())
    page.add_script_tag(
        type="module",
        content=f"""
        const source = {json.dumps(widget._esm)};
        const url = URL.createObjectURL(new Blob([source], {{type: "text/javascript"}}));
        const state = {json.dumps({"atlas": widget.atlas, "head": [], "_plotly_js": ""})};
        const handlers = {{}};
        const model = {{
            get: (k) => state[k],
            set: (k, v) => {{ state[k] = v; (handlers["change:" + k] || []).forEach((f) => f()); }},
            save_changes: () => {{ window.saved = (window.saved || 0) + 1; }},
            on: (e, f) => {{ (handlers[e] = handlers[e] || []).push(f); }},
            off: () => {{}},
            send: () => {{}},
        }};
        window.atlasState = state;
        const widget = (await import(url)).default;
        widget.render({{model, el: document.getElementById("out")}});
    """,
    )
    page.wait_for_selector(".attnviz-widget[data-drawn='true']", timeout=HANG_MS)
    maps = page.evaluate(
        "[...document.querySelectorAll('.atlas-plot')].map((d) => [d.dataset.score, d.data[0].z])"
    )
    assert [name for name, _ in maps] == list(SCORES)
    for name, z in maps:
        np.testing.assert_allclose(z, shown_score(widget.atlas, name), rtol=1e-12)
    first = page.locator(".atlas-table tr[data-layer]").first
    expected = [int(first.get_attribute("data-layer")), int(first.get_attribute("data-head"))]
    first.click()
    assert page.evaluate("window.atlasState.head") == expected
    assert page.get_attribute(".attnviz-widget", "data-head") == ".".join(map(str, expected))
    assert errors == []
    page.close()


def test_the_saved_atlas_works_offline(tiny: Any, browser: Any, tmp_path: Path) -> None:
    """.save() writes a page that draws the atlas with no kernel and no network, starting
    from the widget's head, and a click on a table row marks that head."""
    pytest.importorskip("anywidget")
    from tests.support.browser import open_offline

    widget = atlas_view(head_scores(tiny, TEXTS))
    widget.head = [1, 0]
    path = widget.save(tmp_path / "atlas.html")
    page, outside, errors = open_offline(browser, path)
    page.wait_for_selector(".attnviz-widget[data-drawn='true']", timeout=HANG_MS)
    assert page.get_attribute(".attnviz-widget", "data-head") == "1.0"
    maps = page.evaluate(
        "[...document.querySelectorAll('.atlas-plot')].map((d) => [d.dataset.score, d.data[0].z])"
    )
    for name, z in maps:
        np.testing.assert_allclose(z, shown_score(widget.atlas, name), rtol=1e-12)
    row = page.locator(".atlas-table tr[data-layer]").nth(1)
    expected = f"{row.get_attribute('data-layer')}.{row.get_attribute('data-head')}"
    row.click()
    assert page.get_attribute(".attnviz-widget", "data-head") == expected
    assert outside == [] and errors == []
    close_page(page)
