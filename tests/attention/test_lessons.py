import math

import pytest
import torch
from attnviz.attention import AttentionInputError, EmbeddedAttention, LayerConfig, compute_attention
from attnviz.attention.engine import STAGE_NAMES
from attnviz.attention.lessons import decoding_experiment, parameter_table, scaling_experiment
from attnviz.attention.summary import dropout_weights, row_entropy_bits
from attnviz.attention.tutorials import TUTORIAL_BATCH
from torch import nn
from torch.nn import functional as F  # noqa: N812


def test_stages_recompute_from_q_k_v_with_plain_torch() -> None:
    result = compute_attention(
        TUTORIAL_BATCH,
        LayerConfig(d_model=16, num_heads=4),
        mask="padding_causal",
        stages=STAGE_NAMES,
    )
    st = result.stages
    assert set(st) == set(STAGE_NAMES)
    assert st["q"].shape == (5, 4, 10, 4) and st["head_output"].shape == (5, 4, 10, 4)
    torch.testing.assert_close(st["scores"], st["q"] @ st["k"].transpose(-2, -1))
    torch.testing.assert_close(st["scaled_scores"], st["scores"] / math.sqrt(4))
    hidden = ~result.mask[:, None].expand_as(st["masked_scores"])
    assert torch.all(st["masked_scores"][hidden] == float("-inf"))
    assert torch.equal(st["masked_scores"][~hidden], st["scaled_scores"][~hidden])
    torch.testing.assert_close(F.softmax(st["masked_scores"], dim=-1), result.attn_weights)
    torch.testing.assert_close(st["head_output"], result.attn_weights @ st["v"])
    # The stages are those of the returned weights' own layer: the Q slice is x W_q.
    model = EmbeddedAttention.seeded(100, 16, 4, seed=0)
    with torch.no_grad():
        q = model.attention.W_q(model.embedding(result.query_ids))
    torch.testing.assert_close(st["q"], q.view(5, 10, 4, 4).transpose(1, 2))


def test_unknown_stage_is_an_error() -> None:
    with pytest.raises(AttentionInputError, match="unknown stage 'logits'") as info:
        compute_attention([[1, 2]], stages=["logits"])
    assert info.value.field == "include"


def test_scale_off_is_softmax_of_raw_scores_and_still_verified() -> None:
    result = compute_attention(
        TUTORIAL_BATCH,
        LayerConfig(d_model=64, num_heads=2),
        mask="padding",
        scale=False,
        stages=["scores", "scaled_scores"],
        verify=True,
    )
    assert torch.equal(result.stages["scaled_scores"], result.stages["scores"])
    assert result.verification is not None and result.verification.matches
    scaled = compute_attention(TUTORIAL_BATCH, LayerConfig(d_model=64, num_heads=2), mask="padding")
    # Without the scale (d_k = 32) the heads are sharper: lower entropy everywhere.
    assert torch.all(result.head_entropy_bits < scaled.head_entropy_bits)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_is_torch_dropout_bit_for_bit(p: float) -> None:
    weights = compute_attention(TUTORIAL_BATCH, mask="padding").attn_weights
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(42)
        expected = F.dropout(weights, p, training=True)
    assert torch.equal(dropout_weights(weights, p, seed=42), expected)


def test_dropout_keeps_rows_summing_to_one_in_expectation() -> None:
    result = compute_attention(
        [[5, 6, 7, 8, 9, 10, 11, 12]],
        LayerConfig(d_model=8, num_heads=2),
        mask="none",
        dropout=0.3,
        dropout_seed=3,
    )
    dropped = result.dropped_weights
    assert dropped is not None
    kept = dropped != 0
    # Kept weights are scaled by 1/(1-p), the others are 0.
    torch.testing.assert_close(dropped[kept], result.attn_weights[kept] / 0.7)
    sums = torch.stack(
        [dropout_weights(result.attn_weights, 0.3, seed).sum(-1) for seed in range(400)]
    )
    assert abs(float(sums.mean()) - 1.0) < 0.01
    assert float(sums.std()) > 0.05, "single rows do not sum to exactly 1"
    with pytest.raises(AttentionInputError, match=r"dropout: must lie in \[0, 1\)"):
        compute_attention([[1]], dropout=1.0)


