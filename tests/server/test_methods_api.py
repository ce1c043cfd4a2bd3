"""POST /api/v1/models/attention with ``method``: each method against an independent computation.

Norm-based attention (Kobayashi et al., EMNLP 2020) is checked against a brute force
written here from transformers' own modules: the model runs with eager attention and
``output_attentions``, a forward hook takes its value projection's output, the output
projection's weight is read from the module, and every vector α_ij^h f^h(x_j) is formed
and measured (no α·‖f‖ shortcut, no Gram matrix), per head and summed over heads.
"""

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from attnviz.pretrained import MODELS
from attnviz.pretrained.methods import attention_flow
from fastapi.testclient import TestClient

from tests.pretrained.tiny import BUILDERS, FAMILIES, TARGETS, TEXTS
from tests.server.support import ask_tiny, output_projections
from tests.support.api import decode

pytestmark = pytest.mark.usefixtures("pretrained_extra")

URL = "/api/v1/models/attention"
TOLERANCE = 1e-5
"""float32 sums over d_model = 32 and 4 heads, computed in two orders."""


def attention_parts(kind: str, model: Any, layer: int, block: str) -> tuple[Any, Any, Any]:
    """(the attention's value projection, W_O as (in, out), the weights' output field)."""
    if kind == "bert":
        attention = model.encoder.layer[layer].attention
        return attention.self.value, attention.output.dense.weight.T, "attentions"
    if kind == "gpt2":
        attention = model.transformer.h[layer].attn
        return attention.c_attn, attention.c_proj.weight, "attentions"  # Conv1D: (in, out)
    if kind == "llama":
        attention = model.model.layers[layer].self_attn
        return attention.v_proj, attention.o_proj.weight.T, "attentions"
    assert kind == "t5"
    if block == "encoder":
        attention = model.encoder.block[layer].layer[0].SelfAttention
        return attention.v, attention.o.weight.T, "encoder_attentions"
    attention = model.decoder.block[layer].layer[1].EncDecAttention
    return attention.v, attention.o.weight.T, "cross_attentions"


