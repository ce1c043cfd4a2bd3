import math

import pytest
import torch
from attnviz.attention import AttentionInputError, LayerConfig
from attnviz.attention.parameters import build_seeded
from attnviz.attention.transformer import (
    DecoderLayer,
    EncoderLayer,
    TransformerStack,
    compute_transformer,
    sinusoidal_positional_encoding,
)
from attnviz.attention.tutorials import TUTORIAL_BATCH, TUTORIAL_TARGETS
from attnviz.attention.verify import torch_multihead_attention_from
from torch import nn

from tests.attention.reference import with_layer

D_MODEL, HEADS, D_FF, LAYERS, SEED = 16, 4, 32, 3, 9


def copy_linear(target: nn.Linear, source: nn.Linear) -> None:
    target.weight.data.copy_(source.weight.data)
    target.bias.data.copy_(source.bias.data)


def copy_norm(target: nn.LayerNorm, source: nn.LayerNorm) -> None:
    target.weight.data.copy_(source.weight.data)
    target.bias.data.copy_(source.bias.data)


def sizes(ours: EncoderLayer | DecoderLayer) -> tuple[int, int, int]:
    return ours.self_attn.d_model, ours.self_attn.num_heads, ours.ff.fc1.out_features


def torch_encoder_layer(ours: EncoderLayer) -> nn.TransformerEncoderLayer:
    ref = nn.TransformerEncoderLayer(*sizes(ours), dropout=0.0, batch_first=True)
    ref.self_attn = torch_multihead_attention_from(ours.self_attn)
    copy_linear(ref.linear1, ours.ff.fc1)
    copy_linear(ref.linear2, ours.ff.fc2)
    copy_norm(ref.norm1, ours.attn_layer_norm)
    copy_norm(ref.norm2, ours.ff_layer_norm)
    return ref.eval()


def torch_decoder_layer(ours: DecoderLayer) -> nn.TransformerDecoderLayer:
    ref = nn.TransformerDecoderLayer(*sizes(ours), dropout=0.0, batch_first=True)
    ref.self_attn = torch_multihead_attention_from(ours.self_attn)
    ref.multihead_attn = torch_multihead_attention_from(ours.cross_attn)
    copy_linear(ref.linear1, ours.ff.fc1)
    copy_linear(ref.linear2, ours.ff.fc2)
    copy_norm(ref.norm1, ours.self_attn_layer_norm)
    copy_norm(ref.norm2, ours.cross_attn_layer_norm)
    copy_norm(ref.norm3, ours.ff_layer_norm)
    return ref.eval()