def test_row_entropy_matches_torch_categorical() -> None:
    probs = torch.softmax(torch.randn(6, 9, generator=torch.Generator().manual_seed(0)), -1)
    expected = torch.distributions.Categorical(probs=probs.double()).entropy() / math.log(2)
    torch.testing.assert_close(row_entropy_bits(probs), expected, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(row_entropy_bits(probs.double()), expected)
    assert float(row_entropy_bits(torch.full((1, 8), 1 / 8))[0]) == pytest.approx(3.0)
    assert float(row_entropy_bits(torch.tensor([[0.0, 1.0, 0.0]]))[0]) == 0.0


def test_head_summary() -> None:
    result = compute_attention([[0, 0], [3, 4]], mask="padding_causal")
    # Sequence 0 is fully masked: no row counts, the entropy is 0.
    assert result.head_entropy_bits[0].tolist() == [0.0, 0.0]
    row1 = row_entropy_bits(result.attn_weights[1, :, 1])  # the only row with 2 keys
    torch.testing.assert_close(result.head_entropy_bits[1], row1 / 2)  # row 0 is one-hot
    torch.testing.assert_close(result.head_max_weight, result.attn_weights.amax(dim=(-2, -1)))
    torch.testing.assert_close(result.head_mean_weights, result.attn_weights.mean(1))
    # The mean of the counted rows' largest weights (row 0: 1.0, alone; row 1: its max).
    assert result.head_mean_row_max[0].tolist() == [0.0, 0.0]
    expected = (1.0 + result.attn_weights[1, :, 1].amax(dim=-1).double()) / 2
    torch.testing.assert_close(result.head_mean_row_max[1], expected)


def test_the_mean_row_max_varies_under_a_causal_mask_where_the_max_weight_cannot() -> None:
    result = compute_attention(
        [list(range(1, 9))], LayerConfig(d_model=16, num_heads=4), mask="causal"
    )
    assert result.head_max_weight[0].tolist() == [1.0] * 4  # row 0 sees only itself
    by_row = result.attn_weights[0].amax(dim=-1).double().mean(dim=-1)  # (H,)
    torch.testing.assert_close(result.head_mean_row_max[0], by_row)
    assert len(set(result.head_mean_row_max[0].tolist())) == 4  # each head its own
    assert float(result.head_mean_row_max[0].max()) < 1.0


def test_scaling_experiment_shows_softmax_turning_one_hot_without_the_scale() -> None:
    cases = scaling_experiment((8, 64, 512), length=16, num_samples=32, seed=0)
    assert [c.d_k for c in cases] == [8, 64, 512]
    for c in cases:
        assert sum(c.scaled.counts) == sum(c.unscaled.counts) == 32 * 16 * 16
        assert len(c.scaled.bin_edges) == len(c.scaled.counts) + 1
        # With the scale, scores have unit variance whatever d_k: entropy stays high.
        assert c.scaled.mean_entropy_bits > 3.0
    unscaled = [c.unscaled.mean_entropy_bits for c in cases]
    assert unscaled[0] > unscaled[1] > unscaled[2]
    assert cases[2].unscaled.one_hot_fraction > 0.5
    assert cases[2].scaled.one_hot_fraction == 0.0
    # Recomputed independently from the same generator draws.
    generator = torch.Generator().manual_seed(0)
    q, k = (torch.randn(32, 16, 8, generator=generator) for _ in range(2))
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), -1)
    expected = torch.distributions.Categorical(probs=weights).entropy().mean() / math.log(2)
    assert cases[0].scaled.mean_entropy_bits == pytest.approx(float(expected), rel=1e-5)


def test_decoding_step_by_step_equals_the_masked_pass_not_the_unmasked_one() -> None:
    result = decoding_experiment(
        "机 器 学 习 真 好 玩", LayerConfig(d_model=16, num_heads=4, seed=2)
    )
    assert result.labels == ["机", "器", "学", "习", "真", "好", "玩"]
    assert result.step_weights.shape == (4, 7, 7)
    assert result.masked_max_abs_diff < 1e-6
    assert result.unmasked_max_abs_diff > 1e-2
    torch.testing.assert_close(result.step_weights, result.masked_weights, atol=1e-6, rtol=0)
    assert torch.all(torch.triu(result.step_weights, diagonal=1) == 0)
    # The last position sees the whole prefix either way: its output does not move.
    assert float(result.unmasked_output_diff[-1]) < 1e-6
    assert float(result.unmasked_output_diff[0]) > 1e-3


@pytest.mark.parametrize(("d_model", "num_heads"), [(8, 2), (64, 8), (96, 3)])
def test_parameter_table(d_model: int, num_heads: int) -> None:
    table = parameter_table(d_model, num_heads)
    names = [row.name for row in table.rows]
    assert names == [
        "W_q.weight",
        "W_q.bias",
        "W_k.weight",
        "W_k.bias",
        "W_v.weight",
        "W_v.bias",
        "W_o.weight",
        "W_o.bias",
    ]
    assert table.total == 4 * d_model**2 + 4 * d_model
    divisors = [h for h in range(1, d_model + 1) if d_model % h == 0]
    assert [h for h, _, _ in table.by_num_heads] == divisors
    assert {total for _, _, total in table.by_num_heads} == {table.total}
    # The same count as PyTorch's own layer.
    reference = nn.MultiheadAttention(d_model, num_heads, device="meta")
    assert sum(p.numel() for p in reference.parameters()) == table.total
