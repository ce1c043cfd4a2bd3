"""The BERT encoder built from AttnViz's layers against transformers' BertModel."""

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from attnviz.attention import AttentionInputError
from attnviz.pretrained import BertConfig, ModelFormatError, attention_rollout
from attnviz.pretrained.bert import load_bert, weight_names

TEXTS = [
    "The cat sat on the mat because it was tired.",
    "Attention is all you need.",
    "Unbelievably, tokenizers split rare words into ##pieces.",
]
PAIRS = ["Was it sleepy?", None, "Yes: WordPiece does that."]


def reference_outputs(reference_bert, batch):  # type: ignore[no-untyped-def]
    with torch.no_grad():
        return reference_bert(
            input_ids=batch.input_ids,
            token_type_ids=batch.token_type_ids,
            attention_mask=batch.attention_mask.long(),
            output_attentions=True,
        )


def test_every_weight_equals_transformers(minilm, reference_bert) -> None:  # type: ignore[no-untyped-def]
    theirs = reference_bert.state_dict()
    ours = dict(minilm.encoder.named_parameters())
    names = weight_names(minilm.config.num_hidden_layers)
    assert set(names.values()) == set(ours)  # every parameter of ours is loaded
    for hf_name, own_name in names.items():
        assert torch.equal(ours[own_name], theirs[hf_name]), hf_name


def test_attentions_match_transformers_output_attentions(minilm, reference_bert) -> None:  # type: ignore[no-untyped-def]
    result = minilm.attention(TEXTS, PAIRS, device="cpu")
    reference = reference_outputs(reference_bert, result.batch)
    expected = torch.stack(reference.attentions)  # (N, B, H, L, L)
    length = result.batch.input_ids.shape[1]
    assert result.attentions.shape == (6, 3, 12, length, length)
    assert expected.shape == result.attentions.shape
    assert (result.attentions - expected).abs().max().item() <= 1e-5
    assert (result.last_hidden_state - reference.last_hidden_state).abs().max().item() <= 1e-5


def test_random_padded_batches_match_transformers(minilm, reference_bert) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(0)
    words = TEXTS[0].split() + TEXTS[2].split() + ["1917", "café", "naïve", "heads"]
    worst = 0.0
    for _ in range(8):
        size = rng.randint(1, 4)
        texts = [" ".join(rng.choices(words, k=rng.randint(1, 60))) for _ in range(size)]
        pairs = [
            " ".join(rng.choices(words, k=rng.randint(1, 20))) if rng.random() < 0.5 else None
            for _ in range(size)
        ]
        result = minilm.attention(texts, pairs, device="cpu")
        expected = torch.stack(reference_outputs(reference_bert, result.batch).attentions)
        worst = max(worst, (result.attentions - expected).abs().max().item())
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
        assert batch.attention_mask[i].sum().item() == length
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
    weights = result.attentions.permute(1, 0, 2, 3, 4)  # (B, N, H, L, L)
    assert torch.all(weights[0][..., ~mask[0]] == 0)
    assert torch.allclose(result.attentions.sum(-1), torch.ones(()), atol=1e-5)
    # Padding changes nothing for the real tokens: "short" alone gives the same maps.
    alone = minilm.attention(["short"], device="cpu")
    length = int(mask[0].sum())
    padded = result.attentions[:, 0, :, :length, :length]
    assert (padded - alone.attentions[:, 0]).abs().max().item() <= 1e-5


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
    for b in range(len(TEXTS)):
        expected = rollout_reference(result.attentions[:, b].double().numpy())
        np.testing.assert_allclose(result.rollout[b].numpy(), expected, atol=1e-6)
    assert torch.allclose(result.rollout.sum(-1), torch.ones(()), atol=1e-5)
    mask = result.batch.attention_mask
    assert torch.all(result.rollout[0][mask[0]][:, ~mask[0]] == 0)
    assert torch.allclose(result.head_mean, result.attentions.mean(2))
    assert torch.allclose(result.layer_mean, result.attentions.mean(dim=(0, 2)), atol=1e-7)


def test_rollout_of_identity_attention_is_identity() -> None:
    eye = torch.eye(5).expand(3, 2, 4, 5, 5)
    assert torch.equal(attention_rollout(eye), torch.eye(5).expand(2, 5, 5))


def test_float64_copy_agrees_to_rounding(minilm, reference_bert) -> None:  # type: ignore[no-untyped-def]
    # In float64, both implementations agree to ~1e-15: the float32 agreement is
    # not luck of rounding but the same computation.
    batch = minilm.tokenize(TEXTS, PAIRS)
    ours = type(minilm.encoder)(minilm.config).double().eval()
    ours.load_state_dict(minilm.encoder.state_dict())
    theirs = type(reference_bert)(reference_bert.config).double().eval()
    theirs.load_state_dict(reference_bert.state_dict())
    with torch.no_grad():
        _, attentions = ours(batch.input_ids, batch.token_type_ids, batch.attention_mask)
    expected = torch.stack(reference_outputs(theirs, batch).attentions)
    assert (attentions - expected).abs().max().item() <= 1e-12


