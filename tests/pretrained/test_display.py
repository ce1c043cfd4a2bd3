"""The maps as the page shows them (attnviz.pretrained.display), against brute force.

On the packaged MiniLM (an encoder) and a tiny T5 (an encoder-decoder: cross attention
maps target queries to source keys and has no rollout).
"""

from pathlib import Path

import numpy as np
import pytest
import torch
from attnviz.attention import AttentionInputError
from attnviz.pretrained import PretrainedAttentions, PretrainedModel, attention_rollout, display
from attnviz.pretrained.display import (
    LayerWalk,
    pooled,
    renormalised,
    sequence_view,
)
from attnviz.pretrained.loading import load_model_dir
from attnviz.pretrained.maps import batch_maps

from tests.pretrained import tiny
from tests.pretrained.support import require_transformers

TEXT = "The cat sat on the mat because it was tired."


@pytest.fixture(scope="module")
def alone(minilm: PretrainedModel) -> PretrainedAttentions:
    return minilm.attention([TEXT], device="cpu")


@pytest.fixture(scope="module")
def full(alone: PretrainedAttentions) -> torch.Tensor:
    """(N, H, L, L) every layer and head of the one input, as the result computes them."""
    return torch.stack([alone.layer_weights("encoder", layer)[0] for layer in range(6)])


@pytest.fixture(scope="module")
def t5(tmp_path_factory: pytest.TempPathFactory) -> PretrainedModel:
    require_transformers()
    folder = tiny.save_tiny("t5", tmp_path_factory.mktemp("tiny") / "t5")
    return load_model_dir("t5", folder)


