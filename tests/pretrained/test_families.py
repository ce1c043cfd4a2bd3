"""Every family through AttnViz, on tiny random models saved as local directories.

GPT-2, Llama with grouped-query attention, Mistral with a sliding window shorter than
the input, Qwen2, BERT, DistilBERT, RoBERTa, T5 and BART (:mod:`tests.pretrained.tiny`)
are loaded by ``load_model_dir`` and run on padded batches; every head of every layer
of every block equals transformers' own ``output_attentions`` of the same folder loaded
with ``attn_implementation="eager"``, to 1e-5.
"""

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from attnviz.attention import AttentionInputError
from attnviz.pretrained import (
    BLOCKS,
    ModelNotReady,
    ModelRegistry,
    PretrainedAttentions,
    PretrainedModel,
    TokenizedBatch,
)
from attnviz.pretrained.architectures import family_of
from attnviz.pretrained.loading import load_model, load_model_dir
from attnviz.pretrained.results import TOP_K

from tests.pretrained import tiny
from tests.pretrained.support import require_transformers

DECODERS = [name for name, family in tiny.FAMILIES.items() if family == "decoder"]


@pytest.fixture(autouse=True)
def _transformers() -> None:
    require_transformers()


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_transformers()
    root = tmp_path_factory.mktemp("tiny-models")
    return {name: tiny.save_tiny(name, root / name) for name in tiny.BUILDERS}


@pytest.fixture(scope="module")
def models(folders: dict[str, Path]) -> dict[str, PretrainedModel]:
    return {name: load_model_dir(name, folder) for name, folder in folders.items()}


def reference(folder: Path, family: str) -> Any:
    """transformers' own model of ``folder``, loaded apart from AttnViz, eager attention."""
    import transformers

    auto = {
        "encoder": transformers.AutoModel,
        "decoder": transformers.AutoModelForCausalLM,
        "encoder-decoder": transformers.AutoModelForSeq2SeqLM,
    }[family]
    model = auto.from_pretrained(folder, attn_implementation="eager", local_files_only=True)
    return model.eval()


def run_both(model: PretrainedModel, folder: Path) -> tuple[PretrainedAttentions, Any]:
    """AttnViz's run of the padded batch and the reference's output (output_attentions)."""
    batch = model.tokenize(tiny.TEXTS)
    targets = model.decoder_inputs(tiny.TARGETS) if model.family == "encoder-decoder" else None
    result = model.run(batch, targets, device="cpu")
    inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask.long()}
    if model.family == "encoder" and model.architecture == "bert":
        inputs["token_type_ids"] = batch.token_type_ids
    if targets is not None:
        inputs["decoder_input_ids"] = targets.input_ids
        inputs["decoder_attention_mask"] = targets.attention_mask.long()
    with torch.inference_mode():
        expected = reference(folder, model.family)(**inputs, output_attentions=True)
    return result, expected


def expected_attentions(expected: Any, block: str) -> tuple[torch.Tensor, ...]:
    if hasattr(expected, "encoder_attentions"):
        return {
            "encoder": expected.encoder_attentions,
            "decoder": expected.decoder_attentions,
            "cross": expected.cross_attentions,
        }[block]
    return expected.attentions  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", tiny.BUILDERS)
def test_family_of_picks_the_family_of_each_config(
    name: str, folders: dict[str, Path], models: dict[str, PretrainedModel]
) -> None:
    from transformers import AutoConfig

    family = tiny.FAMILIES[name]
    config = AutoConfig.from_pretrained(folders[name], local_files_only=True)
    assert family_of(config) == family
    # Without the saved architectures, the model type alone decides.
    config.architectures = None
    assert family_of(config) == family
    loaded = models[name]
    assert (loaded.family, loaded.architecture, loaded.blocks) == (family, name, BLOCKS[family])
    assert loaded.source == str(folders[name]) and loaded.path == folders[name]
    assert loaded.can_generate == (family != "encoder")


def test_family_of_reads_the_architecture_first() -> None:
    from transformers import BertConfig, GPT2Config, LlamaConfig, RobertaConfig, T5Config

    # Checkpoints as they are published: BERT and RoBERTa saved with their masked-LM
    # head are encoders, whatever causal-LM class transformers also has for them.
    assert family_of(BertConfig(architectures=["BertForMaskedLM"])) == "encoder"
    assert family_of(RobertaConfig(architectures=["RobertaForMaskedLM"])) == "encoder"
    assert family_of(GPT2Config(architectures=["GPT2LMHeadModel"])) == "decoder"
    assert family_of(LlamaConfig(architectures=["LlamaForCausalLM"])) == "decoder"
    assert family_of(T5Config(architectures=["T5ForConditionalGeneration"])) == "encoder-decoder"