def brute_force(
    kind: str, folder: Path, layer: int, block: str, source: list[int], target: list[int] | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(H, L_q, L_k) ‖α_ij^h f^h(x_j)‖ and (L_q, L_k) ‖Σ_h α_ij^h f^h(x_j)‖, from the vectors."""
    import transformers

    auto = {
        "bert": transformers.AutoModel,
        "gpt2": transformers.AutoModelForCausalLM,
        "llama": transformers.AutoModelForCausalLM,
        "t5": transformers.AutoModelForSeq2SeqLM,
    }[kind]
    model = auto.from_pretrained(folder, attn_implementation="eager", local_files_only=True)
    model.eval()
    projection, w_out, field = attention_parts(kind, model, layer, block)
    values: list[torch.Tensor] = []
    hook = projection.register_forward_hook(lambda _m, _i, output: values.append(output))
    inputs = {"input_ids": torch.tensor([source])}
    if target is not None:
        inputs["decoder_input_ids"] = torch.tensor([target])
    try:
        with torch.no_grad():
            out = model(**inputs, output_attentions=True)
    finally:
        hook.remove()
    weights = getattr(out, field)[layer][0]  # (H, L_q, L_k)
    heads = weights.shape[0]
    value = values[0][0]  # (L_k, H_kv * d) of this layer's only call
    if kind == "gpt2":  # c_attn gives query, key and value side by side
        value = value[:, 2 * value.shape[1] // 3 :]
    d = w_out.shape[0] // heads
    kv_heads = value.shape[1] // d
    value = value.view(-1, kv_heads, d).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
    f = torch.stack([value[h] @ w_out[h * d : (h + 1) * d] for h in range(heads)])
    vectors = weights[:, :, :, None] * f[:, None, :, :]  # (H, L_q, L_k, d_model)
    return vectors.norm(dim=-1).detach(), vectors.sum(dim=0).norm(dim=-1).detach()


@pytest.mark.parametrize(
    ("kind", "block", "layer"),
    [("bert", "encoder", 1), ("gpt2", "decoder", 0), ("llama", "decoder", 1),
     ("t5", "encoder", 1), ("t5", "cross", 2)],
)  # fmt: skip
def test_norm_equals_the_vectors_measured_from_transformers_modules(
    tiny_models: TestClient, kind: str, block: str, layer: int
) -> None:
    data = ask_tiny(tiny_models, kind, method="norm", layer_index=layer, block=block)
    assert data["method"] == "norm"
    source = data["input_ids"][0]
    target = None
    if kind == "t5":
        target = ask_tiny(tiny_models, kind, block="decoder")["input_ids"][0]
        source = ask_tiny(tiny_models, kind, block="encoder")["input_ids"][0]
    norms, summed = brute_force(
        kind, Path(MODELS.get(f"tiny-{kind}").path), layer, block, source, target
    )
    got = torch.tensor(data["attentions"][0][0])  # (H, L_q, L_k)
    assert got.shape == norms.shape
    assert (got - norms).abs().max().item() <= TOLERANCE
    assert (torch.tensor(data["summed_norm"][0]) - summed).abs().max().item() <= TOLERANCE
    assert (torch.tensor(data["head_mean"][0][0]) - norms.mean(dim=0)).abs().max() <= TOLERANCE
    # Not the weights: a norm map's rows do not sum to 1, and no rollout is made of them.
    weights = torch.tensor(
        ask_tiny(tiny_models, kind, layer_index=layer, block=block)["attentions"][0][0]
    )
    assert (got - weights).abs().max().item() > 1e-3
    assert data["rollout"] is None


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_every_family_gives_weights_times_the_value_norm_of_each_key(
    tiny_models: TestClient, kind: str
) -> None:
    """‖α_ij f(x_j)‖ = α_ij ‖f(x_j)‖: per head and key, norm / weight is one number down
    every query row (where the weight is not 0), for every family and both encodings."""
    norms = ask_tiny(tiny_models, kind, method="norm", encoding="base64_float32")
    weights = ask_tiny(tiny_models, kind, encoding="base64_float32")
    a = decode(norms["attentions"], expect="f4")[:, 0].astype(np.float64)  # (N, H, L_q, L_k)
    w = decode(weights["attentions"], expect="f4")[:, 0].astype(np.float64)
    assert a.shape == w.shape and (a >= 0).all()
    visible = w > 1e-6
    ratio = np.where(visible, a / np.where(visible, w, 1), np.nan)
    spread = np.nanmax(ratio, axis=2) - np.nanmin(ratio, axis=2)  # over the queries
    assert np.nanmax(spread / np.nanmax(ratio, axis=2)) < 1e-4
    assert norms["rollout"] is None


@pytest.mark.parametrize("field", ["neuron", "hide_special_tokens", "merge_words"])
def test_norm_refuses_the_options_that_assume_weights(tiny_models: TestClient, field: str) -> None:
    body: dict[str, Any] = {
        "model": "tiny-bert",
        "texts": TEXTS[:1],
        "sequence_index": 0,
        "method": "norm",
        field: True,
    }
    if field == "neuron":
        body.update(layer_index=0, head_index=0, query_index=0)
    response = tiny_models.post(URL, json=body)
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", field] and "norm" in detail["msg"]


def test_norm_for_the_whole_batch_and_an_unknown_method(tiny_models: TestClient) -> None:
    body = {"model": "tiny-llama", "texts": TEXTS, "method": "norm"}
    data = tiny_models.post(URL, json=body).json()
    assert data["method"] == "norm" and data["rollout"] is None
    single = ask_tiny(tiny_models, "llama", method="norm")
    length = len(single["tokens"][0])
    batch_first = np.array(data["attentions"])[:, 0, :, :length, :length]
    assert np.abs(batch_first - np.array(single["attentions"])[:, 0]).max() <= TOLERANCE
    response = tiny_models.post(URL, json={**body, "method": "flow-ish"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "method"]


@pytest.mark.parametrize(
    ("kind", "block"), [("bert", "encoder"), ("llama", "decoder"), ("t5", "decoder")]
)
def test_flow_is_the_max_flow_through_the_apis_own_head_means(
    tiny_models: TestClient, kind: str, block: str
) -> None:
    data = ask_tiny(tiny_models, kind, method="flow", block=block)
    assert data["method"] == "flow" and data["rollout"] is not None  # the maps stay weights
    assert data["method_window"] is None  # the whole input: under flow's bound
    weights = ask_tiny(tiny_models, kind, block=block)
    assert data["attentions"] == weights["attentions"]
    means = torch.tensor([layer[0] for layer in weights["head_mean"]], dtype=torch.float64)
    got = torch.tensor(data["method_map"][0], dtype=torch.float64)
    assert (got - networkx_flow(means)).abs().max().item() <= 1e-5


def networkx_flow(means: torch.Tensor) -> torch.Tensor:
    """Attention flow of (N, L, L) head means by networkx's maximum flow, rows normalised."""
    import networkx as nx

    layers, length, _ = means.shape
    adjusted = means + torch.eye(length, dtype=torch.float64)
    adjusted = adjusted / adjusted.sum(dim=-1, keepdim=True)
    graph = nx.DiGraph()
    for layer in range(layers):
        for i in range(length):
            for j in range(length):
                graph.add_edge((layer, j), (layer + 1, i), capacity=float(adjusted[layer, i, j]))
    expected = torch.tensor(
        [
            [nx.maximum_flow_value(graph, (0, j), (layers, i)) for j in range(length)]
            for i in range(length)
        ]
    )
    return expected / expected.sum(dim=1, keepdim=True)


def test_flow_over_its_bound_is_of_the_last_tokens_that_fit(tiny_models: TestClient) -> None:
    """62 tokens through 2 layers, over flow's 47 (N * L^4 <= 1e7): the flow of the last 47
    among themselves (issue 42: what fits, not a refusal), said in method_window."""
    body = {
        "model": "tiny-bert",
        "texts": [" ".join(["the cat sat"] * 20)],
        "sequence_index": 0,
    }
    data = tiny_models.post(URL, json={**body, "method": "flow"}).json()
    weights = tiny_models.post(URL, json=body).json()
    length = len(weights["tokens"][0])
    assert length == 62 and data["method_window"] == [62 - 47, 62]
    assert data["attentions"] == weights["attentions"]  # the maps stay the whole input's
    means = torch.tensor([layer[0] for layer in weights["head_mean"]], dtype=torch.float64)
    got = torch.tensor(data["method_map"][0], dtype=torch.float64)
    assert got.shape == (47, 47)
    # attention_flow is checked against networkx above and in tests/pretrained (47 tokens'
    # 2,209 networkx max flows would take two minutes): here, that the window is the one.
    expected = attention_flow(means[:, 15:, 15:]).double()
    assert (got - expected).abs().max().item() <= 1e-6


def test_flow_refuses_the_batch_and_cross_attention(tiny_models: TestClient) -> None:
    refused = {
        "method": {"model": "tiny-bert", "texts": TEXTS, "method": "flow"},
        "block": {
            "model": "tiny-t5",
            "texts": TEXTS[:1],
            "targets": TARGETS[:1],
            "sequence_index": 0,
            "block": "cross",
            "method": "flow",
        },
    }
    for field, body in refused.items():
        response = tiny_models.post(URL, json=body)
        assert response.status_code == 422, (field, response.text)
        detail = response.json()["detail"][0]
        assert detail["loc"][-1] == field or detail["loc"] == ["body", field], detail
        assert "flow" in detail["msg"]


def zeroing_hooks(layers: list[Any], width: int, heads: list[list[int]]) -> list[Any]:
    """Forward pre-hooks that zero each head's slice (``width`` features) of the output
    projection's input, in transformers' own modules (``layers``: one projection per layer):
    the head's output, switched off."""
    hooks = []
    for index, projection in enumerate(layers):
        mine = [h for layer, h in heads if layer == index]

        def zero(_module: Any, args: tuple[Any, ...], mine: list[int] = mine) -> tuple[Any, ...]:
            x = args[0].clone()
            for h in mine:
                x[..., h * width : (h + 1) * width] = 0
            return (x, *args[1:])

        hooks.append(projection.register_forward_pre_hook(zero))
    return hooks


@pytest.mark.parametrize("kind", ["gpt2", "llama", "bert"])
def test_ablation_equals_transformers_with_the_heads_output_zeroed(
    tiny_models: TestClient, kind: str
) -> None:
    import transformers

    heads = [[0, 1], [0, 3], [1, 0]]
    data = ask_tiny(tiny_models, kind, ablate=heads)
    assert data["ablation"]["heads"] == sorted(heads)
    auto = transformers.AutoModel if kind == "bert" else transformers.AutoModelForCausalLM
    folder = Path(MODELS.get(f"tiny-{kind}").path)
    model = auto.from_pretrained(folder, attn_implementation="eager", local_files_only=True)
    ids = torch.tensor(data["input_ids"])
    with torch.no_grad():
        intact = model(ids, output_attentions=True)
        layers = output_projections(kind, model)[FAMILIES[kind]]
        width = model.config.hidden_size // model.config.num_attention_heads
        hooks = zeroing_hooks(layers, width, heads)
        try:
            ablated = model(ids, output_attentions=True)
        finally:
            for hook in hooks:
                hook.remove()
    # The maps are the ablated model's: layer 1 sees what layer 0's remaining heads wrote.
    got = torch.tensor(data["attentions"])[:, 0]
    expected = torch.stack(ablated.attentions)[:, 0]
    error = (got - expected).abs().max().item()
    assert error <= TOLERANCE
    # ... and not the intact model's (tiny random BERTs attend almost uniformly, so the
    # difference is small there: it must stand well above the agreement).
    moved = (got[1] - torch.stack(intact.attentions)[1, 0]).abs().max().item()
    assert moved > 10 * error
    if kind == "bert":
        before, after = intact.last_hidden_state[0], ablated.last_hidden_state[0]
        change = (after - before).norm(dim=-1) / before.norm(dim=-1)
        assert torch.tensor(data["ablation"]["hidden_change"]) == pytest.approx(change, abs=1e-5)
        assert change.min().item() > 1e-4
        assert "kl" not in data["ablation"]
        return
    p = intact.logits[0].log_softmax(dim=-1)
    q = ablated.logits[0].log_softmax(dim=-1)
    kl = (p.exp() * (p - q)).sum(dim=-1)
    assert torch.tensor(data["ablation"]["kl"]) == pytest.approx(kl, abs=1e-5)
    assert kl.max().item() > 1e-5
    for name, logp in (("top_before", p), ("top_after", q)):
        top = logp.exp().topk(5, dim=-1)
        for position, row in enumerate(data["ablation"][name]):
            assert [t["id"] for t in row] == top.indices[position].tolist()
            got_p = [t["probability"] for t in row]
            assert got_p == pytest.approx(top.values[position].tolist(), abs=1e-5)


def test_ablation_refuses_what_it_cannot_do(tiny_models: TestClient) -> None:
    base = {"model": "tiny-bert", "texts": TEXTS[:1], "sequence_index": 0}
    refused = [
        ({**base, "ablate": [[2, 0]]}, "ablate", "layer 2"),
        ({**base, "ablate": [[0, 4]]}, "ablate", "head 4"),
        ({**base, "ablate": [[0, 0, 1]]}, "ablate", ""),
        ({**base, "ablate": [[0, 0]], "hide_special_tokens": True},
         "hide_special_tokens", "ablate"),
        ({"model": "tiny-bert", "texts": TEXTS, "ablate": [[0, 0]]}, "ablate", "sequence_index"),
    ]  # fmt: skip
    for body, field, words in refused:
        response = tiny_models.post(URL, json=body)
        assert response.status_code == 422, (body, response.text)
        detail = response.json()["detail"][0]
        assert field in detail["loc"] and words in detail["msg"], detail


@pytest.mark.parametrize(("kind", "block"), [("t5", "encoder"), ("t5", "cross"), ("t5", "decoder")])
def test_encoder_decoder_ablation_equals_transformers_with_the_heads_output_zeroed(
    tiny_models: TestClient, kind: str, block: str
) -> None:
    """Heads of any block of an encoder-decoder: the maps of that block, and the targets'
    next-token distributions, as transformers' model with those heads' outputs zeroed.

    T5: the tiny BART's initialisation (std 0.02) moves its logits by 1e-7 when heads go
    off, below what the comparison could tell from no ablation at all."""
    import transformers

    heads = [[0, 1], [1, 2]]
    data = ask_tiny(tiny_models, kind, ablate=heads, block=block)
    source = ask_tiny(tiny_models, kind, block="encoder")["input_ids"][0]
    target = ask_tiny(tiny_models, kind, block="decoder")["input_ids"][0]
    folder = Path(MODELS.get(f"tiny-{kind}").path)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(
        folder, attn_implementation="eager", local_files_only=True
    )
    width = model.config.d_kv
    inputs = {"input_ids": torch.tensor([source]), "decoder_input_ids": torch.tensor([target])}
    hooks = zeroing_hooks(output_projections(kind, model)[block], width, heads)
    with torch.no_grad():
        try:
            ablated = model(**inputs, output_attentions=True)
        finally:
            for hook in hooks:
                hook.remove()
        intact = model(**inputs)
    field = {"encoder": "encoder_attentions", "decoder": "decoder_attentions",
             "cross": "cross_attentions"}[block]  # fmt: skip
    expected = torch.stack(getattr(ablated, field))[:, 0]
    got = torch.tensor(data["attentions"])[:, 0]
    assert (got - expected).abs().max().item() <= TOLERANCE
    assert data["ablation"]["tokens"] == ask_tiny(tiny_models, kind, block="decoder")["tokens"][0]
    p = intact.logits[0].log_softmax(dim=-1)
    q = ablated.logits[0].log_softmax(dim=-1)
    kl = (p.exp() * (p - q)).sum(dim=-1)
    assert torch.tensor(data["ablation"]["kl"]) == pytest.approx(kl, abs=1e-5)
    assert kl.max().item() > 1e-6
    top = q.exp().topk(5, dim=-1)
    for position, row in enumerate(data["ablation"]["top_after"]):
        assert [t["id"] for t in row] == top.indices[position].tolist()
        got_p = [t["probability"] for t in row]
        assert got_p == pytest.approx(top.values[position].tolist(), abs=1e-5)


def value_parts(kind: str, model: Any, layer: int, block: str) -> tuple[Any, Any, slice]:
    """(the value projection, the layer module, the value's columns in its output)."""
    everything = slice(None)
    if kind == "llama":
        owner = model.model.layers[layer]
        return owner.self_attn.v_proj, owner, everything
    if kind == "gpt2":
        owner = model.transformer.h[layer]
        width = model.config.n_embd
        return owner.attn.c_attn, owner, slice(2 * width, 3 * width)  # query, key, value
    if kind == "bert":
        owner = model.encoder.layer[layer]
        return owner.attention.self.value, owner, everything
    assert kind == "t5"
    if block == "encoder":
        owner = model.encoder.block[layer]
        return owner.layer[0].SelfAttention.v, owner, everything
    owner = model.decoder.block[layer]
    return owner.layer[1].EncDecAttention.v, owner, everything


def layer_output(
    model: Any, inputs: dict[str, torch.Tensor], owner: Any, zeroed: tuple[Any, slice, int] | None
) -> torch.Tensor:
    """``owner``'s output (L_q, d_model) in a run of the whole model; with ``zeroed`` =
    (value projection, its value columns, token), that token's value row set to 0."""
    outputs: list[torch.Tensor] = []

    def keep(_m: Any, _i: Any, output: Any) -> None:
        outputs.append(output[0] if isinstance(output, tuple) else output)

    hooks = [owner.register_forward_hook(keep)]
    if zeroed is not None:
        projection, columns, token = zeroed

        def zero(_m: Any, _i: Any, output: torch.Tensor) -> torch.Tensor:
            output = output.clone()
            output[:, token, columns] = 0
            return output

        hooks.append(projection.register_forward_hook(zero))
    try:
        with torch.no_grad():
            model(**inputs)
    finally:
        for hook in hooks:
            hook.remove()
    return outputs[0][0]


@pytest.mark.parametrize(
    ("kind", "block"),
    [("llama", "decoder"), ("gpt2", "decoder"), ("t5", "encoder"), ("t5", "cross")],
)
def test_value_zeroing_equals_the_model_rerun_with_each_value_zeroed(
    tiny_models: TestClient, kind: str, block: str
) -> None:
    """Mohebbi et al.'s C_ij from whole reruns of transformers' own model, a forward hook
    zeroing token j's value (the value projection's output row) in one layer, another hook
    taking that layer's output; AttnViz reruns the layer alone. (Not the tiny BERT or BART:
    their initialisation, std 0.02 under a LayerNorm, moves a layer's outputs by 1e-7, the
    size of float32 rounding, which the normalised rows would only amplify.)"""
    import transformers

    data = ask_tiny(tiny_models, kind, method="value_zeroing", block=block)
    assert data["method"] == "value_zeroing"
    got = torch.tensor(data["method_map"])  # (N, L_q, L_k)
    auto = {
        "llama": transformers.AutoModelForCausalLM,
        "gpt2": transformers.AutoModelForCausalLM,
        "t5": transformers.AutoModelForSeq2SeqLM,
    }[kind]
    folder = Path(MODELS.get(f"tiny-{kind}").path)
    model = auto.from_pretrained(folder, attn_implementation="eager", local_files_only=True)
    model.eval()
    source = ask_tiny(tiny_models, kind, block="encoder" if kind == "t5" else block)["input_ids"][0]
    inputs = {"input_ids": torch.tensor([source])}
    if kind == "t5":
        target = ask_tiny(tiny_models, kind, block="decoder")["input_ids"][0]
        inputs["decoder_input_ids"] = torch.tensor([target])
    layers, _, length_k = got.shape
    largest = 0.0
    for layer in range(layers):
        projection, owner, columns = value_parts(kind, model, layer, block)
        original = layer_output(model, inputs, owner, None).double()
        distances = torch.stack(
            [
                1
                - torch.cosine_similarity(
                    layer_output(model, inputs, owner, (projection, columns, j)).double(),
                    original,
                    dim=-1,
                )
                for j in range(length_k)
            ],
            dim=1,
        ).clamp(min=0)  # (L_q, L_k)
        largest = max(largest, distances.max().item())
        expected = distances / distances.sum(dim=1, keepdim=True)
        assert (got[layer] - expected).abs().max().item() <= 1e-4, layer
    assert largest > 1e-3  # the distances stand far above float32 rounding (1e-7)


def test_value_zeroing_is_bounded(tiny_models: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    import attnviz.pretrained.zeroing as zeroing

    monkeypatch.setattr(zeroing, "MAX_VALUE_ZEROING_WORK", 100)
    body = {"model": "tiny-bert", "sequence_index": 0, "method": "value_zeroing", "texts": TEXTS}
    response = tiny_models.post(URL, json=body)
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"][-1] == "texts" and "value zeroing" in detail["msg"], detail
    response = tiny_models.post(URL, json={**body, "sequence_index": None})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][-1] == "method"


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_every_method_answers_for_every_family(tiny_models: TestClient, kind: str) -> None:
    """Each method (and ablation) for each family's first block, with its field's shape; the
    reference tests above check the numbers family by family."""
    weights = ask_tiny(tiny_models, kind)
    layers, _, heads, length_q, length_k = np.array(weights["attentions"]).shape
    shapes = {
        "norm": ("attentions", (layers, 1, heads, length_q, length_k)),
        "rollout": ("method_map", (1, length_q, length_k)),
        "flow": ("method_map", (1, length_q, length_k)),
        "grad_rollout": ("method_map", (1, length_q, length_k)),
        "head_importance": ("head_importance", (layers, heads)),
        "value_zeroing": ("method_map", (layers, length_q, length_k)),
    }
    for method, (field, shape) in shapes.items():
        data = ask_tiny(tiny_models, kind, method=method)
        got = np.array(data[field])
        assert got.shape == shape, (method, got.shape)
        assert np.isfinite(got).all() and (got >= 0).all(), method
    ablated = ask_tiny(tiny_models, kind, ablate=[[0, 0]])
    assert ablated["ablation"]["heads"] == [[0, 0]]
    assert ("hidden_change" if FAMILIES[kind] == "encoder" else "kl") in ablated["ablation"]