def block_max(maps: torch.Tensor, factor: int) -> torch.Tensor:
    """Brute force: (L, L) -> each factor x factor block's maximum (the last ones partial)."""
    size = -(-maps.shape[-1] // factor)
    out = torch.empty(size, size)
    for r in range(size):
        for c in range(size):
            out[r, c] = maps[r * factor : (r + 1) * factor, c * factor : (c + 1) * factor].max()
    return out


def test_without_options_the_maps_are_the_results(
    alone: PretrainedAttentions, full: torch.Tensor
) -> None:
    view = sequence_view(alone)
    assert view.tokens == view.key_tokens == alone.batch.tokens[0]
    assert view.input_ids == alone.batch.input_ids[0].tolist()
    assert view.special_tokens_mask == [t in ("[CLS]", "[SEP]") for t in view.tokens]
    assert torch.equal(view.attentions, full)
    torch.testing.assert_close(view.head_mean, full.mean(1))
    torch.testing.assert_close(view.layer_mean, full.mean(dim=(0, 1)))
    assert view.rollout is not None
    torch.testing.assert_close(view.rollout, attention_rollout(full.mean(1)[:, None])[0])
    assert not view.pooling.pooled and not view.average_pooling.pooled
    assert view.special_share is None and not view.hidden_special_tokens
    # The whole-batch maps of a one-input batch are the same.
    maps = batch_maps(alone)
    assert torch.equal(maps.attentions[:, 0], view.attentions)
    assert maps.rollout is not None
    torch.testing.assert_close(maps.rollout[0], view.rollout)


def test_a_layer_walk_streams_the_layers_of_the_view(
    minilm: PretrainedModel, full: torch.Tensor
) -> None:
    result = minilm.attention([TEXT], device="cpu")  # a fresh pass: nothing kept yet
    walk = LayerWalk(result, hide_special_tokens=True, display_size=8)
    streamed = list(walk.layers())
    assert [maps.layer for maps in streamed] == list(range(6))
    view = walk.view()
    expected = sequence_view(alone_of(minilm), hide_special_tokens=True, display_size=8)
    for layer, maps in enumerate(streamed):
        assert torch.equal(maps.attentions, view.attentions[layer])
        assert torch.equal(maps.head_mean, view.head_mean[layer])
    assert_same_view(view, expected)
    one = list(LayerWalk(result, layer_index=3, head_index=2).layers())
    assert [maps.layer for maps in one] == [3]
    assert torch.equal(one[0].attentions, full[3, 2:3])


def alone_of(minilm: PretrainedModel) -> PretrainedAttentions:
    return minilm.attention([TEXT], device="cpu")


def assert_same_view(view: display.SequenceView, expected: display.SequenceView) -> None:
    assert view.tokens == expected.tokens and view.key_tokens == expected.key_tokens
    assert (view.pooling, view.average_pooling) == (expected.pooling, expected.average_pooling)
    assert view.special_share == pytest.approx(expected.special_share, abs=1e-7)
    for name in ("attentions", "head_mean", "layer_mean", "rollout"):
        torch.testing.assert_close(getattr(view, name), getattr(expected, name))


@pytest.mark.parametrize("hide", [False, True])
def test_later_views_of_the_same_pass_equal_the_first(minilm: PretrainedModel, hide: bool) -> None:
    # Views of one pass after the first (a click on a layer or a head) give what a
    # fresh pass gives, averages included.
    result = minilm.attention([TEXT], device="cpu")
    first = sequence_view(result, hide_special_tokens=hide)
    for options in ({"layer_index": 2}, {"layer_index": 5, "head_index": 3}, {}):
        later = sequence_view(result, hide_special_tokens=hide, **options)  # type: ignore[arg-type]
        fresh = sequence_view(alone_of(minilm), hide_special_tokens=hide, **options)  # type: ignore[arg-type]
        assert_same_view(later, fresh)
    assert_same_view(sequence_view(result, hide_special_tokens=hide), first)
    # The other setting of hide_special_tokens on the same pass is not mixed in.
    other = sequence_view(result, hide_special_tokens=not hide, layer_index=1)
    assert_same_view(
        other, sequence_view(alone_of(minilm), hide_special_tokens=not hide, layer_index=1)
    )


def test_hidden_special_tokens_give_renormalised_rows(
    alone: PretrainedAttentions, full: torch.Tensor
) -> None:
    view = sequence_view(alone, hide_special_tokens=True)
    tokens = alone.batch.tokens[0]
    kept = [i for i, t in enumerate(tokens) if t not in ("[CLS]", "[SEP]")]
    special = [i for i, t in enumerate(tokens) if t in ("[CLS]", "[SEP]")]
    assert len(special) == 2 and view.hidden_special_tokens
    assert view.tokens == view.key_tokens == [tokens[i] for i in kept]
    assert view.special_tokens_mask == [False] * len(kept)
    assert view.attentions.shape == (6, 12, len(kept), len(kept))
    weights = full.double()
    for layer in range(6):
        for head in range(12):
            block = weights[layer, head][kept][:, kept]
            expected = block / block.sum(dim=-1, keepdim=True)
            torch.testing.assert_close(view.attentions[layer, head].double(), expected)
    torch.testing.assert_close(view.attentions.sum(-1), torch.ones(6, 12, len(kept)))
    share = weights[:, :, kept][:, :, :, special].sum(-1).mean().item()
    assert view.special_share == pytest.approx(share, abs=1e-6)
    assert 0 < view.special_share < 1
    torch.testing.assert_close(view.head_mean, view.attentions.mean(1))
    torch.testing.assert_close(view.layer_mean, view.attentions.mean(dim=(0, 1)))
    # Rollout over every token, then its rows cut to the shown tokens and renormalised.
    rollout = attention_rollout(full.mean(1)[:, None])[0].double()[kept][:, kept]
    assert view.rollout is not None
    torch.testing.assert_close(view.rollout.double(), rollout / rollout.sum(-1, keepdim=True))


def test_layer_and_head_index_select(alone: PretrainedAttentions, full: torch.Tensor) -> None:
    view = sequence_view(alone, layer_index=4)
    assert torch.equal(view.attentions, full[4:5])
    torch.testing.assert_close(view.head_mean, full[4:5].mean(1))
    torch.testing.assert_close(view.layer_mean, full.mean(dim=(0, 1)))  # still every layer
    one = sequence_view(alone, layer_index=4, head_index=7)
    assert torch.equal(one.attentions, full[4:5, 7:8])
    torch.testing.assert_close(one.head_mean, full[4:5].mean(1))  # the mean of every head
    for options, field in (
        ({"layer_index": 6}, "layer_index"),
        ({"layer_index": -1}, "layer_index"),
        ({"layer_index": 0, "head_index": 12}, "head_index"),
        ({"block": "cross"}, "block"),
    ):
        with pytest.raises(AttentionInputError) as caught:
            sequence_view(alone, **options)  # type: ignore[arg-type]
        assert caught.value.field == field


def test_display_size_pools_with_block_max(minilm: PretrainedModel) -> None:
    result = minilm.attention([" ".join(["word"] * 38)], device="cpu")  # 40 tokens
    weights = torch.stack([result.layer_weights("encoder", layer)[0] for layer in range(6)])
    view = sequence_view(result, display_size=16)
    assert (view.pooling.factor, view.pooling.key_factor) == (3, 3)
    assert view.attentions.shape == (6, 12, 14, 14)  # ceil(40 / 3)
    for layer in (0, 2, 5):
        for head in (0, 7, 11):
            expected = block_max(weights[layer, head], 3)
            assert torch.equal(view.attentions[layer, head], expected)
        # The head mean is pooled the same way (the maximum of each block of the mean).
        torch.testing.assert_close(view.head_mean[layer], block_max(weights[layer].mean(0), 3))
    # The layer mean and rollout are not pooled below MAX_AVERAGE_SIZE.
    assert not view.average_pooling.pooled
    assert view.layer_mean.shape == (40, 40)
    assert view.rollout is not None and view.rollout.shape == (40, 40)
    assert not sequence_view(result, display_size=64).pooling.pooled


def test_averages_beyond_max_average_size_are_pooled(
    minilm: PretrainedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = minilm.attention([" ".join(["word"] * 38)], device="cpu")  # 40 tokens
    weights = torch.stack([result.layer_weights("encoder", layer)[0] for layer in range(6)])
    monkeypatch.setattr(display, "MAX_AVERAGE_SIZE", 20)
    view = sequence_view(result)
    assert (view.average_pooling.factor, view.average_pooling.key_factor) == (2, 2)
    assert not view.pooling.pooled and view.attentions.shape == (6, 12, 40, 40)
    torch.testing.assert_close(view.layer_mean, block_max(weights.mean(dim=(0, 1)), 2))
    rollout = attention_rollout(weights.mean(1)[:, None])[0]
    assert view.rollout is not None
    torch.testing.assert_close(view.rollout, block_max(rollout, 2))


def test_pooled_and_renormalised_on_their_own() -> None:
    maps = torch.rand(2, 3, 7, 5)
    result, pooling = pooled(maps, 3)
    assert (pooling.factor, pooling.key_factor) == (3, 2)
    assert result.shape == (2, 3, 3, 3)
    assert result[1, 2, 2, 1] == maps[1, 2, 6:, 2:4].max()
    assert result[0, 0, 0, 0] == maps[0, 0, :3, :2].max()
    assert pooled(maps, None)[0] is maps
    keep = torch.tensor([True, False, True, True, False])
    square = torch.rand(4, 5, 5)
    square[:, 0, keep] = 0  # row 0 gives every kept key 0
    out = renormalised(square, keep)
    assert out.shape == (4, 3, 3)
    assert torch.all(out[:, 0] == 0)  # stays 0, no division by zero
    torch.testing.assert_close(out[:, 1:].sum(-1), torch.ones(4, 2))
    kept = square[:, 2][:, keep]
    torch.testing.assert_close(out[:, 1], kept / kept.sum(-1, keepdim=True))


def test_only_special_tokens_cannot_be_hidden(minilm: PretrainedModel) -> None:
    # Typed special tokens are special tokens to the tokenizer.
    result = minilm.attention(["[SEP]"], device="cpu")
    assert result.batch.tokens[0] == ["[CLS]", "[SEP]", "[SEP]"]
    with pytest.raises(AttentionInputError) as caught:
        sequence_view(result, hide_special_tokens=True)
    assert caught.value.field == "hide_special_tokens"


def test_a_batch_is_refused(minilm: PretrainedModel) -> None:
    with pytest.raises(ValueError, match="one input"):
        sequence_view(minilm.attention(["one", "two"], device="cpu"))


def test_batch_maps_of_a_padded_batch(minilm: PretrainedModel) -> None:
    result = minilm.attention(["short", TEXT], device="cpu")
    maps = batch_maps(result)
    layers = torch.stack([result.layer_weights("encoder", layer) for layer in range(6)])
    assert torch.equal(maps.attentions, layers)
    torch.testing.assert_close(maps.head_mean, layers.mean(2))
    torch.testing.assert_close(maps.layer_mean, layers.mean(dim=(0, 2)))
    assert maps.rollout is not None
    torch.testing.assert_close(maps.rollout, attention_rollout(maps.head_mean))
    # Rollout by hand, in float64, for the padded input: its padding keys get 0.
    eye = np.eye(layers.shape[-1])
    expected = eye
    for mean in layers[:, 0].double().mean(1).numpy():
        augmented = 0.5 * mean + 0.5 * eye
        expected = (augmented / augmented.sum(-1, keepdims=True)) @ expected
    np.testing.assert_allclose(maps.rollout[0].numpy(), expected, atol=1e-6)
    real = result.batch.attention_mask[0]
    assert torch.all(maps.rollout[0][real][:, ~real] == 0)


def test_cross_attention_maps_target_queries_to_source_keys(t5: PretrainedModel) -> None:
    batch = t5.tokenize(tiny.TEXTS[:1])
    targets = t5.decoder_inputs(tiny.TARGETS[:1])
    result = t5.run(batch, targets, device="cpu")
    cross = torch.stack([result.layer_weights("cross", layer)[0] for layer in range(3)])
    view = sequence_view(result, block="cross")
    assert view.tokens == targets.tokens[0] and view.key_tokens == batch.tokens[0]
    assert view.input_ids == targets.input_ids[0].tolist()
    assert view.rollout is None
    assert torch.equal(view.attentions, cross)
    torch.testing.assert_close(view.layer_mean, cross.mean(dim=(0, 1)))
    maps = batch_maps(result, "cross")
    assert maps.rollout is None and torch.equal(maps.attentions[:, 0], cross)
    # Hidden special tokens: the target's start token and </s>, the source's </s>.
    hidden = sequence_view(result, block="cross", hide_special_tokens=True)
    assert hidden.tokens == ["the", "bird", "sang"]
    assert hidden.key_tokens == tiny.TEXTS[0].split()
    rows = cross[:, :, 1:4, :-1].double()
    torch.testing.assert_close(hidden.attentions.double(), rows / rows.sum(-1, keepdim=True))
    share = cross[:, :, 1:4, -1].double().mean().item()
    assert hidden.special_share == pytest.approx(share, abs=1e-6)
    # The decoder's self-attention is square and causal, with a rollout.
    decoder = sequence_view(result, block="decoder")
    assert decoder.tokens == decoder.key_tokens == targets.tokens[0]
    assert decoder.attentions.shape[0] == 3 and decoder.rollout is not None
    assert torch.all(decoder.attentions.triu(diagonal=1) == 0)
    # Without a block, the family's first: the encoder over the source.
    assert sequence_view(result).tokens == batch.tokens[0]
    assert sequence_view(result).attentions.shape[0] == 2


def test_display_of_a_tiny_model_in_a_folder(tmp_path: Path) -> None:
    # A decoder's page view: the rows are causal, the rollout is lower triangular.
    require_transformers()
    llama = load_model_dir("llama", tiny.save_tiny("llama", tmp_path / "llama"))
    result = llama.attention(tiny.TEXTS[:1], device="cpu")
    view = sequence_view(result)
    assert view.tokens == tiny.TEXTS[0].split()
    assert torch.all(view.attentions.triu(diagonal=1) == 0)
    assert view.rollout is not None and torch.all(view.rollout.triu(diagonal=1) == 0)
    torch.testing.assert_close(view.rollout.sum(-1), torch.ones(len(view.tokens)))