@pytest.mark.parametrize("name", tiny.BUILDERS)
def test_every_head_of_every_block_equals_output_attentions(
    name: str, folders: dict[str, Path], models: dict[str, PretrainedModel]
) -> None:
    model = models[name]
    result, expected = run_both(model, folders[name])
    assert tuple(result.block_calls) == model.blocks
    lengths = {"encoder": result.batch.input_ids.shape[1]}
    lengths["decoder"] = result.queries("decoder").input_ids.shape[1]
    for block in model.blocks:
        weights = expected_attentions(expected, block)
        assert result.num_layers(block) == len(weights) == 2 + (name == "t5" and block != "encoder")
        len_q = lengths["decoder" if block == "cross" else block]
        len_k = lengths["encoder" if block == "cross" else block]
        for layer, reference_weights in enumerate(weights):
            recorded = result.layer_weights(block, layer)
            assert recorded.shape == (2, model.num_heads, len_q, len_k)
            assert reference_weights.shape == recorded.shape
            torch.testing.assert_close(recorded, reference_weights, atol=1e-5, rtol=0)
            # Real queries give padding keys exactly 0 and their rows sum to 1.
            keys = result.keys(block).attention_mask
            queries = result.queries(block).attention_mask
            for b in range(2):
                rows = recorded[b][:, queries[b]]
                assert torch.all(rows[..., ~keys[b]] == 0)
                torch.testing.assert_close(rows.sum(-1), torch.ones(rows.shape[:-1]))
    # Both inputs really differ in length: the batch is padded.
    assert result.batch.lengths[0] != result.batch.lengths[1]


@pytest.mark.parametrize("name", tiny.BUILDERS)
def test_query_rows_equal_the_rows_of_layer_weights(
    name: str, models: dict[str, PretrainedModel]
) -> None:
    model = models[name]
    batch = model.tokenize(tiny.TEXTS)
    targets = model.decoder_inputs(tiny.TARGETS) if model.family == "encoder-decoder" else None
    result = model.run(batch, targets, device="cpu")
    for block in model.blocks:
        layers = torch.stack(
            [result.layer_weights(block, layer) for layer in range(result.num_layers(block))]
        )  # (N, B, H, L_q, L_k)
        for query in range(layers.shape[3]):
            rows = result.query_rows(block, query)
            assert rows.shape == layers[:, :, :, query].shape
            torch.testing.assert_close(rows, layers[:, :, :, query], atol=1e-6, rtol=0)
        with pytest.raises(AttentionInputError) as caught:
            result.query_rows(block, layers.shape[3])
        assert caught.value.field == "query_index"


def test_grouped_query_heads_read_their_shared_key_value_head(
    models: dict[str, PretrainedModel],
) -> None:
    llama = models["llama"]
    assert (llama.num_heads, llama.num_key_value_heads) == (4, 2)
    result = llama.attention(tiny.TEXTS, device="cpu")
    call = result.recording.calls[1]
    assert call.query.shape[1] == 4 and call.key.shape[1] == 2
    # Brute force from the recorded states: head h reads key/value head h // 2.
    scores = call.query @ call.key.repeat_interleave(2, dim=1).transpose(-1, -2)
    scores = scores * call.query.shape[-1] ** -0.5 + call.attention_mask
    weights = result.layer_weights("decoder", 1)
    torch.testing.assert_close(weights, torch.softmax(scores, dim=-1), atol=1e-6, rtol=0)
    # Heads that share keys still differ (their queries do).
    assert not torch.allclose(weights[:, 0], weights[:, 1])


def test_a_sliding_window_drops_keys_older_than_the_window(
    models: dict[str, PretrainedModel],
) -> None:
    result = models["mistral"].attention(tiny.TEXTS[:1], device="cpu")
    length = result.batch.lengths[0]
    assert length > tiny.SLIDING_WINDOW
    rows, cols = torch.meshgrid(torch.arange(length), torch.arange(length), indexing="ij")
    outside = (cols > rows) | (rows - cols >= tiny.SLIDING_WINDOW)
    for layer in range(2):
        weights = result.layer_weights("decoder", layer)[0]  # (H, L, L)
        assert torch.all(weights[:, outside] == 0)
        assert torch.all(weights[:, ~outside] > 0)


