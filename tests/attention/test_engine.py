import subprocess
import sys
import threading

import pytest
import torch
from attnviz.attention import (
    AttentionInputError,
    EmbeddedAttention,
    LayerConfig,
    compute_attention,
    padding_mask,
)
from attnviz.attention.parameters import SkipInit
from attnviz.attention.tokens import encode_batches
from attnviz.attention.tutorials import TUTORIAL_BATCH, TUTORIAL_TARGETS

from tests.attention.reference import torch_mha_attention, tutorial_multihead_attention, with_layer

LENGTHS = [len(seq) for seq in TUTORIAL_BATCH]


def tutorial_ids(batch: list[list[int]]) -> torch.Tensor:
    return encode_batches({"sequences": batch}, pad_id=0, vocab_size=100)["sequences"].ids


def test_tutorial_batch_padding_causal_zeroes_padded_and_future_keys() -> None:
    result = compute_attention(
        TUTORIAL_BATCH, LayerConfig(d_model=8, num_heads=2), mask="padding_causal"
    )
    weights = result.attn_weights
    assert weights.shape == (5, 2, 10, 10)
    for b, length in enumerate(LENGTHS):
        assert torch.all(weights[b, :, :, length:] == 0.0), "padding columns must be exactly 0"
    upper = torch.triu(torch.ones(10, 10, dtype=torch.bool), diagonal=1)
    assert torch.all(weights[:, :, upper] == 0.0), "future keys must be exactly 0"
    assert torch.allclose(weights.sum(-1), torch.ones(5, 2, 10), atol=1e-6)
    assert not result.fully_masked.any()
    assert torch.isfinite(weights).all() and torch.isfinite(result.attn_output).all()


@pytest.mark.parametrize(
    ("mask", "uses_padding", "causal"),
    [
        ("none", False, False),
        ("padding", True, False),
        ("causal", False, True),
        ("padding_causal", True, True),
    ],
)
def test_matches_torch_multihead_attention(mask: str, uses_padding: bool, causal: bool) -> None:
    result = compute_attention(
        TUTORIAL_BATCH, LayerConfig(d_model=8, num_heads=2, seed=3), mask=mask
    )
    model = EmbeddedAttention.seeded(100, 8, 2, seed=3)
    ids = tutorial_ids(TUTORIAL_BATCH)
    key_padding = padding_mask(ids, 0)[:, 0] if uses_padding else None
    ref_weights, ref_output = torch_mha_attention(model, ids, ids, key_padding, causal)
    torch.testing.assert_close(result.attn_weights, ref_weights, atol=1e-6, rtol=0)
    torch.testing.assert_close(result.attn_output, ref_output, atol=1e-6, rtol=0)


def test_matches_the_tutorial_code_line_for_line() -> None:
    result = compute_attention(
        TUTORIAL_BATCH, LayerConfig(d_model=8, num_heads=2, seed=7), mask="padding_causal"
    )
    model = EmbeddedAttention.seeded(100, 8, 2, seed=7)
    ids = tutorial_ids(TUTORIAL_BATCH)
    mask = padding_mask(ids, 0) & torch.tril(torch.ones(1, 10, 10, dtype=torch.bool))
    ref_weights, ref_output = tutorial_multihead_attention(model, ids, ids, mask)
    assert torch.equal(result.attn_weights, ref_weights)
    torch.testing.assert_close(result.attn_output, ref_output, atol=1e-6, rtol=0)


def test_cross_attention_on_the_tutorial_encoder_decoder_batch() -> None:
    result = compute_attention(
        TUTORIAL_BATCH,
        LayerConfig(d_model=8, num_heads=2),
        targets=TUTORIAL_TARGETS,
        mask="padding",
    )
    assert result.attn_weights.shape == (5, 2, 12, 10)
    assert result.attn_output.shape == (5, 12, 8)
    for b, length in enumerate(LENGTHS):
        assert torch.all(result.attn_weights[b, :, :, length:] == 0.0)
    assert torch.allclose(result.attn_weights.sum(-1), torch.ones(5, 2, 12), atol=1e-6)
    assert result.query_labels[0] == ["33", "11", "49", "10"] + ["<pad>"] * 8
    assert result.key_labels[3] == ["66", "88", "98", "47"] + ["<pad>"] * 6

    model = EmbeddedAttention.seeded(100, 8, 2, seed=0)
    src, trg = tutorial_ids(TUTORIAL_BATCH), tutorial_ids(TUTORIAL_TARGETS)
    ref_weights, ref_output = torch_mha_attention(
        model, trg, src, padding_mask(src, 0)[:, 0], causal=False
    )
    torch.testing.assert_close(result.attn_weights, ref_weights, atol=1e-6, rtol=0)
    torch.testing.assert_close(result.attn_output, ref_output, atol=1e-6, rtol=0)


