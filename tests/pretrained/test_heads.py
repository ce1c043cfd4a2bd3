"""The head atlas's scores equal a brute force over transformers' eager output_attentions.

Tiny random models built from configs (nothing downloaded), their query and key
projections scaled up so that the heads attend sharply and differ from one another: a
Llama-style decoder with grouped-query attention (with and without a BOS its tokenizer
adds), Mistral (a sliding window shorter than R), a BERT-style encoder, and T5 (an
encoder-decoder, scored on its encoder). The reference runs the same checkpoint with
``attn_implementation="eager"`` and ``output_attentions=True``, tokenises each text
itself, and computes every score query by query in float64 from the whole attention
tensors, following the definitions of :mod:`attnviz.pretrained.atlas`: natural-text
queries at positions i >= 1 that are not special tokens, keys every position;
repeated-token queries on the second copy. A GPT-2 whose weights are set so that one
head attends to the previous position scores ~1 there.
"""

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from attnviz.attention import AttentionInputError
from attnviz.attention.cancellation import Cancellation, ComputeCancelledError
from attnviz.pretrained import PretrainedModel, atlas
from attnviz.pretrained import computing as computing_module
from attnviz.pretrained.atlas import (
    DEFINITION_VERSION,
    DEFINITIONS,
    SCORES,
    HeadScores,
    HeadScoresUnavailableError,
    head_scores,
    paragraphs,
    repeated_tokens,
    scored_block,
    shipped_corpus,
)
from attnviz.pretrained.atlas import observer as heads_module
from attnviz.pretrained.loading import load_model, load_model_dir, wrap_model
from attnviz.pretrained.placement import Placement, layer_modules

from tests.pretrained import tiny
from tests.pretrained.support import eager_model, require_modules, require_transformers

