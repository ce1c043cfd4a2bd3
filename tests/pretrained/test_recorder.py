"""The attention recorder against transformers' own output_attentions (eager attention).

Tiny models are built from configs at test time (tests/pretrained/tiny.py: random
weights, nothing downloaded): a decoder with grouped-query attention, GPT-2, one with a
sliding window, a BERT encoder, and T5 and BART encoder-decoders (T5 adds a relative
position bias to the scores, which the recorder folds into SDPA's mask and slices per
group and query for the eager weights); padded batches included.
"""

from typing import Any

import pytest
import torch
from attnviz.pretrained.recorder import record_attention, use_recorder

from tests.pretrained import tiny
from tests.pretrained.support import require_transformers

VOCAB = 96


@pytest.fixture(autouse=True)
def _transformers() -> None:
    require_transformers()


SELF_ATTENTION = ["llama", "gpt2", "mistral", "bert"]
"""Tiny models of tests/pretrained/tiny.py: grouped-query attention (2 query heads per
key/value head), GPT-2, a sliding window (tiny.SLIDING_WINDOW), a BERT encoder."""
SEQ2SEQ = ["t5", "bart"]


def batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two inputs of 11 and 7 tokens, the second right-padded."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, VOCAB, (2, 11), generator=generator)
    attention_mask = torch.ones(2, 11, dtype=torch.long)
    attention_mask[1, 7:] = 0
    return input_ids, attention_mask


def built(name: str, implementation: str) -> Any:
    """The tiny ``name`` of tests/pretrained/tiny.py, weights from seed 0, VOCAB ids."""
    build, style = tiny.BUILDERS[name]
    torch.manual_seed(0)
    model = build(style, VOCAB)
    model.set_attn_implementation(implementation)
    return model.eval()


@pytest.mark.parametrize("name", SELF_ATTENTION)
def test_every_head_equals_output_attentions_of_eager_attention(name: str) -> None:
    input_ids, attention_mask = batch(1)
    reference = built(name, "eager")
    with torch.inference_mode():
        expected = reference(input_ids, attention_mask=attention_mask, output_attentions=True)
    model = built(name, "eager")
    use_recorder(model)
    with torch.inference_mode(), record_attention() as recording:
        output = model(input_ids, attention_mask=attention_mask)
    assert len(recording.calls) == len(expected.attentions)
    for layer, weights in enumerate(expected.attentions):  # (B, H, L, L)
        recorded = recording.layer_weights(layer)
        assert recorded.shape == weights.shape
        real = attention_mask.bool()
        # Padded queries' rows are whatever each implementation makes of them; compare
        # every real query row over all keys.
        torch.testing.assert_close(
            recorded.permute(0, 2, 1, 3)[real], weights.permute(0, 2, 1, 3)[real], atol=1e-5, rtol=0
        )
    # The recorded model's own output is the SDPA output: the same to float rounding.
    first = output.logits if hasattr(output, "logits") else output.last_hidden_state
    reference_out = expected.logits if hasattr(expected, "logits") else expected.last_hidden_state
    real = attention_mask.bool()
    torch.testing.assert_close(first[real], reference_out[real], atol=1e-5, rtol=1e-5)


def test_grouped_query_heads_read_their_shared_key_value_head() -> None:
    model = built("llama", "eager")
    use_recorder(model)
    input_ids, attention_mask = batch(2)
    with torch.inference_mode(), record_attention() as recording:
        model(input_ids, attention_mask=attention_mask)
    call = recording.calls[0]
    assert (call.num_heads, call.num_key_value_heads) == (4, 2)
    assert [call.key_value_head(h) for h in range(4)] == [0, 0, 1, 1]
    # Heads sharing keys still differ (their queries do).
    assert not torch.equal(recording.head_weights(0, 0), recording.head_weights(0, 1))


def test_sliding_window_masks_keys_outside_the_window() -> None:
    model = built("mistral", "eager")
    use_recorder(model)
    input_ids = batch(3)[0][:1]
    with torch.inference_mode(), record_attention() as recording:
        model(input_ids)
    weights = recording.head_weights(1, 2)[0]  # (L, L)
    rows, cols = torch.meshgrid(torch.arange(11), torch.arange(11), indexing="ij")
    outside = (cols > rows) | (rows - cols >= tiny.SLIDING_WINDOW)
    assert torch.all(weights[outside] == 0)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(11))


