import pytest
import torch
from attnviz.attention import AttentionInputError, build_mask, causal_mask, padding_mask
from attnviz.attention.tokens import encode_batches
from attnviz.attention.tutorials import TUTORIAL_BATCH


@pytest.fixture
def tutorial_ids() -> torch.Tensor:
    return encode_batches({"sequences": TUTORIAL_BATCH}, pad_id=0, vocab_size=100)["sequences"].ids


def test_padding_mask_marks_real_tokens_true(tutorial_ids: torch.Tensor) -> None:
    mask = padding_mask(tutorial_ids, pad_id=0)
    assert mask.shape == (5, 1, 10)
    assert mask.dtype == torch.bool
    lengths = [len(seq) for seq in TUTORIAL_BATCH]
    for b, length in enumerate(lengths):
        assert mask[b, 0, :length].all()
        assert not mask[b, 0, length:].any()


def test_causal_mask_is_lower_triangular() -> None:
    mask = causal_mask(6)
    assert mask.shape == (1, 6, 6)
    for i in range(6):
        for j in range(6):
            assert bool(mask[0, i, j]) == (j <= i)


def test_padding_causal_is_the_elementwise_and(tutorial_ids: torch.Tensor) -> None:
    mask = build_mask("padding_causal", tutorial_ids, tutorial_ids, pad_id=0)
    assert mask is not None
    assert mask.shape == (5, 10, 10)
    expected = padding_mask(tutorial_ids, 0).expand(5, 10, 10) & causal_mask(10).expand(5, 10, 10)
    assert torch.equal(mask, expected)


def test_none_gives_no_mask(tutorial_ids: torch.Tensor) -> None:
    assert build_mask("none", tutorial_ids, tutorial_ids, pad_id=0) is None


def test_unknown_mask_name_names_the_field(tutorial_ids: torch.Tensor) -> None:
    with pytest.raises(AttentionInputError, match="mask: unknown mask 'nopeak'") as info:
        build_mask("nopeak", tutorial_ids, tutorial_ids, pad_id=0)
    assert info.value.field == "mask"


@pytest.mark.parametrize("name", ["causal", "padding_causal"])
def test_causal_mask_is_refused_for_cross_attention(tutorial_ids: torch.Tensor, name: str) -> None:
    with pytest.raises(AttentionInputError, match="self-attention only"):
        build_mask(name, tutorial_ids, tutorial_ids, pad_id=0, cross=True)