def test_an_encoder_decoder_maps_target_queries_to_source_keys(
    models: dict[str, PretrainedModel],
) -> None:
    t5 = models["t5"]
    result = t5.attention(tiny.TEXTS, targets=tiny.TARGETS, device="cpu")
    assert result.targets is not None and result.next_tokens is not None
    source, target = result.batch, result.targets
    # Next tokens are the targets': one row of candidates per decoder position.
    assert result.next_tokens.ids.shape[:2] == target.input_ids.shape
    assert target.tokens[0][:4] == ["<pad>", "the", "bird", "sang"]  # decoder_start + target
    assert result.queries("cross") is target and result.keys("cross") is source
    assert result.queries("encoder") is source and result.keys("decoder") is target
    cross = result.layer_weights("cross", 2)
    assert cross.shape == (2, 4, target.input_ids.shape[1], source.input_ids.shape[1])
    decoder = result.layer_weights("decoder", 2)
    assert torch.all(decoder.triu(diagonal=1) == 0)  # causal over the target
    encoder = result.layer_weights("encoder", 1)
    later = torch.ones(encoder.shape[-2:], dtype=torch.bool).triu(diagonal=1)
    assert torch.all(encoder[0][:, later] > 0)  # bidirectional over the source


@pytest.mark.parametrize("name", DECODERS)
def test_next_tokens_are_the_top_of_the_reference_logits(
    name: str, folders: dict[str, Path], models: dict[str, PretrainedModel]
) -> None:
    result, expected = run_both(models[name], folders[name])
    assert result.next_tokens is not None
    probabilities = torch.softmax(expected.logits, dim=-1)
    top = probabilities.topk(TOP_K, dim=-1)
    real = result.batch.attention_mask
    assert torch.equal(result.next_tokens.ids[real], top.indices[real])
    torch.testing.assert_close(
        result.next_tokens.probabilities[real], top.values[real], atol=1e-5, rtol=0
    )


def fed_back(model: PretrainedModel, prompt: TokenizedBatch, new_ids: list[int]) -> TokenizedBatch:
    """The prompt and every generated token but the last, as one input."""
    ids = torch.tensor([prompt.input_ids[0].tolist() + new_ids[:-1]])
    return TokenizedBatch(
        tokens=[model.tokenizer.convert_ids_to_tokens(ids[0].tolist())],
        input_ids=ids,
        token_type_ids=torch.zeros_like(ids),
        attention_mask=torch.ones_like(ids, dtype=torch.bool),
        special_tokens_mask=torch.zeros_like(ids, dtype=torch.bool),
    )


@pytest.mark.parametrize(
    "name",
    [
        "gpt2",
        "llama",
        "qwen2",
        "mistral",  # a sliding window shorter than prompt + generated tokens
    ],
)
def test_generation_equals_transformers_generate_and_one_causal_pass(
    name: str, models: dict[str, PretrainedModel]
) -> None:
    model = models[name]
    prompt = model.tokenize(["a big dog"])
    generation = model.generate(prompt, max_new_tokens=8, device="cpu")
    with torch.inference_mode():
        expected = model.model.generate(
            prompt.input_ids,
            attention_mask=prompt.attention_mask.long(),
            max_new_tokens=8,
            do_sample=False,
        )
    length = prompt.input_ids.shape[1]
    assert generation.new_ids == expected[0, length:].tolist()
    assert len(generation.new_ids) >= 4  # several steps, not an immediate end of sequence
    assert generation.new_tokens == model.tokenizer.convert_ids_to_tokens(generation.new_ids)
    full = model.run(fed_back(model, prompt, generation.new_ids), device="cpu")
    for step in range(1, len(generation.new_ids)):
        for layer in range(model.num_layers):
            weights = full.layer_weights("decoder", layer)[0, :, length + step - 1]
            for head in range(model.num_heads):
                row = generation.step_row(step, layer, head)
                assert row.shape == (length + step,)
                torch.testing.assert_close(row, weights[head, : length + step], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["gpt2", "llama", "qwen2", "mistral"])