def test_cross_attention_without_mask_is_the_tutorial_section_7_8() -> None:
    result = compute_attention(TUTORIAL_BATCH, targets=TUTORIAL_TARGETS, mask="none")
    model = EmbeddedAttention.seeded(100, 8, 2, seed=0)
    ref_weights, _ = tutorial_multihead_attention(
        model, tutorial_ids(TUTORIAL_TARGETS), tutorial_ids(TUTORIAL_BATCH), None
    )
    assert torch.equal(result.attn_weights, ref_weights)


def test_float64_matches_reference_to_1e_12() -> None:
    result = compute_attention(TUTORIAL_BATCH, mask="padding_causal", dtype="float64")
    assert result.attn_weights.dtype == torch.float64
    model = EmbeddedAttention.seeded(100, 8, 2, seed=0).double()
    ids = tutorial_ids(TUTORIAL_BATCH)
    ref_weights, ref_output = torch_mha_attention(
        model, ids, ids, padding_mask(ids, 0)[:, 0], causal=True
    )
    torch.testing.assert_close(result.attn_weights, ref_weights, atol=1e-12, rtol=0)
    torch.testing.assert_close(result.attn_output, ref_output, atol=1e-12, rtol=0)


def test_same_seed_same_numbers_other_seed_other_numbers() -> None:
    rng_before = torch.get_rng_state()
    first = compute_attention(TUTORIAL_BATCH, LayerConfig(seed=11))
    second = compute_attention(TUTORIAL_BATCH, LayerConfig(seed=11))
    other = compute_attention(TUTORIAL_BATCH, LayerConfig(seed=12))
    assert torch.equal(first.attn_weights, second.attn_weights)
    assert torch.equal(first.attn_output, second.attn_output)
    assert not torch.allclose(first.attn_weights, other.attn_weights)
    assert torch.equal(torch.get_rng_state(), rng_before), "the global RNG must not be used"


def test_parameters_are_drawn_from_the_seeded_generator_in_documented_order() -> None:
    model = EmbeddedAttention.seeded(100, 8, 2, seed=5)
    generator = torch.Generator().manual_seed(5)
    embedding = torch.empty(100, 8).normal_(generator=generator)
    bound = 8**-0.5
    w_q = torch.empty(8, 8).uniform_(-bound, bound, generator=generator)
    assert torch.equal(model.embedding.weight, embedding)
    torch.testing.assert_close(model.attention.W_q.weight, w_q, atol=1e-7, rtol=0)


def test_skip_init_skips_nn_inits_draws_and_only_in_its_thread() -> None:
    weight = torch.zeros(3, 4)
    other_thread: list[torch.Tensor] = []
    with SkipInit():
        # the initialisers nn.Embedding and nn.Linear call in their constructors
        assert torch.nn.init.normal_(weight) is weight
        torch.nn.init.uniform_(weight, -1.0, 1.0)
        torch.nn.init.kaiming_uniform_(weight, a=5**0.5)
        assert torch.equal(weight, torch.zeros(3, 4))  # nothing drawn
        weight.add_(1)  # the rest of torch runs
        assert torch.equal(weight, torch.ones(3, 4))
        thread = threading.Thread(target=lambda: other_thread.append(torch.nn.init.normal_(weight)))
        thread.start()
        thread.join()
    assert other_thread[0] is weight and not torch.equal(weight, torch.ones(3, 4))  # drawn there
    torch.nn.init.uniform_(weight, 2.0, 3.0)  # and here once the mode ended
    assert bool(((weight >= 2.0) & (weight <= 3.0)).all())


