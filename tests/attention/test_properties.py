"""Property tests (hypothesis): random shapes B 1-4, L 1-64, num_heads dividing d_model <= 256."""

import math
from typing import Any

import pytest
import torch
from attnviz.attention import MultiHeadAttention, compute_attention
from attnviz.attention.tutorials import TUTORIAL_BATCH
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.attention.reference import with_layer

pytestmark = pytest.mark.slow  # hypothesis: hundreds of random batches per property


MASKS = ["none", "padding", "causal", "padding_causal"]
FILLS = [float("-inf"), -1e9, -1e12]
PROPERTY = settings(max_examples=150, deadline=None)

ids = st.integers(min_value=0, max_value=99)  # 0 is pad_id: padding inside sequences too
real_ids = st.integers(min_value=1, max_value=99)


@st.composite
def widths(draw: Any) -> tuple[int, int]:
    """(d_model, num_heads) with num_heads dividing d_model <= 256."""
    num_heads = draw(st.integers(min_value=1, max_value=16))
    d_k = draw(st.integers(min_value=1, max_value=256 // num_heads))
    return num_heads * d_k, num_heads


@st.composite
def attention_cases(draw: Any) -> dict[str, Any]:
    d_model, num_heads = draw(widths())
    batch_size = draw(st.integers(min_value=1, max_value=4))
    sequences = draw(
        st.lists(st.lists(ids, min_size=1, max_size=64), min_size=batch_size, max_size=batch_size)
    )
    return {
        "sequences": sequences,
        "d_model": d_model,
        "num_heads": num_heads,
        "mask": draw(st.sampled_from(MASKS)),
        "mask_fill": draw(st.sampled_from(FILLS)),
        "seed": draw(st.integers(min_value=0, max_value=2**32)),
        "dtype": draw(st.sampled_from(["float32", "float64"])),
    }


@PROPERTY
@given(case=attention_cases())
def test_rows_sum_to_one_masked_entries_are_zero_and_pytorch_agrees(case: dict[str, Any]) -> None:
    sequences = case.pop("sequences")
    result = compute_attention(sequences, verify=True, **with_layer(case))
    weights = result.attn_weights
    batch_size, num_heads, len_q, len_k = weights.shape
    assert (batch_size, num_heads) == (len(sequences), case["num_heads"])
    assert torch.isfinite(weights).all() and torch.isfinite(result.attn_output).all()

    mask = result.mask[:, None].expand_as(weights)  # (B, H, L_q, L_k), True = attend
    fully = result.fully_masked[:, None, :].expand(batch_size, num_heads, len_q)
    tolerance = 1e-6 if case["dtype"] == "float32" else 1e-12
    sums = weights.sum(dim=-1)
    # Every row with a key to attend to sums to 1, and its masked entries are exactly 0.
    assert torch.all((sums[~fully] - 1).abs() <= max(tolerance, 1e-6))
    assert torch.all(weights[~fully[..., None].expand_as(mask) & ~mask] == 0.0)
    # Fully-masked rows follow the documented rule: 0 under -inf, uniform otherwise.
    if math.isinf(case["mask_fill"]):
        assert torch.all(weights[fully] == 0.0)
    else:
        assert torch.allclose(weights[fully], torch.full_like(weights[fully], 1 / len_k))
    verification = result.verification
    assert verification is not None
    assert verification.mha_weights_max_abs_diff <= max(tolerance, 1e-6)
    assert verification.matches, verification


@PROPERTY
@given(
    sequence=st.lists(real_ids, min_size=2, max_size=64),
    width=widths(),
    seed=st.integers(min_value=0, max_value=2**32),
    data=st.data(),
)
def test_causal_prefix_invariance(
    sequence: list[int], width: tuple[int, int], seed: int, data: st.DataObject
) -> None:
    """Tutorial 002 section 3.4: with the causal mask, appending tokens leaves the first t
    positions unchanged, so one masked pass equals step-by-step decoding."""
    d_model, num_heads = width
    t = data.draw(st.integers(min_value=1, max_value=len(sequence) - 1), label="t")
    kwargs = {"d_model": d_model, "num_heads": num_heads, "seed": seed, "mask": "causal"}
    full = compute_attention([sequence], **with_layer(kwargs))
    prefix = compute_attention([sequence[:t]], **with_layer(kwargs))
    torch.testing.assert_close(
        full.attn_weights[:, :, :t, :t], prefix.attn_weights, atol=1e-6, rtol=0
    )
    assert torch.all(full.attn_weights[:, :, :t, t:] == 0.0)
    torch.testing.assert_close(full.attn_output[:, :t], prefix.attn_output, atol=1e-6, rtol=0)


@PROPERTY
@given(
    sequence=st.lists(real_ids, min_size=1, max_size=54),
    extra_pads=st.integers(min_value=1, max_value=10),
    width=widths(),
    mask=st.sampled_from(["padding", "padding_causal"]),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_padding_invariance(
    sequence: list[int], extra_pads: int, width: tuple[int, int], mask: str, seed: int
) -> None:
    d_model, num_heads = width
    length = len(sequence)
    kwargs = {"d_model": d_model, "num_heads": num_heads, "seed": seed, "mask": mask}
    plain = compute_attention([sequence], **with_layer(kwargs))
    padded = compute_attention([sequence + [0] * extra_pads], **with_layer(kwargs))
    torch.testing.assert_close(
        padded.attn_weights[:, :, :length, :length], plain.attn_weights, atol=1e-6, rtol=0
    )
    assert torch.all(padded.attn_weights[..., length:] == 0.0)
    torch.testing.assert_close(padded.attn_output[:, :length], plain.attn_output, atol=1e-6, rtol=0)


@settings(max_examples=100, deadline=None)
@given(width=widths())
def test_parameter_count_is_4_d_model_squared_plus_4_d_model(width: tuple[int, int]) -> None:
    d_model, num_heads = width
    layer = MultiHeadAttention(d_model, num_heads, device="meta")
    assert sum(p.numel() for p in layer.parameters()) == 4 * d_model**2 + 4 * d_model


@settings(max_examples=30, deadline=None)
@given(case=attention_cases())
def test_same_seed_gives_bit_identical_weights(case: dict[str, Any]) -> None:
    sequences = case.pop("sequences")
    first = compute_attention(sequences, **with_layer(case))
    second = compute_attention(sequences, **with_layer(case))
    assert torch.equal(first.attn_weights, second.attn_weights)
    assert torch.equal(first.attn_output, second.attn_output)


def test_step_by_step_decoding_equals_one_masked_pass_and_not_without_the_mask() -> None:
    """Tutorial 002's experiment on a tutorial sequence, every prefix in turn."""
    sequence = TUTORIAL_BATCH[2]  # 10 tokens, no padding
    full = compute_attention([sequence], mask="causal")
    for t in range(1, len(sequence)):
        step = compute_attention([sequence[:t]], mask="causal")
        torch.testing.assert_close(full.attn_output[:, :t], step.attn_output, atol=1e-6, rtol=0)
    # Without the mask, position 0 sees the appended tokens and its encoding changes.
    unmasked_full = compute_attention([sequence], mask="none")
    unmasked_step = compute_attention([sequence[:2]], mask="none")
    assert not torch.allclose(
        unmasked_full.attn_output[:, :2], unmasked_step.attn_output, atol=1e-3
    )


@pytest.mark.parametrize("mask", MASKS)
def test_api_json_never_carries_nan_or_infinity(client: Any, mask: str) -> None:
    import json

    def reject(token: str) -> None:
        raise AssertionError(f"non-finite number {token} in the response")

    body = {"sequences": [[0, 0, 0], [0, 4, 5, 0], [1, 2, 3, 4, 5]], "mask": mask, "verify": True}
    response = client.post("/api/v1/attention", json=body)
    assert response.status_code == 200
    json.loads(response.content, parse_constant=reject)