def test_the_pass_recorded_while_generating_equals_one_causal_pass_and_eager_attention(
    name: str, models: dict[str, PretrainedModel], folders: dict[str, Path]
) -> None:
    """record_pass joins the prompt's calls and each step's new query and key into one
    pass: every head equals a fresh recorded pass and transformers' eager
    output_attentions over prompt + new tokens, and so do the next-token states."""
    model = models[name]
    prompt = model.tokenize(["a big dog"])
    generation = model.generate(
        prompt, max_new_tokens=8, device="cpu", record_steps=False, record_pass=True
    )
    assert generation.recording.calls == []  # no step kept whole
    joined = generation.result
    assert joined is not None
    tokens = model.extended(prompt, generation.new_ids)  # every new token, the last too
    assert torch.equal(joined.batch.input_ids, tokens.input_ids)
    fresh = model.run(tokens, device="cpu")
    eager = reference(folders[name], "decoder")
    with torch.inference_mode():
        expected = eager(tokens.input_ids, output_attentions=True, use_cache=False)
    length = int(tokens.input_ids.shape[1])
    for layer in range(model.num_layers):
        weights = joined.layer_weights("decoder", layer)
        assert weights.shape == (1, model.num_heads, length, length)
        again = fresh.layer_weights("decoder", layer)
        torch.testing.assert_close(weights, again, atol=1e-5, rtol=0)
        torch.testing.assert_close(weights, expected.attentions[layer].float(), atol=1e-5, rtol=0)
    assert joined.next_tokens is not None and fresh.next_tokens is not None
    assert torch.equal(joined.next_tokens.ids[..., :3], fresh.next_tokens.ids[..., :3])
    torch.testing.assert_close(
        joined.next_tokens.probabilities, fresh.next_tokens.probabilities, atol=1e-5, rtol=0
    )


def test_the_pass_recorded_while_generating_holds_no_key_value_cache(
    models: dict[str, PretrainedModel],
) -> None:
    """Each step adds one query row and one key: every recorded tensor owns exactly its own
    numbers (a view into a step's key/value cache would keep that whole cache alive)."""
    llama = models["llama"]
    prompt = llama.tokenize(["a big dog ran"])
    generation = llama.generate(
        prompt, max_new_tokens=8, device="cpu", record_steps=False, record_pass=True
    )
    assert generation.result is not None
    length = int(generation.result.batch.input_ids.shape[1])
    for call in generation.result.recording.calls:
        for tensor in (call.query, call.key, call.value):
            assert tensor.shape[2] == length
            assert tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
    # One (L, L) mask for every layer, as in a fresh pass: not one per layer.
    fresh = llama.run(generation.result.batch, device="cpu")

    def masks(result: PretrainedAttentions) -> int:
        calls = result.recording.calls
        return len({c.attention_mask.untyped_storage().data_ptr() for c in calls})  # type: ignore[union-attr]

    assert masks(generation.result) == masks(fresh) == 1