TEXTS = [
    "the cat sat on the mat because it was tired",
    "a dog ran to the park and the bird sang loud today",
    "the zebra sat on a red mat",  # "zebra" is the unknown token: special, not a query
    "big small red house tree bird sang loud today the cat sat on the mat and a dog ran",
    "tired",  # one token: no query (position 0, or the only word after [CLS])
]
"""Texts of the tiny vocabulary; the fourth is cut at MAX_TOKENS."""
MAX_TOKENS = 12
REPEAT = 7
SEQUENCES = 10  # two passes of INDUCTION_BATCH (8) and 2
SEED = 3
BOS_STYLE = tiny.Style(
    ("<unk>", "<s>", "</s>"),
    {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"},
    single="<s> $A",
)
"""A decoder tokenizer that puts BOS before every text (as Llama's does)."""
MODELS = {  # name: (builder's model_type, tokenizer style)
    "llama": ("llama", tiny.DECODER_STYLE),
    "llama-bos": ("llama", BOS_STYLE),
    "mistral": ("mistral", tiny.DECODER_STYLE),  # a sliding window of 4 < R: keys leave it
    "bert": ("bert", tiny.BERT_STYLE),
    "t5": ("t5", tiny.T5_STYLE),
    "gpt_neo": ("gpt_neo", tiny.DECODER_STYLE),  # drawn from its own output_attentions
}
PROJECTIONS = {"q_proj", "k_proj", "query", "key", "q", "k"}
"""The query and key projections of Llama, BERT and T5, scaled up by :func:`save_sharp`."""


def save_sharp(model_type: str, style: tiny.Style, folder: Path, *, scale: float = 30.0) -> Path:
    """A tiny random model (:mod:`tests.pretrained.tiny`) whose queries and keys are scaled.

    Random initial weights make every head nearly uniform; scaled query and key
    projections make the heads peaked and different, so that the scores tell them apart.
    """
    build = {**tiny.BUILDERS, **tiny.OWN_ATTENTION}[model_type][0]
    tokenizer = tiny.word_tokenizer(style)
    torch.manual_seed(0)
    model = build(style, len(tokenizer))
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in PROJECTIONS:
                module.weight.mul_(scale)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_transformers()
    root = tmp_path_factory.mktemp("tiny-heads")
    return {name: save_sharp(kind, style, root / name) for name, (kind, style) in MODELS.items()}


@pytest.fixture(scope="module")
def models(folders: dict[str, Path]) -> dict[str, PretrainedModel]:
    return {name: load_model_dir(name, folder) for name, folder in folders.items()}


def eager_reference(folder: Path, family: str, dtype: torch.dtype = torch.float32) -> Any:
    """transformers' own model of ``folder`` on eager attention (an encoder-decoder's encoder)."""
    model = eager_model(folder, family, dtype)
    return model.get_encoder() if family == "encoder-decoder" else model


def attentions(reference: Any, ids: torch.Tensor) -> torch.Tensor:
    """(N, B, H, L, L) float64: ``output_attentions`` of (B, L) ids, no padding."""
    with torch.inference_mode():
        out = reference(input_ids=ids, output_attentions=True)
    return torch.stack([a.double() for a in out.attentions])


def brute_natural(reference: Any, tokenizer: Any, texts: list[str], max_tokens: int) -> Any:
    """The natural-text scores, query by query; the counted queries, tokens and texts cut."""
    special = set(tokenizer.all_special_ids)
    totals: dict[str, torch.Tensor] = {}
    count = tokens = cut = 0
    for text in texts:
        ids = tokenizer(text, truncation=True, max_length=max_tokens)["input_ids"]
        tokens += len(ids)
        cut += len(tokenizer(text)["input_ids"]) > max_tokens
        weights = attentions(reference, torch.tensor([ids]))[:, 0]  # (N, H, L, L)
        for i in range(1, len(ids)):
            if ids[i] in special:
                continue
            row = weights[:, :, i]  # (N, H, L)
            logs = torch.where(row > 0, row.clamp_min(1e-300).log(), torch.zeros_like(row))
            found = {
                "previous_token": row[..., i - 1],
                "first_token": row[..., 0],
                "self": row[..., i],
                "entropy": -(row * logs).sum(-1),
            }
            for name, value in found.items():
                totals[name] = totals.get(name, 0) + value
            count += 1
    means = {name: (total / count).numpy() for name, total in totals.items()}
    return means, (count, tokens, cut)


def brute_repeated(reference: Any, ids: torch.Tensor, prefix: int, repeat: int) -> Any:
    """Induction and duplicate-token scores of (B, L) repeated sequences, query by query."""
    weights = attentions(reference, ids)  # (N, B, H, L, L)
    induction = torch.zeros(weights.shape[0], weights.shape[2], dtype=torch.float64)
    duplicate = torch.zeros_like(induction)
    count = 0
    for b in range(ids.shape[0]):
        for i in range(prefix + repeat, prefix + 2 * repeat):
            induction += weights[:, b, :, i, i - repeat + 1]
            duplicate += weights[:, b, :, i, i - repeat]
            count += 1
    return {
        "induction": (induction / count).numpy(),
        "duplicate_token": (duplicate / count).numpy(),
    }


@pytest.mark.parametrize("name", list(MODELS))
def test_every_score_equals_a_brute_force_over_eager_output_attentions(
    models: dict[str, PretrainedModel], folders: dict[str, Path], name: str
) -> None:
    model = models[name]
    result = head_scores(
        model,
        TEXTS,
        repeat_length=REPEAT,
        induction_sequences=SEQUENCES,
        seed=SEED,
        max_tokens=MAX_TOKENS,
    )
    reference = eager_reference(folders[name], model.family)
    natural, counts = brute_natural(reference, model.tokenizer, TEXTS, MAX_TOKENS)
    ids, prefix = repeated_tokens(model, SEQUENCES, REPEAT, SEED)
    repeated = brute_repeated(reference, ids, prefix, REPEAT)
    expected = {**natural, **repeated}
    assert set(result.scores) == set(SCORES) == set(expected)
    for score in SCORES:
        assert result.scores[score].shape == (model.num_layers, model.num_heads)
        np.testing.assert_allclose(result.scores[score], expected[score], atol=1e-5, rtol=0)
    # sharp heads that differ: the comparison is not one of nearly uniform maps
    assert result.scores["entropy"].max() < 1.0 and np.ptp(result.scores["first_token"]) > 0.1
    assert result.block == ("decoder" if model.family == "decoder" else "encoder")
    corpus = result.corpus
    assert (corpus.name, corpus.version, corpus.sequences) == ("texts", None, len(TEXTS))
    assert (corpus.queries, corpus.tokens, corpus.truncated) == counts
    assert corpus.truncated >= 1
    assert corpus.induction_tokens == ids.numel()
    assert corpus.induction_queries == SEQUENCES * REPEAT
    assert (corpus.seed, corpus.repeat_length, corpus.max_tokens) == (SEED, REPEAT, MAX_TOKENS)
    assert result.definition_version == corpus.definition_version == DEFINITION_VERSION


@pytest.mark.parametrize(
    ("name", "prefix", "suffix"),
    [
        ("llama", [], []),
        ("llama-bos", ["<s>"], []),
        ("bert", ["[CLS]"], ["[SEP]"]),
        ("t5", [], ["</s>"]),
    ],
)
def test_the_repeated_sequences_are_random_tokens_twice_inside_the_tokenizers_specials(
    models: dict[str, PretrainedModel], name: str, prefix: list[str], suffix: list[str]
) -> None:
    model = models[name]
    ids, start = repeated_tokens(model, SEQUENCES, REPEAT, SEED)
    assert start == len(prefix)
    assert ids.shape == (SEQUENCES, len(prefix) + 2 * REPEAT + len(suffix))
    special = set(model.tokenizer.all_special_ids)
    for row in ids.tolist():
        assert model.tokenizer.convert_ids_to_tokens(row[:start]) == prefix
        assert model.tokenizer.convert_ids_to_tokens(row[start + 2 * REPEAT :]) == suffix
        first, second = row[start : start + REPEAT], row[start + REPEAT : start + 2 * REPEAT]
        assert first == second and len(set(first)) == REPEAT
        assert not set(first) & special and max(first) < len(model.tokenizer)
    assert torch.equal(ids, repeated_tokens(model, SEQUENCES, REPEAT, SEED)[0])
    assert not torch.equal(ids, repeated_tokens(model, SEQUENCES, REPEAT, SEED + 1)[0])
    assert len({tuple(row) for row in ids.tolist()}) == SEQUENCES  # each row its own draw


def planted_gpt2() -> PretrainedModel:
    """A tiny GPT-2 whose layer 0, head 0 attends to the previous position.

    Tokens add nothing (their embedding is 0); position p's embedding is
    (cos θp, sin θp, -cos θp, -sin θp, 0, ...), which ln_1 scales by 4 (mean 0, variance
    1/16). Head 0's key is that (cos, sin) pair, its query the pair rotated back by θ
    and scaled: q_i . k_j = c cos(θ (i - 1 - j)), largest at j = i - 1. θ = π / 64 keeps
    every distance within the 64 positions on the falling side of the cosine, and c
    makes the margin over the neighbours j = i and j = i - 2 about 14 logits.
    """
    import transformers

    tokenizer = tiny.word_tokenizer(tiny.DECODER_STYLE)
    config = transformers.GPT2Config(
        vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=4, n_positions=64
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    theta, scale = math.pi / 64, 2000.0
    with torch.no_grad():
        model.transformer.wte.weight.zero_()
        positions = torch.arange(64) * theta
        wpe = torch.zeros(64, 32)
        wpe[:, 0], wpe[:, 1], wpe[:, 2], wpe[:, 3] = (
            positions.cos(),
            positions.sin(),
            -positions.cos(),
            -positions.sin(),
        )
        model.transformer.wpe.weight.copy_(wpe)
        attention = model.transformer.h[0].attn.c_attn  # Conv1D: x @ W, columns q | k | v
        head_q, head_k = slice(0, 8), slice(32, 40)
        for columns in (head_q, head_k):
            attention.weight[:, columns] = 0
            attention.bias[columns] = 0
        cos, sin = math.cos(theta), math.sin(theta)
        attention.weight[0, 0], attention.weight[1, 0] = scale * cos, scale * sin
        attention.weight[0, 1], attention.weight[1, 1] = -scale * sin, scale * cos
        attention.weight[0, 32], attention.weight[1, 33] = 1.0, 1.0
    return wrap_model(model, tokenizer, name="planted")


def test_a_planted_previous_token_head_scores_about_one() -> None:
    require_transformers()
    model = planted_gpt2()
    result = head_scores(model, TEXTS, repeat_length=REPEAT, induction_sequences=2)
    previous = result.scores["previous_token"]
    assert previous[0, 0] > 0.9
    others = np.delete(previous.reshape(-1), 0)
    assert others.max() < 0.5, previous
    assert result.top("previous_token", 1)[0][:2] == (0, 0)
    # it attends to nothing else: neither itself nor the first position, a sharp row
    assert result.scores["self"][0, 0] < 0.05
    assert result.scores["entropy"][0, 0] < 0.1
    # on the repeated tokens it is a previous-token head too, not an induction head
    assert result.scores["induction"][0, 0] < 0.05


@pytest.mark.parametrize("name", ["llama", "bert", "t5"])
def test_chunks_of_one_row_give_the_scores_of_whole_layers(
    models: dict[str, PretrainedModel], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = models[name]

    def scored() -> tuple[HeadScores, list[tuple[int, int]]]:
        chunks: list[tuple[int, int]] = []  # (queries, chunks) of each observed call
        original = heads_module.HeadScoreObserver.row_chunks

        def counted(self: Any, *args: int) -> list[tuple[int, int]]:
            found = original(self, *args)
            chunks.append((args[0], len(found)))
            return found

        with monkeypatch.context() as patch:
            patch.setattr(heads_module.HeadScoreObserver, "row_chunks", counted)
            result = head_scores(model, TEXTS, repeat_length=REPEAT, induction_sequences=SEQUENCES)
        return result, chunks

    whole, whole_chunks = scored()
    monkeypatch.setattr(computing_module, "OBSERVED_CHUNK_FLOATS", 1)  # one row per chunk
    chunked, chunks = scored()
    assert {count for _, count in whole_chunks} == {1}
    assert all(count == length for length, count in chunks) and len(chunks) == len(whole_chunks)
    for score in SCORES:
        np.testing.assert_allclose(chunked.scores[score], whole.scores[score], atol=1e-5, rtol=0)


def test_a_bfloat16_model_scores_as_eager_bfloat16(folders: dict[str, Path]) -> None:
    folder = folders["llama"]
    model = load_model_dir("llama", folder, placement=Placement(dtype="bfloat16"))
    assert model.dtype == torch.bfloat16
    result = head_scores(
        model, TEXTS, repeat_length=REPEAT, induction_sequences=SEQUENCES, max_tokens=MAX_TOKENS
    )
    reference = eager_reference(folder, "decoder", torch.bfloat16)
    natural, _ = brute_natural(reference, model.tokenizer, TEXTS, MAX_TOKENS)
    ids, prefix = repeated_tokens(model, SEQUENCES, REPEAT, 0)
    expected = {**natural, **brute_repeated(reference, ids, prefix, REPEAT)}
    for score in SCORES:
        tolerance = 2e-2 * (5 if score == "entropy" else 1)  # nats: a sum over the row
        np.testing.assert_allclose(result.scores[score], expected[score], atol=tolerance, rtol=0)


def test_a_model_offloaded_to_disk_scores_as_the_model_in_memory(
    folders: dict[str, Path], models: dict[str, PretrainedModel], tmp_path: Path
) -> None:
    folder, base = folders["llama"], models["llama"]
    block_bytes = sum(p.numel() * 4 for p in layer_modules(base.model)[0][1].parameters())
    embed_bytes = base.model.get_input_embeddings().weight.numel() * 4
    placement = Placement(
        dtype="float32",
        max_memory=f'{{"cpu": {embed_bytes * 2 + block_bytes + 4096}}}',
        offload_dir=tmp_path / "offload",
    )
    placed = load_model_dir("llama", folder, placement=placement)
    assert placed.placed and placed.layers_per_device().get("disk", 0) >= 1
    options: dict[str, Any] = {"repeat_length": REPEAT, "induction_sequences": SEQUENCES}
    got, expected = head_scores(placed, TEXTS, **options), head_scores(base, TEXTS, **options)
    for score in SCORES:
        np.testing.assert_allclose(got.scores[score], expected.scores[score], atol=1e-5, rtol=0)


def test_an_image_model_is_refused_naming_the_model(tmp_path: Path) -> None:
    require_modules("transformers and Pillow", "transformers", "PIL")
    from tests.pretrained.media import save_tiny_vision

    model = load_model("vit", save_tiny_vision("vit", tmp_path / "vit"), tmp_path, None)
    for refuse in (head_scores, scored_block):  # scored_block: a caller's check before work
        with pytest.raises(HeadScoresUnavailableError, match="until scores are defined") as refused:
            refuse(model)
        assert refused.value.field == "model" and isinstance(refused.value, AttentionInputError)


def test_progress_counts_the_passes_and_a_cancelled_computation_stops(
    models: dict[str, PretrainedModel],
) -> None:
    model = models["llama"]
    calls: list[tuple[int, int]] = []
    head_scores(
        model,
        TEXTS,
        repeat_length=REPEAT,
        induction_sequences=SEQUENCES,
        progress=lambda done, total: calls.append((done, total)),
    )
    total = len(TEXTS) + 2  # one pass per text, the repeated sequences in passes of 8
    assert calls == [(done, total) for done in range(1, total + 1)]
    cancel = Cancellation()
    cancel.cancel("gone")
    with pytest.raises(ComputeCancelledError, match="gone"):
        head_scores(model, TEXTS, repeat_length=REPEAT, cancel=cancel)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"texts": []}, "texts"),
        ({"texts": ["the cat", "  "]}, "texts[1]"),
        ({"texts": ["zebra", "tired"]}, "texts"),  # no token after the first: no query
        ({"repeat_length": 1}, "repeat_length"),
        ({"repeat_length": 26}, "repeat_length"),  # over the 25 words
        ({"repeat_length": 25, "texts": ["the cat"]}, None),
        ({"induction_sequences": 0}, "induction_sequences"),
        ({"max_tokens": 1}, "max_tokens"),
        ({"device": "tpu"}, "device"),
    ],
)
def test_what_cannot_be_scored_is_refused_naming_the_field(
    models: dict[str, PretrainedModel], options: dict[str, Any], field: str | None
) -> None:
    arguments = {"texts": TEXTS, "repeat_length": REPEAT, "induction_sequences": 2, **options}
    if field is None:
        head_scores(models["llama"], **arguments)
        return
    with pytest.raises(AttentionInputError) as refused:
        head_scores(models["llama"], **arguments)
    assert refused.value.field == field