@pytest.mark.slow  # a Python of its own
def test_a_toy_computation_never_imports_torch_dynamo() -> None:
    # nn.Embedding's own normal_ on the meta device imports torch._dynamo (2.4 CPU-s); the
    # seeded build skips it (SkipInit), so the server's and the CLI's toy path never pay it.
    code = (
        "import sys\n"
        "from attnviz.attention import LayerConfig, compute_attention\n"
        "from attnviz.attention.tutorials import TUTORIAL_BATCH\n"
        "compute_attention(TUTORIAL_BATCH, LayerConfig(seed=3))\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.strip() == "False", done.stdout + done.stderr


@pytest.mark.parametrize(("d_model", "num_heads"), [(8, 1), (8, 2), (8, 8), (64, 8), (96, 3)])
def test_parameter_count_is_independent_of_num_heads(d_model: int, num_heads: int) -> None:
    result = compute_attention([[1, 2, 3]], LayerConfig(d_model=d_model, num_heads=num_heads))
    assert result.num_parameters == 4 * d_model**2 + 4 * d_model
    assert result.num_embedding_parameters == 100 * d_model


def test_fully_masked_rows_are_zero_never_nan() -> None:
    # An all-padding sequence: every key is masked for every query.
    result = compute_attention([[0, 0, 0], [5, 6, 0]], mask="padding_causal")
    assert result.fully_masked.tolist() == [[True, True, True], [False, False, False]]
    assert torch.all(result.attn_weights[0] == 0.0)
    assert torch.isfinite(result.attn_weights).all()
    assert torch.isfinite(result.attn_output).all()
    # The row's attention output before W_o is 0, so the layer output is W_o's bias.
    model = EmbeddedAttention.seeded(100, 8, 2, seed=0)
    bias = model.attention.W_o.bias.detach().expand(3, 8)
    torch.testing.assert_close(result.attn_output[0], bias, atol=1e-7, rtol=0)
    assert torch.allclose(result.attn_weights[1].sum(-1), torch.ones(2, 3), atol=1e-6)


def test_words_get_ids_in_first_seen_order_with_pad_reserved() -> None:
    result = compute_attention(
        ["I love deep learning", "deep <pad> I"], LayerConfig(pad_id=2, vocab_size=10)
    )
    # I=0, love=1, (2 is pad), deep=3, learning=4
    assert result.query_ids.tolist() == [[0, 1, 3, 4], [3, 2, 0, 2]]
    assert result.query_labels == [
        ["I", "love", "deep", "learning"],
        ["deep", "<pad>", "I", "<pad>"],
    ]
    assert result.mask[1, :, 1].tolist() == [False] * 4


def test_targets_share_the_source_vocabulary() -> None:
    result = compute_attention(["a b c"], targets=["c a"], mask="padding")
    assert result.key_ids.tolist() == [[1, 2, 3]]
    assert result.query_ids.tolist() == [[3, 1]]
    assert result.attn_weights.shape == (1, 2, 2, 3)


@pytest.mark.parametrize(
    ("kwargs", "field", "text"),
    [
        (
            {"sequences": [[1, 2]], "d_model": 10, "num_heads": 3},
            "num_heads",
            r"num_heads must divide d_model \(10\): try 1, 2, 5 or 10",
        ),
        ({"sequences": [[1, 0]], "mask_fill": -1e39}, "mask_fill", r"\[-3.4028235e\+38, 0\]"),
        (
            {"sequences": [[1, 0]], "mask_fill": -1e39, "dtype": "float16"},
            "mask_fill",
            "masked in float32",
        ),
        ({"sequences": [[1, 2]], "d_model": 0}, "d_model", ">= 1"),
        ({"sequences": []}, "sequences", "empty"),
        ({"sequences": [[1, 2], []]}, "sequences[1]", "empty"),
        ({"sequences": ["a b", "   "]}, "sequences[1]", "empty"),
        ({"sequences": [[1, -1]]}, "sequences[0]", "-1 is outside"),
        ({"sequences": [[1, 2], [100]]}, "sequences[1]", "100 is outside"),
        ({"sequences": [[1, 2]], "mask": "nopeak"}, "mask", "unknown mask"),
        ({"sequences": [[1, 2]], "targets": [[1], [2]]}, "targets", "2 sequences"),
        ({"sequences": [[1, 2]], "targets": [[1]], "mask": "causal"}, "mask", "self-attention"),
        ({"sequences": [[1, 2], "a b"]}, "sequences[1]", "mixes words and token ids"),
        ({"sequences": [[1, 2]], "targets": ["a"]}, "targets[0]", "mixes words"),
        ({"sequences": ["a b c d"], "vocab_size": 4}, "vocab_size", "need vocab_size >= 5"),
        ({"sequences": [[1]], "pad_id": 100}, "pad_id", "outside"),
        ({"sequences": [[1]], "device": "tpu"}, "device", "unknown device"),
        ({"sequences": [[1]], "dtype": "int8"}, "dtype", "unknown dtype"),
    ],
)
def test_errors_name_the_field(kwargs: dict, field: str, text: str) -> None:
    sequences = kwargs.pop("sequences")
    with pytest.raises(ValueError, match=text) as info:
        compute_attention(sequences, **with_layer(kwargs))
    assert isinstance(info.value, AttentionInputError)
    assert info.value.field == field
    assert str(info.value).startswith(field)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_is_a_clear_error() -> None:
    with pytest.raises(AttentionInputError, match="'cuda' was requested but torch sees no CUDA"):
        compute_attention([[1, 2]], LayerConfig(device="cuda"))
    assert compute_attention([[1, 2]], LayerConfig(device="auto")).device == "cpu"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu() -> None:
    cpu = compute_attention(TUTORIAL_BATCH, LayerConfig(device="cpu"), mask="padding_causal")
    gpu = compute_attention(TUTORIAL_BATCH, LayerConfig(device="cuda"), mask="padding_causal")
    assert gpu.device == "cuda"
    torch.testing.assert_close(gpu.attn_weights, cpu.attn_weights, atol=1e-5, rtol=0)