@pytest.mark.parametrize("name", sorted(tiny.BUILDERS))
def test_attention_in_query_chunks_gives_the_same_outputs(
    name: str, models: dict[str, PretrainedModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long input's SDPA runs in chunks of query rows (cancellable between them): the
    outputs equal one call's, sliding windows, position biases and padding included."""
    from attnviz.pretrained import computing

    model = models[name]
    batch = model.tokenize(tiny.TEXTS)
    targets = model.decoder_inputs(tiny.TARGETS) if model.family == "encoder-decoder" else None

    def outputs() -> torch.Tensor:
        result = model.run(batch, targets, device="cpu")
        if result.final_hidden is not None:
            return result.final_hidden
        assert result.decoder_head is not None
        return result.decoder_head.hidden.float()

    whole = outputs()
    monkeypatch.setattr(computing, "QUERY_CHUNK", 3)
    chunked = outputs()
    torch.testing.assert_close(chunked, whole, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["gpt2", "llama", "qwen2", "mistral"])
def test_a_plainly_causal_mask_runs_as_sdpa_s_causal_flag_with_the_same_outputs(
    name: str, models: dict[str, PretrainedModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One unpadded input within any sliding window: SDPA gets no mask but its causal flag
    (its kernel skips the masked half); the outputs equal the explicit mask's. Mistral's
    window (4 tokens) is shorter than this input: its mask is not plainly causal."""
    from attnviz.pretrained import computing
    from transformers.integrations import sdpa_attention

    model = models[name]
    batch = model.tokenize(["the cat sat on the mat because it was tired"])
    masks: list[bool] = []
    original = sdpa_attention.sdpa_attention_forward

    def spy(module: Any, query: Any, key: Any, value: Any, mask: Any, **kwargs: Any) -> Any:
        masks.append(mask is None)
        return original(module, query, key, value, mask, **kwargs)

    monkeypatch.setattr(sdpa_attention, "sdpa_attention_forward", spy)
    result = model.run(batch, device="cpu")
    assert result.decoder_head is not None
    assert masks == [name != "mistral"] * model.num_layers
    monkeypatch.setattr(computing, "_plainly_causal", lambda *args: False)
    explicit = model.run(batch, device="cpu")
    assert explicit.decoder_head is not None
    torch.testing.assert_close(
        result.decoder_head.hidden, explicit.decoder_head.hidden, atol=1e-5, rtol=1e-5
    )


def test_a_generation_whose_passes_differ_is_not_joined(
    models: dict[str, PretrainedModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps that do not make the prompt's calls (a hybrid model, say) leave the
    recording incomplete: no joined pass is given, and the server runs one instead."""
    from attnviz.pretrained import calls

    add = calls.StepwiseRecording.add

    def every_other_layer(self: Any, call: Any) -> None:
        if self._steps is None or len(self._current) == 0:  # a step loses its second call
            add(self, call)

    monkeypatch.setattr(calls.StepwiseRecording, "add", every_other_layer)
    llama = models["llama"]
    prompt = llama.tokenize(["a big dog ran"])
    generation = llama.generate(
        prompt, max_new_tokens=4, device="cpu", record_steps=False, record_pass=True
    )
    assert generation.new_ids and generation.result is None


def test_sampling_draws_the_same_tokens_whether_or_not_the_pass_is_joined(
    models: dict[str, PretrainedModel],
) -> None:
    """The joined path samples from the model's own logits, as the plain path does."""
    gpt2 = models["gpt2"]
    prompt = gpt2.tokenize(["a big dog"])
    drawn = [
        gpt2.generate(
            prompt, 6, temperature=5.0, seed=4, device="cpu", record_steps=False, record_pass=joined
        ).new_ids
        for joined in (False, True)
    ]
    assert drawn[0] == drawn[1]


def test_generation_stops_at_the_end_of_sequence_token(models: dict[str, PretrainedModel]) -> None:
    llama = models["llama"]
    eos = llama.tokenizer.eos_token_id
    # This prompt's first greedy token is the end of sequence: generation stops there.
    prompt = llama.tokenize(["the cat sat"])
    generation = llama.generate(prompt, max_new_tokens=8, device="cpu")
    with torch.inference_mode():
        logits = llama.model(prompt.input_ids).logits[0, -1]
    assert int(logits.argmax()) == eos
    assert generation.new_ids == [eos]
    assert len(generation.recording.calls) == llama.num_layers  # the prompt pass only
    with pytest.raises(IndexError, match="step 1"):
        generation.step_row(1, 0, 0)


def test_sampling_is_reproducible_by_seed(models: dict[str, PretrainedModel]) -> None:
    gpt2 = models["gpt2"]
    prompt = gpt2.tokenize(["a big dog"])
    runs = [
        gpt2.generate(prompt, 6, temperature=5.0, seed=seed, device="cpu").new_ids
        for seed in (1, 1, 2)
    ]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]  # at temperature 5, the 28-token vocabulary is nearly uniform


@pytest.mark.parametrize(
    "name",
    [
        *[n for n, family in tiny.FAMILIES.items() if family != "encoder-decoder"],
        "t5",  # its decoder has 3 layers to the encoder's 2
        "bart",
    ],
)
def test_weight_cells_counts_every_map_of_every_block(
    name: str, models: dict[str, PretrainedModel]
) -> None:
    model = models[name]
    batch = model.tokenize(tiny.TEXTS)
    targets = model.decoder_inputs(tiny.TARGETS) if model.family == "encoder-decoder" else None
    result = model.run(batch, targets, device="cpu")
    cells = sum(
        result.layer_weights(block, layer).numel()
        for block in model.blocks
        for layer in range(result.num_layers(block))
    )
    assert model.weight_cells(batch, targets) == cells


@pytest.mark.parametrize(
    "name",
    [
        name
        for name in tiny.BUILDERS
        if name != "t5"  # relative positions: no limit
    ],
)
def test_the_longest_input_tokenize_accepts_runs(
    name: str, models: dict[str, PretrainedModel]
) -> None:
    model = models[name]
    assert model.max_tokens is not None
    seq2seq = model.family == "encoder-decoder"
    field = "targets[0]" if seq2seq else "texts[0]"

    def prepared(words: int) -> TokenizedBatch:
        text = " ".join(["cat"] * words)
        return model.decoder_inputs([text]) if seq2seq else model.tokenize([text])

    words = 1
    while True:  # the first input refused by name is one word longer than the longest run
        try:
            prepared(words + 1)
        except AttentionInputError as error:
            assert error.field == field
            break
        words += 1
    assert words >= model.max_tokens // 2  # "cat" is a token or two
    longest = prepared(words)
    source = model.tokenize(["the cat"]) if seq2seq else longest
    result = model.run(source, longest if seq2seq else None, device="cpu")
    assert result.queries(model.blocks[-1]).input_ids.shape[1] == longest.input_ids.shape[1]


def field_of(call: Any) -> str:
    with pytest.raises(AttentionInputError) as caught:
        call()
    return caught.value.field


def test_refusals_name_the_field(models: dict[str, PretrainedModel]) -> None:
    gpt2, bert, t5 = models["gpt2"], models["bert"], models["t5"]
    assert not gpt2.chat_template
    assert field_of(lambda: gpt2.tokenize(["the cat"], chat=True)) == "chat"
    assert field_of(lambda: gpt2.tokenize(["the cat"], ["a dog"])) == "text_pairs"
    prompt = bert.tokenize(["the cat"])
    assert field_of(lambda: bert.generate(prompt, 3)) == "max_new_tokens"
    assert field_of(lambda: t5.generate(t5.tokenize(["the cat"]), 3)) == "max_new_tokens"
    assert field_of(lambda: t5.run(t5.tokenize(["the cat"]), device="cpu")) == "targets"
    assert field_of(lambda: t5.attention(["the cat"], device="cpu")) == "targets"
    decoder_input = bert.tokenize(["a dog"])
    assert field_of(lambda: bert.run(prompt, decoder_input, device="cpu")) == "targets"
    assert field_of(lambda: t5.decoder_inputs(["fine", " "])) == "targets[1]"
    two = gpt2.tokenize(["the cat", "a dog"])
    assert field_of(lambda: gpt2.generate(two, 3)) == "max_new_tokens"
    one = gpt2.tokenize(["the cat"])
    assert field_of(lambda: gpt2.generate(one, 0)) == "max_new_tokens"
    assert field_of(lambda: gpt2.generate(one, 3, temperature=-1.0)) == "temperature"
    assert field_of(lambda: gpt2.tokenize([" ".join(["cat"] * 65)])) == "texts[0]"  # 64 positions
    assert field_of(lambda: gpt2.run(one, device="tpu")) == "device"
    assert field_of(lambda: gpt2.generate(one, 3, device="tpu")) == "device"
    result = bert.attention(["the cat"], device="cpu")
    assert field_of(lambda: result.layer_weights("encoder", 2)) == "layer_index"
    assert field_of(lambda: result.layer_weights("cross", 0)) == "block"


def test_loading_refuses_what_is_not_a_model(tmp_path: Path, folders: dict[str, Path]) -> None:
    from attnviz.pretrained import ModelFormatError

    with pytest.raises(ModelFormatError, match=r"no config\.json"):
        load_model_dir("empty", tmp_path)
    with pytest.raises(ModelFormatError, match="no such directory or GGUF file"):
        load_model("missing", tmp_path / "missing", tmp_path / "cache")
    unknown = broken_copy(folders["bert"], tmp_path / "unknown", model_type="no-such-model")
    with pytest.raises(ModelFormatError, match=r"unknown: transformers cannot load it"):
        load_model_dir("unknown", unknown)
    weightless = broken_copy(folders["bert"], tmp_path / "weightless", weights=False)
    with pytest.raises(ModelFormatError, match=r"weightless: transformers cannot load it"):
        load_model_dir("weightless", weightless)
    corrupt = broken_copy(folders["bert"], tmp_path / "corrupt")
    (corrupt / "model.safetensors").write_bytes(b"\xff" * 64)  # no safetensors header
    with pytest.raises(ModelFormatError, match=r"corrupt: corrupt: SafetensorError"):
        load_model_dir("corrupt", corrupt)
    # load_model loads a folder once per process.
    assert load_model("bert", folders["bert"], tmp_path) is load_model(
        "bert", folders["bert"], tmp_path
    )


def test_a_big_folder_that_is_not_a_model_is_refused_without_walking_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder with no config.json at its top (a home folder, /) is refused at once, named,
    before any walk of its tree (issue 53: --model / walked the whole disk for 90 s)."""
    from attnviz.pretrained import ModelFormatError

    for n in range(50):
        (tmp_path / f"d{n}" / "deeper").mkdir(parents=True)
    walked: list[Path] = []
    rglob = Path.rglob

    def counted(self: Path, pattern: str, **kwargs: object) -> object:
        walked.append(self)
        return rglob(self, pattern, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "rglob", counted)
    with pytest.raises(ModelFormatError, match=r"no config\.json in it") as raised:
        load_model_dir("big", tmp_path)
    assert str(tmp_path) in str(raised.value) and walked == []


def test_a_cache_written_by_one_user_is_readable_by_another(
    tmp_path: Path, folders: dict[str, Path]
) -> None:
    """safetensors writes 0600; the caches AttnViz writes get the umask's modes (0644)."""
    import os
    import stat

    from attnviz.pretrained.loading import share_modes

    saved = broken_copy(folders["bert"], tmp_path / "saved")
    weights = saved / "model.safetensors"
    weights.chmod(0o600)
    previous = os.umask(0o022)
    try:
        share_modes(saved)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(weights.stat().st_mode) == 0o644
    assert stat.S_IMODE(saved.stat().st_mode) == 0o755


@pytest.mark.skipif(
    shutil.which("setpriv") is None or os.geteuid() != 0, reason="needs root and setpriv"
)
def test_an_unreadable_weights_file_is_named_permission_denied(
    tmp_path: Path, folders: dict[str, Path]
) -> None:
    """The container's failure: a root-owned 0600 file, loaded by a user who may not read it.

    Root reads anything, so the loader runs in a child process as root without the
    capabilities that bypass file modes (setpriv drops them), the file owned by uid 10001.
    """
    import subprocess
    import sys

    readable = tmp_path / "shared"
    readable.mkdir(mode=0o755)
    tmp_path.chmod(0o755)
    folder = broken_copy(folders["bert"], readable / "bert")
    weights = folder / "model.safetensors"
    os.chown(weights, 10001, 10001)
    weights.chmod(0o600)
    code = (
        "import sys; from attnviz.pretrained.loading import load_model_dir\n"
        "try:\n    load_model_dir('bert', __import__('pathlib').Path(sys.argv[1]))\n"
        "except Exception as error:\n    print(type(error).__name__, error)\n"
    )
    child = subprocess.run(
        ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--",
         sys.executable, "-c", code, str(folder)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert child.returncode == 0, child.stderr
    line = child.stdout.strip().splitlines()[-1]
    assert line.startswith("ModelFormatError"), line
    assert f"{weights}: permission denied" in line
    assert "owner uid 10001" in line and "(600)" in line and "uid 0" in line
    assert "No such file" not in line


def broken_copy(
    folder: Path, target: Path, *, model_type: str | None = None, weights: bool = True
) -> Path:
    """A copy of ``folder`` with another model_type, or without its weights."""
    shutil.copytree(folder, target)
    if model_type is not None:
        config = json.loads((target / "config.json").read_text())
        config["model_type"] = model_type
        (target / "config.json").write_text(json.dumps(config))
    if not weights:
        (target / "model.safetensors").unlink()
    return target


def test_the_registry_reports_each_model_s_state(tmp_path: Path, folders: dict[str, Path]) -> None:
    good = shutil.copytree(folders["llama"], tmp_path / "good")
    unknown = broken_copy(folders["bert"], tmp_path / "unknown", model_type="no-such-model")
    weightless = broken_copy(folders["t5"], tmp_path / "weightless", weights=False)
    registry = ModelRegistry()
    registry.configure([good, unknown, weightless], packaged=False, cache_dir=tmp_path / "cache")
    assert registry.names() == ["good", "unknown", "weightless"]
    assert [entry.state for entry in registry.entries()] == ["loading"] * 3
    assert not registry.wait(0)
    with pytest.raises(ModelNotReady, match="'good' is still loading"):
        registry.get("good")
    with pytest.raises(ModelNotReady):
        registry.get(None)

    registry.load()
    assert registry.wait(0)
    states = {entry.name: entry for entry in registry.entries()}
    assert states["good"].state == "ready" and states["good"].error is None
    assert registry.get("good").family == "decoder"
    assert registry.get(None) is registry.get("good")
    for name, folder in (("unknown", unknown), ("weightless", weightless)):
        entry = states[name]
        assert entry.state == "failed" and entry.model is None
        assert entry.error is not None and str(folder.resolve()) in entry.error
        with pytest.raises(AttentionInputError) as caught:
            registry.get(name)
        assert caught.value.field == "model"
        assert f"model {name!r} failed to load" in caught.value.message
        assert entry.error in caught.value.message
    assert "no-such-model" in (states["unknown"].error or "")
    assert registry.models() == [registry.get("good")]


def test_the_registry_loads_in_a_background_thread(
    tmp_path: Path, folders: dict[str, Path]
) -> None:
    registry = ModelRegistry()
    registry.configure([folders["bart"]], packaged=False, cache_dir=tmp_path)
    thread = registry.start()
    assert registry.wait(60)
    thread.join(5)
    assert not thread.is_alive()
    assert registry.get("bart").family == "encoder-decoder"


def test_a_model_whose_tokenizer_overruns_its_embedding_fails_alone(tmp_path: Path) -> None:
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    # [CLS] and [SEP] are ids 20 and 21 of the tokenizer; the embedding has 10 rows.
    vocab = {"[PAD]": 0, "[UNK]": 1, **{f"w{i}": i for i in range(2, 20)}, "[CLS]": 20, "[SEP]": 21}
    words = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    words.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 20), ("[SEP]", 21)]
    )
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=words, unk_token="[UNK]", pad_token="[PAD]"
    )
    config = transformers.BertConfig(
        vocab_size=10,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
    )
    bad = tmp_path / "overrun"
    transformers.BertModel(config).save_pretrained(bad)
    tokenizer.save_pretrained(bad)
    good = tiny.save_tiny("gpt2", tmp_path / "good")
    registry = ModelRegistry()
    registry.configure([bad, good], packaged=False, cache_dir=tmp_path / "cache")
    try:
        registry.load()
    finally:
        states = [entry.state for entry in registry.entries()]
    assert states == ["failed", "ready"]
    assert registry.wait(0)


