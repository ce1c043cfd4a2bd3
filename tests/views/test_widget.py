"""The interactive notebook views in Python: the widget's traitlets, and a real kernel.

The reference for every weight is the tensor given, indexed here with numpy: the rows the
widget reports for a selection must be exactly those of the input.
"""

import json
import re
import sys
from pathlib import Path

import attnviz
import nbformat
import numpy as np
import pytest
from attnviz.views import notebook

pytest.importorskip("anywidget", reason="the notebook extra (make install adds it)")

import traitlets  # after the skip: traitlets comes with anywidget's ipywidgets
from attnviz.views.widget import AttentionWidget

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
TOKENS = ["The", "Ġcat", "<sat>", "on", "&mat"]


def attention(seed: int = 0, shape: tuple[int, ...] = (3, 1, 4, 5, 5)) -> np.ndarray:
    """(N, B, H, L, L) float32 rows that sum to 1."""
    weights = np.random.default_rng(seed).random(shape).astype(np.float32)
    return weights / weights.sum(axis=-1, keepdims=True)


@pytest.fixture
def weights() -> np.ndarray:
    return attention()


@pytest.fixture
def widget(weights: np.ndarray) -> AttentionWidget:
    return attnviz.head_view(weights, TOKENS, layer=1).widget


def test_the_widget_starts_from_the_view_and_holds_the_input_as_float32(
    widget: AttentionWidget, weights: np.ndarray
) -> None:
    assert (widget.view, widget.layer, widget.heads, widget.selected) == (
        "head",
        1,
        [0, 1, 2, 3],
        [],
    )
    assert widget.shape == [3, 4, 5, 5] and widget.query_tokens == TOKENS == widget.key_tokens
    np.testing.assert_array_equal(widget.maps, weights[:, 0])
    sent = np.frombuffer(widget._maps, dtype="<f4").reshape(widget.shape)  # what JS decodes
    np.testing.assert_array_equal(sent, weights[:, 0])
    assert widget.selected_weights == [[], [], [], []]  # (4 heads shown, 0 selected, L_k)


def test_a_selection_reports_its_rows_in_the_heads_shown(
    widget: AttentionWidget, weights: np.ndarray
) -> None:
    widget.set_state({"selected": [3, 1]})  # as the front end sends a click's update
    widget.heads = [2, 0]  # as Python sets it
    assert widget.selected == [1, 3] and widget.heads == [0, 2]
    expected = weights[1, 0][[0, 2]][:, [1, 3]]  # (heads, selected, L_k)
    np.testing.assert_array_equal(np.array(widget.selected_weights, dtype=np.float32), expected)
    widget.layer = 2
    expected = weights[2, 0][[0, 2]][:, [1, 3]]
    np.testing.assert_array_equal(np.array(widget.selected_weights, dtype=np.float32), expected)
    widget.heads = []
    assert widget.selected_weights == []


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("selected", [5], "selected: 5 is outside 0 … 4"),
        ("selected", [-1], "selected: -1 is outside"),
        ("selected", [True], "selected must be ints"),
        ("heads", [4], "heads: 4 is outside 0 … 3"),
        ("heads", [0, 1.5], "expected an int, not the float 1.5"),  # traitlets
        ("layer", 3, "layer 3 is outside the 3 layer(s)"),
        ("layer", -1, "layer -1 is outside"),
        ("view", "neuron", "view must be one of head, model, token"),
        ("views", [], "at least one view"),
        ("views", ["head", "lines"], "got 'lines'"),
    ],
)
def test_a_value_outside_the_data_is_refused_and_the_state_kept(
    widget: AttentionWidget, name: str, value: object, words: str
) -> None:
    before = widget.get_state()
    with pytest.raises(traitlets.TraitError) as error:
        setattr(widget, name, value)
    assert words in str(error.value)
    assert widget.get_state() == before


def test_read_only_data_and_numpy_indices() -> None:
    widget = attnviz.token_view(attention(), TOKENS).widget
    assert widget.view == "token"
    widget.selected = [np.int64(4), 4, np.int32(0)]  # numpy ints, repeated: one each
    assert widget.selected == [0, 4]
    with pytest.raises(traitlets.TraitError):
        widget.shape = [1, 1, 1, 1]
    with pytest.raises(ValueError, match="read-only"):
        widget.maps[0, 0, 0, 0] = 1


def test_the_constructor_checks_the_data() -> None:
    with pytest.raises(ValueError, match=r"\(N, H, L_q, L_k\)"):
        AttentionWidget(np.ones((2, 3, 3)), ["a"] * 3, ["a"] * 3)
    with pytest.raises(ValueError, match="2 query and 3 key tokens for maps of 3 x 3"):
        AttentionWidget(np.ones((1, 2, 3, 3)), ["a"] * 2, ["a"] * 3)
    with pytest.raises(traitlets.TraitError, match="layer 1"):
        AttentionWidget(np.ones((1, 2, 3, 3)), ["a"] * 3, ["a"] * 3, layer=1)