def test_the_table_has_one_row_per_head_and_round_trips_through_json(
    models: dict[str, PretrainedModel],
) -> None:
    import csv
    import io
    import json

    result = head_scores(models["bert"], TEXTS, repeat_length=REPEAT, induction_sequences=2)
    rows = result.to_rows()
    assert len(rows) == result.num_layers * result.num_heads
    assert list(rows[0]) == ["layer", "head", *SCORES]
    for row in rows:
        for score in SCORES:
            assert row[score] == result.scores[score][row["layer"], row["head"]]
    parsed = list(csv.DictReader(io.StringIO(result.to_csv())))
    assert [(int(r["layer"]), int(r["head"])) for r in parsed] == [
        (r["layer"], r["head"]) for r in rows
    ]
    assert [float(r["entropy"]) for r in parsed] == [r["entropy"] for r in rows]
    back = HeadScores.from_dict(json.loads(json.dumps(result.to_dict())))
    assert back.corpus == result.corpus and back.definitions == result.definitions
    for score in SCORES:
        np.testing.assert_array_equal(back.scores[score], result.scores[score])
    # top heads, by the table
    by_table = sorted(rows, key=lambda r: -r["induction"])[:3]
    assert [(layer, head) for layer, head, _ in result.top("induction", 3)] == [
        (r["layer"], r["head"]) for r in by_table
    ]
    lowest = min(rows, key=lambda r: r["entropy"])
    assert result.top("entropy", 1, lowest=True)[0][:2] == (lowest["layer"], lowest["head"])