@pytest.mark.parametrize("name", ["llama", "t5"])
@pytest.mark.parametrize("chunk", [1, 2**30])  # one group per eager call, or every head in one
def test_head_groups_in_any_chunks_are_the_layer(
    name: str, chunk: int, models: dict[str, PretrainedModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnviz.pretrained import results

    monkeypatch.setattr(results, "HEAD_CHUNK_FLOATS", chunk)
    model = models[name]
    batch = model.tokenize(tiny.TEXTS)
    targets = model.decoder_inputs(tiny.TARGETS) if model.family == "encoder-decoder" else None
    result = model.run(batch, targets, device="cpu")
    for block in model.blocks:
        for layer in range(result.num_layers(block)):
            pieces = list(result.head_groups(block, layer))
            heads = result.num_heads(block, layer)
            per_call = pieces[0][1].shape[1]
            assert [first for first, _ in pieces] == list(range(0, heads, per_call))
            groups = result.recording.calls[0].num_key_value_heads
            assert len(pieces) == (1 if chunk > 1 else groups)
            torch.testing.assert_close(
                torch.cat([w for _, w in pieces], dim=1),
                result.layer_weights(block, layer),
                atol=1e-6,
                rtol=0,
            )


def test_a_cache_folder_is_published_whole_and_once_whoever_else_writes_it(
    tmp_path: Path,
) -> None:
    """Two writers of one cache folder at once (replicas on one volume, test workers): the
    second waits for the first and converts nothing, the folder is the first's; a writer
    that fails leaves nothing behind."""
    import threading

    from attnviz.pretrained.loading import published

    folder = tmp_path / "model-123-456"
    inside, calling, release = threading.Event(), threading.Event(), threading.Event()
    written: list[str] = []
    outcomes: list[BaseException | None] = []

    def writer(text: str) -> None:
        def fill(partial: Path) -> None:
            written.append(text)
            (partial / "weights.bin").write_text(text * 1000)
            (partial / "config.json").write_text(text)
            inside.set()
            assert release.wait(timeout=30)

        try:
            if text == "second":
                calling.set()
            published(folder, fill)
            outcomes.append(None)
        except BaseException as error:  # handed to the test's thread
            outcomes.append(error)

    first = threading.Thread(target=writer, args=("first",))
    first.start()
    assert inside.wait(timeout=30)  # the first is converting
    second = threading.Thread(target=writer, args=("second",))
    second.start()
    assert calling.wait(timeout=30)  # the second has come to publish it too
    release.set()
    for thread in (first, second):
        thread.join(timeout=30)
    assert outcomes == [None, None]
    assert written == ["first"]  # converted once
    assert (folder / "config.json").read_text() == "first"
    assert (folder / "weights.bin").read_text() == "first" * 1000
    files = [p.name for p in tmp_path.iterdir()]
    assert sorted(files) == [f".{folder.name}.lock", folder.name]  # no partial folder left
    umask = os.umask(0)
    os.umask(umask)
    assert folder.stat().st_mode & 0o777 == 0o777 & ~umask  # not mkdtemp's 0700

    def failing(partial: Path) -> None:
        (partial / "config.json").write_text("half")
        raise OSError("no space left on device")

    with pytest.raises(OSError, match="no space"):
        published(tmp_path / "other-1-2", failing)
    assert not (tmp_path / "other-1-2").exists()
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]