def test_encoder_decoder_stack_matches_torch_transformer_layers() -> None:
    result = compute_transformer(
        TUTORIAL_BATCH,
        LayerConfig(d_model=D_MODEL, num_heads=HEADS, seed=SEED),
        targets=TUTORIAL_TARGETS,
        d_ff=D_FF,
        num_layers=LAYERS,
    )
    assert result.encoder_weights.shape == (LAYERS, 5, HEADS, 10, 10)
    assert result.decoder_self_weights is not None and result.cross_weights is not None
    assert result.decoder_self_weights.shape == (LAYERS, 5, HEADS, 12, 12)
    assert result.cross_weights.shape == (LAYERS, 5, HEADS, 12, 10)

    stack = build_seeded(
        lambda: TransformerStack(100, D_MODEL, HEADS, D_FF, LAYERS, decoder=True), SEED
    )
    src = torch.tensor([s + [0] * (10 - len(s)) for s in TUTORIAL_BATCH])
    trg = torch.tensor([t + [0] * (12 - len(t)) for t in TUTORIAL_TARGETS])
    src_ignore, trg_ignore = src == 0, trg == 0
    future = torch.triu(torch.ones(12, 12, dtype=torch.bool), diagonal=1)
    with torch.no_grad():
        x = stack.embedding(src) + sinusoidal_positional_encoding(10, D_MODEL)
        for layer, ours in enumerate(stack.encoder):
            ref = torch_encoder_layer(ours)
            _, weights = ref.self_attn(
                x, x, x, key_padding_mask=src_ignore, need_weights=True, average_attn_weights=False
            )
            torch.testing.assert_close(result.encoder_weights[layer], weights, atol=1e-6, rtol=0)
            x = ref(x, src_key_padding_mask=src_ignore)
        torch.testing.assert_close(result.encoder_output, x, atol=1e-5, rtol=0)

        y = stack.embedding(trg) + sinusoidal_positional_encoding(12, D_MODEL)
        for layer, ours in enumerate(stack.decoder):
            ref = torch_decoder_layer(ours)
            attended, self_weights = ref.self_attn(
                y,
                y,
                y,
                attn_mask=future,
                key_padding_mask=trg_ignore,
                need_weights=True,
                average_attn_weights=False,
            )
            torch.testing.assert_close(
                result.decoder_self_weights[layer], self_weights, atol=1e-6, rtol=0
            )
            after_self = ref.norm1(y + attended)
            _, cross = ref.multihead_attn(
                after_self,
                x,
                x,
                key_padding_mask=src_ignore,
                need_weights=True,
                average_attn_weights=False,
            )
            torch.testing.assert_close(result.cross_weights[layer], cross, atol=1e-6, rtol=0)
            y = ref(
                y,
                x,
                tgt_mask=future,
                tgt_key_padding_mask=trg_ignore,
                memory_key_padding_mask=src_ignore,
            )
        assert result.decoder_output is not None
        torch.testing.assert_close(result.decoder_output, y, atol=1e-5, rtol=0)


def test_encoder_only_without_positional_encoding() -> None:
    result = compute_transformer(TUTORIAL_BATCH, num_layers=1, positional_encoding="none")
    assert result.decoder_self_weights is None and result.cross_weights is None
    stack = build_seeded(lambda: TransformerStack(100, 8, 2, 16, 1, decoder=False), 0)
    src = torch.tensor([s + [0] * (10 - len(s)) for s in TUTORIAL_BATCH])
    with torch.no_grad():
        expected = torch_encoder_layer(stack.encoder[0])(
            stack.embedding(src), src_key_padding_mask=src == 0
        )
    torch.testing.assert_close(result.encoder_output, expected, atol=1e-5, rtol=0)
    # Padded keys get weight 0 in every layer and head.
    assert torch.all(result.encoder_weights[0, 1, :, :, 5:] == 0)


def test_sinusoidal_positional_encoding_is_the_paper_formula() -> None:
    pe = sinusoidal_positional_encoding(50, 7)
    for pos in (0, 1, 13, 49):
        for i in range(7):
            angle = pos / 10000 ** ((i - i % 2) / 7)
            expected = math.sin(angle) if i % 2 == 0 else math.cos(angle)
            assert float(pe[pos, i]) == pytest.approx(expected, abs=1e-6)


def test_parameter_count_of_the_stack() -> None:
    d, ff, n = 8, 16, 2
    attention = 4 * d * d + 4 * d
    feed_forward = d * ff + ff + ff * d + d
    norm = 2 * d
    encoder = attention + feed_forward + 2 * norm
    decoder = 2 * attention + feed_forward + 3 * norm
    result = compute_transformer([[1, 2]], targets=[[3]], d_ff=ff, num_layers=n)
    assert result.num_parameters == 100 * d + n * (encoder + decoder)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_layers": 0}, "num_layers"),
        ({"num_layers": 13}, "num_layers"),
        ({"d_ff": 0}, "d_ff"),
        ({"positional_encoding": "learned"}, "positional_encoding"),
        ({"d_model": 10, "num_heads": 3}, "num_heads"),
        ({"targets": [[1], [2]]}, "targets"),
    ],
)
def test_errors_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(AttentionInputError) as info:
        compute_transformer([[1, 2]], **with_layer(kwargs))
    assert info.value.field == field