def test_the_fingerprint_changes_with_what_decides_the_scores(
    models: dict[str, PretrainedModel],
) -> None:
    options: dict[str, Any] = {"repeat_length": REPEAT, "induction_sequences": 2}
    model = models["llama"]
    first = head_scores(model, TEXTS, **options).corpus.fingerprint
    assert head_scores(model, TEXTS, **options).corpus.fingerprint == first
    assert head_scores(model, TEXTS[:2], **options).corpus.fingerprint != first
    assert head_scores(model, TEXTS, seed=1, **options).corpus.fingerprint != first


def test_the_shipped_corpus_is_the_default_natural_text(
    models: dict[str, PretrainedModel],
) -> None:
    corpus = shipped_corpus()
    root = Path(atlas.__file__).resolve().parents[2] / "corpus"
    text = (root / "head_atlas.txt").read_text(encoding="utf-8")
    assert corpus.texts == tuple(paragraphs(text))
    assert len(text.split()) >= 3000 and len(corpus.texts) >= 20
    assert all(t.strip() == t and t for t in corpus.texts)
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert f"Version {atlas.CORPUS_VERSION}" in readme and "CC0" in readme
    result = head_scores(models["bert"], repeat_length=REPEAT, induction_sequences=2)
    assert (result.corpus.name, result.corpus.version) == ("head_atlas", corpus.version)
    assert result.corpus.sha256 == corpus.sha256 and result.corpus.sequences == len(corpus.texts)