def test_plotly_is_sent_when_the_front_end_asks_for_it(widget: AttentionWidget) -> None:
    widget._handle_custom_msg({"request": "something else"}, [])
    assert widget._plotly_js == ""
    widget._handle_custom_msg({"request": "plotly"}, [])
    assert widget._plotly_js.lstrip().startswith("/**\n* plotly.js (attnviz: core, heatmap, bar")
    assert widget._plotly_js == notebook.plotly_js()


def test_jupyter_gets_the_widget_and_the_standalone_html_beside_it(
    monkeypatch: pytest.MonkeyPatch, weights: np.ndarray
) -> None:
    view = attnviz.head_view(weights, TOKENS)
    data, _ = view._repr_mimebundle_()
    assert data[WIDGET_VIEW]["model_id"] == view.widget.model_id
    assert view.widget is view.widget  # one widget: its state persists across displays
    assert 'class="attnviz-widget-data"' in data["text/html"] and "<html" not in data["text/html"]
    assert data["text/plain"] == repr(view)
    monkeypatch.setattr(notebook, "_has_anywidget", lambda: False)
    assert WIDGET_VIEW not in attnviz.head_view(weights, TOKENS)._repr_mimebundle_()[0]


def test_without_anywidget_the_widget_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, weights: np.ndarray
) -> None:
    monkeypatch.setitem(sys.modules, "attnviz.views.widget", None)  # an import that fails
    with pytest.raises(ImportError, match=r"pip install 'attnviz\[notebook\]'"):
        _ = attnviz.head_view(weights, TOKENS).widget


def saved_state(path: Path) -> dict:  # type: ignore[type-arg]
    """The model state a saved page starts from."""
    html = path.read_text(encoding="utf-8")
    found = re.search(
        r'<script type="application/json" class="attnviz-widget-data">(.*?)</script>', html, re.S
    )
    assert found is not None
    return json.loads(found[1])["state"]  # type: ignore[no-any-return]


def test_save_starts_from_what_the_reader_chose_in_the_notebook(
    tmp_path: Path, weights: np.ndarray
) -> None:
    view = attnviz.head_view(weights, TOKENS)
    view.widget.set_state({"selected": [2], "heads": [1], "layer": 2})
    state = saved_state(view.save(tmp_path / "view.html"))
    assert (state["selected"], state["heads"], state["layer"]) == ([2], [1], 2)
    assert state["views"] == ["head", "token"]  # a head view's page carries no Plotly.js
    assert state["query_tokens"] == TOKENS


@pytest.mark.slow  # a kernel process
def test_a_kernel_takes_the_front_ends_updates_and_reports_the_rows(tmp_path: Path) -> None:
    """nbclient runs the cells in a real IPython kernel; the front end's click is the comm
    message it would send (an "update" of the widget's state), handled by the widget's comm."""
    from nbclient import NotebookClient

    weights = attention(seed=3)
    np.save(tmp_path / "weights.npy", weights)
    cells = [
        "import json, numpy as np, attnviz\n"
        f"view = attnviz.head_view(np.load('weights.npy'), {TOKENS!r}, layer=2)\n"
        "widget = view.widget\n"
        "view",
        # What the front end sends when the reader clicks query 2, then double-clicks head 3.
        "for state in ({'selected': [2]}, {'heads': [3]}):\n"
        "    widget.comm.handle_msg({'content': {'comm_id': widget.comm.comm_id, 'data': {\n"
        "        'method': 'update', 'state': state, 'buffer_paths': []}}, 'buffers': []})\n"
        "print(json.dumps({k: getattr(widget, k) for k in\n"
        "    ('selected', 'heads', 'layer', 'selected_weights')}))",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(
        nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    ).execute()
    shown = nb.cells[0].outputs[0]["data"]
    model_id = shown[WIDGET_VIEW]["model_id"]
    reported = json.loads(nb.cells[1].outputs[0]["text"])
    assert (reported["selected"], reported["heads"], reported["layer"]) == ([2], [3], 2)
    expected = weights[2, 0][[3]][:, [2]]  # layer 2, head 3, query 2: (1, 1, L_k)
    np.testing.assert_array_equal(np.array(reported["selected_weights"], np.float32), expected)
    # What the kernel sent the front end (nbclient keeps the widgets' state as it goes).
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    sent = state[model_id]["state"]
    assert sent["_model_name"] == "AnyModel" and sent["layer"] == 2
    np.testing.assert_array_equal(np.array(sent["selected_weights"], np.float32), expected)
