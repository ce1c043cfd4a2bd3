"""One input's maps as the page shows them (attnviz.pretrained.display)."""

import pytest
import torch
from attnviz.attention import AttentionInputError
from attnviz.pretrained.display import sequence_view

TEXT = "The cat sat on the mat because it was tired."


@pytest.fixture(scope="module")
def alone(minilm):  # type: ignore[no-untyped-def]
    return minilm.attention([TEXT], device="cpu")


def test_without_options_the_maps_are_the_results(alone) -> None:  # type: ignore[no-untyped-def]
    view = sequence_view(alone)
    assert view.tokens == alone.batch.tokens[0]
    assert torch.equal(view.attentions, alone.attentions[:, 0])
    assert torch.equal(view.head_mean, alone.head_mean[:, 0])
    assert torch.allclose(view.layer_mean, alone.layer_mean[0], atol=1e-7)
    assert torch.equal(view.rollout, alone.rollout[0])
    assert view.factor == 1 and view.special_share is None


def test_hidden_special_tokens_give_renormalised_rows(alone) -> None:  # type: ignore[no-untyped-def]
    view = sequence_view(alone, hide_special_tokens=True)
    tokens = alone.batch.tokens[0]
    kept = [i for i, t in enumerate(tokens) if t not in ("[CLS]", "[SEP]")]
    special = [i for i, t in enumerate(tokens) if t in ("[CLS]", "[SEP]")]
    assert view.tokens == [tokens[i] for i in kept]
    assert view.special_tokens_mask == [False] * len(kept)
    full = alone.attentions[:, 0].double()  # (N, H, L, L)
    for layer in (0, 5):
        for head in (0, 11):
            block = full[layer, head][kept][:, kept]
            expected = block / block.sum(dim=-1, keepdim=True)
            assert torch.allclose(view.attentions[layer, head].double(), expected, atol=1e-6)
    assert torch.allclose(view.attentions.sum(-1), torch.ones(()), atol=1e-5)
    share = full[:, :, kept][:, :, :, special].sum(-1).mean().item()
    assert view.special_share == pytest.approx(share, abs=1e-6)
    assert 0 < view.special_share < 1
    assert torch.allclose(view.head_mean, view.attentions.mean(1))
    assert torch.allclose(view.layer_mean, view.attentions.mean(dim=(0, 1)), atol=1e-7)
    rollout = alone.rollout[0].double()[kept][:, kept]
    assert torch.allclose(view.rollout.double(), rollout / rollout.sum(-1, keepdim=True), atol=1e-6)


def test_layer_index_selects_one_layer(alone) -> None:  # type: ignore[no-untyped-def]
    view = sequence_view(alone, layer_index=4)
    assert torch.equal(view.attentions, alone.attentions[4:5, 0])
    assert torch.equal(view.head_mean, alone.head_mean[4:5, 0])
    with pytest.raises(AttentionInputError) as caught:
        sequence_view(alone, layer_index=6)
    assert caught.value.field == "layer_index"


def test_display_size_pools_with_block_max(minilm) -> None:  # type: ignore[no-untyped-def]
    result = minilm.attention([" ".join(["word"] * 38)], device="cpu")  # 40 tokens
    view = sequence_view(result, display_size=16)
    assert view.factor == 3
    assert view.attentions.shape == (6, 12, 14, 14)  # ceil(40 / 3)
    full = result.attentions[2, 0, 7]
    for r in (0, 6, 13):
        for c in (0, 9, 13):
            block = full[3 * r : 3 * r + 3, 3 * c : 3 * c + 3]
            assert view.attentions[2, 7, r, c] == block.max()
    assert view.head_mean.shape == (6, 14, 14)
    assert view.layer_mean.shape == (40, 40) and view.rollout.shape == (40, 40)  # never pooled
    assert sequence_view(result, display_size=64).factor == 1


def test_only_special_tokens_cannot_be_hidden(minilm) -> None:  # type: ignore[no-untyped-def]
    # Typed special tokens are special tokens to the tokenizer.
    result = minilm.attention(["[SEP]"], device="cpu")
    assert result.batch.tokens[0] == ["[CLS]", "[SEP]", "[SEP]"]
    with pytest.raises(AttentionInputError) as caught:
        sequence_view(result, hide_special_tokens=True)
    assert caught.value.field == "hide_special_tokens"


def test_a_batch_is_refused(minilm) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="one input"):
        sequence_view(minilm.attention(["one", "two"], device="cpu"))