def test_paragraphs_are_split_at_blank_lines_keeping_their_line_breaks() -> None:
    text = "one\ntwo\n\n  \n  indented\n    more\n\n\nlast  \n"
    assert paragraphs(text) == ["one\ntwo", "  indented\n    more", "last"]


def test_every_score_has_a_definition_and_a_source() -> None:
    assert list(DEFINITIONS) == list(SCORES)
    for name, definition in DEFINITIONS.items():
        assert definition.name == name and definition.source and "A[i" in definition.definition
    assert DEFINITIONS["entropy"].unit == "nats"
    assert {d.inputs for d in DEFINITIONS.values()} == {"natural text", "repeated random tokens"}


def test_a_request_is_planned_once_before_any_pass(
    models: dict[str, PretrainedModel], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The corpus and the random vocabulary are built once per request, computed or read
    from disk; what can only fail (no query, no such device) fails before any pass and
    before the cache is read."""
    from attnviz.pretrained.atlas import cached_head_scores, plan, plan_atlas

    model = models["llama"]
    calls: dict[str, int] = {"texts_corpus": 0, "random_vocabulary": 0, "run": 0}

    def spy(name: str, function: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return function(*args, **kwargs)

        return counted

    for name in ("texts_corpus", "random_vocabulary"):
        monkeypatch.setattr(plan, name, spy(name, getattr(plan, name)))
    monkeypatch.setattr(model, "run", spy("run", model.run))
    passes = len(TEXTS) + 2  # one per text, the 16 repeated sequences in passes of 8
    computed, cached = cached_head_scores(model, TEXTS, tmp_path)
    assert not cached and calls == {"texts_corpus": 1, "random_vocabulary": 1, "run": passes}
    again, cached = cached_head_scores(model, TEXTS, tmp_path)
    assert cached and calls == {"texts_corpus": 2, "random_vocabulary": 2, "run": passes}
    assert again.scores.keys() == computed.scores.keys()
    planned = plan_atlas(model, TEXTS, repeat_length=None)
    assert planned.info == computed.corpus and len(planned.passes) == len(TEXTS) + 2
    assert planned.key == plan_atlas(model, TEXTS, repeat_length=None).key
    assert planned.key != plan_atlas(model, TEXTS[:2], repeat_length=None).key
    with pytest.raises(AttentionInputError, match="no text has a query") as refused:
        cached_head_scores(model, ["zebra", "tired"], tmp_path)
    assert refused.value.field == "texts"
    if not torch.cuda.is_available():
        with pytest.raises(AttentionInputError) as refused:
            cached_head_scores(model, TEXTS, tmp_path, device="cuda")  # kept on disk above
        assert refused.value.field == "device"
    assert calls["run"] == passes