@pytest.mark.parametrize(
    ("texts", "pairs", "field"),
    [
        ([""], None, "texts[0]"),
        (["fine", "   "], None, "texts[1]"),
        (["fine"], ["  "], "text_pairs[0]"),
        (["one", "two"], ["only one"], "text_pairs"),
        (["word " * 600], None, "texts[0]"),
    ],
)
def test_bad_texts_name_the_field(minilm, texts, pairs, field: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(AttentionInputError) as caught:
        minilm.tokenize(texts, pairs)
    assert caught.value.field == field


def copy_model(minilm, target: Path, config_changes: dict[str, object] | None = None) -> Path:  # type: ignore[no-untyped-def]
    target.mkdir(parents=True)
    for name in ("model.safetensors", "tokenizer.json"):
        (target / name).symlink_to(minilm.path / name)
    config = json.loads((minilm.path / "config.json").read_text())
    config.update(config_changes or {})
    (target / "config.json").write_text(json.dumps(config))
    return target


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model_type": "gpt2"}, "model_type 'gpt2'"),
        ({"hidden_act": "swish"}, "hidden_act 'swish'"),
        ({"position_embedding_type": "relative_key"}, "relative_key"),
        ({"num_attention_heads": 5}, "not divisible"),
    ],
)
def test_configs_it_cannot_run_are_refused(minilm, tmp_path, changes, message) -> None:  # type: ignore[no-untyped-def]
    directory = copy_model(minilm, tmp_path / "model", changes)
    with pytest.raises(ModelFormatError, match=message):
        BertConfig.from_file(directory / "config.json")


def test_missing_or_misshapen_weights_are_refused(minilm) -> None:  # type: ignore[no-untyped-def]
    from safetensors.torch import load_file

    tensors = load_file(minilm.path / "model.safetensors")
    without = {k: v for k, v in tensors.items() if "layer.3.attention.self.key.bias" not in k}
    with pytest.raises(ModelFormatError, match=r"layer\.3\.attention\.self\.key\.bias' is missing"):
        load_bert(minilm.config, without, "test")
    misshapen = {**tensors, "embeddings.LayerNorm.bias": torch.zeros(7)}
    with pytest.raises(ModelFormatError, match="shape"):
        load_bert(minilm.config, misshapen, "test")
    # A "bert." prefix (BertForMaskedLM checkpoints) and extra heads are accepted.
    prefixed = {f"bert.{k}": v for k, v in tensors.items()} | {"cls.bias": torch.zeros(3)}
    loaded = load_bert(minilm.config, prefixed, "test")
    assert torch.equal(loaded.layers[5].ff.fc2.weight, minilm.encoder.layers[5].ff.fc2.weight)


def test_registry_loads_model_dirs_and_names_them(minilm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from attnviz.pretrained import ModelRegistry

    directory = copy_model(minilm, tmp_path / "my-bert")
    registry = ModelRegistry()
    registry.configure([directory])
    assert registry.names() == ["all-MiniLM-L6-v2", "my-bert"]
    assert registry.get(None).name == "all-MiniLM-L6-v2"
    mine = registry.get("my-bert")
    assert mine.source == str(directory.resolve())
    same = mine.attention(["Hello there."], device="cpu").attentions
    assert torch.equal(same, minilm.attention(["Hello there."], device="cpu").attentions)
    with pytest.raises(AttentionInputError) as caught:
        registry.get("bert-large")
    assert caught.value.field == "model" and "my-bert" in caught.value.message

    registry.configure([directory], packaged=False)
    assert registry.names() == ["my-bert"]
    with pytest.raises(ModelFormatError, match="two models are named 'my-bert'"):
        registry.configure([directory, directory])
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    with pytest.raises(ModelFormatError, match=r"ATTNVIZ_MODEL_DIRS: .*model\.safetensors"):
        registry.configure([broken])
    registry.clear()
    with pytest.raises(AttentionInputError, match="pretrained"):
        registry.get(None)


def test_nothing_touches_the_network(minilm, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import socket

    attempts: list[object] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(args)
        raise OSError("network access in a test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    from attnviz.pretrained import ModelRegistry

    # A fresh directory, so the model is really loaded here, not taken from the cache.
    directory = tmp_path / "fresh"
    shutil.copytree(minilm.path, directory)
    registry = ModelRegistry()
    registry.configure([directory], packaged=False)
    result = registry.get("fresh").attention(["Offline, as promised."], device="cpu")
    assert result.attentions.shape[0] == 6
    assert attempts == []


def test_select_equals_tokenising_that_input_alone(minilm) -> None:  # type: ignore[no-untyped-def]
    batch = minilm.tokenize(TEXTS, PAIRS)
    for i, (text, pair) in enumerate(zip(TEXTS, PAIRS, strict=True)):
        one, alone = batch.select(i), minilm.tokenize([text], [pair])
        assert one.tokens == alone.tokens
        for name in ("input_ids", "token_type_ids", "attention_mask", "special_tokens_mask"):
            assert torch.equal(getattr(one, name), getattr(alone, name)), name