def test_nothing_is_kept_outside_a_recording_and_recordings_do_not_mix() -> None:
    model = built("gpt2", "eager")
    use_recorder(model)
    input_ids, attention_mask = batch(4)
    with torch.inference_mode():
        model(input_ids, attention_mask=attention_mask)  # not recorded
        with record_attention() as first:
            model(input_ids[:1])
        with record_attention() as second:
            model(input_ids, attention_mask=attention_mask)
    assert len(first.calls) == len(second.calls) == 2
    assert first.calls[0].query.shape[0] == 1
    assert second.calls[0].query.shape[0] == 2


def test_a_head_outside_the_layer_is_refused() -> None:
    model = built("gpt2", "eager")
    use_recorder(model)
    with torch.inference_mode(), record_attention() as recording:
        model(batch(5)[0])
    with pytest.raises(IndexError, match="head 4"):
        recording.head_weights(0, 4)
    with pytest.raises(IndexError):
        recording.head_weights(2, 0)


def seq2seq_inputs() -> dict[str, torch.Tensor]:
    """11 source tokens (the second input padded to 7) and 6 target tokens (padded to 4)."""
    input_ids, attention_mask = batch(6)
    decoder_input_ids = torch.randint(1, VOCAB, (2, 6), generator=torch.Generator().manual_seed(7))
    decoder_attention_mask = torch.ones(2, 6, dtype=torch.long)
    decoder_attention_mask[0, 4:] = 0
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "decoder_input_ids": decoder_input_ids,
        "decoder_attention_mask": decoder_attention_mask,
    }


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_encoder_decoder_calls_equal_output_attentions_and_outputs(name: str) -> None:
    inputs = seq2seq_inputs()
    reference = built(name, "eager")
    with torch.inference_mode():
        expected = reference(**inputs, output_attentions=True, use_cache=False)
    model = built(name, "eager")
    use_recorder(model)
    with torch.inference_mode(), record_attention() as recording:
        output = model(**inputs, use_cache=False)
    # The model runs the encoder's layers, then each decoder layer's self and cross
    # attention in turn.
    encoder, decoder, cross = (
        expected.encoder_attentions,
        expected.decoder_attentions,
        expected.cross_attentions,
    )
    order = list(encoder) + [w for pair in zip(decoder, cross, strict=True) for w in pair]
    assert len(recording.calls) == len(order) == len(encoder) + 2 * len(decoder)
    for index, weights in enumerate(order):
        recorded = recording.layer_weights(index)
        assert recorded.shape == weights.shape
        torch.testing.assert_close(recorded, weights, atol=1e-5, rtol=0)
        for query in range(weights.shape[2]):  # one row alone, bias and mask sliced
            torch.testing.assert_close(
                recording.layer_weights(index, query=query),
                weights[:, :, query : query + 1],
                atol=1e-5,
                rtol=0,
            )
    # With the position bias folded into SDPA's mask, the output is eager's output.
    torch.testing.assert_close(output.logits, expected.logits, atol=1e-5, rtol=1e-5)


def test_t5_position_bias_is_kept_and_sliced_per_group() -> None:
    model = built("t5", "eager")
    use_recorder(model)
    with torch.inference_mode(), record_attention() as recording:
        model(**seq2seq_inputs(), use_cache=False)
    bias = recording.calls[0].kwargs["position_bias"]
    assert bias.shape[1:] == (4, 11, 11)  # every head its own bias, relative positions
    assert not torch.equal(bias[0, 0], bias[0, 1])
    # One group of one head (no grouped-query attention in T5) gets that head's bias:
    # the weights of head 2 alone equal head 2 of the whole layer.
    torch.testing.assert_close(
        recording.group_weights(0, 2), recording.layer_weights(0)[:, 2:3], atol=0, rtol=0
    )
    torch.testing.assert_close(
        recording.group_weights(0, 2, query=5),
        recording.layer_weights(0)[:, 2:3, 5:6],
        atol=1e-6,
        rtol=0,
    )


@pytest.mark.parametrize("name", ["llama", "mistral"])
def test_one_query_row_equals_that_row_of_the_layer(name: str) -> None:
    model = built(name, "eager")
    use_recorder(model)
    input_ids, attention_mask = batch(8)
    with torch.inference_mode(), record_attention() as recording:
        model(input_ids, attention_mask=attention_mask)
    for layer in range(len(recording.calls)):
        weights = recording.layer_weights(layer)
        for query in range(11):
            row = recording.layer_weights(layer, query=query)
            assert row.shape == (2, weights.shape[1], 1, 11)
            torch.testing.assert_close(row, weights[:, :, query : query + 1], atol=1e-6, rtol=0)
