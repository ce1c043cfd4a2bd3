"""Gradient-weighted rollout and head importance, against autograd on transformers' eager model.

The reference is computed here, independently of AttnViz's recorder: each tiny model is
loaded by transformers with ``attn_implementation="eager"`` and ``output_attentions``;
the weights it returns keep their gradients (``retain_grad``); each head's output is
multiplied by a gate ξ_h in a forward pre-hook on the module's own output projection (the
head's slice of its input); the target is formed from the model's own outputs (the
``logits``, or the last hidden state) and ``backward()`` runs. Chefer et al.'s rule and
Michel et al.'s |∂T/∂ξ_h| are then written out on those gradients.
"""

from pathlib import Path
from typing import Any

import pytest
import torch
from attnviz.pretrained import MODELS
from fastapi.testclient import TestClient

from tests.pretrained.tiny import BUILDERS, FAMILIES, TARGETS, TEXTS
from tests.server.support import ask_tiny, output_projections

pytestmark = pytest.mark.usefixtures("pretrained_extra")

URL = "/api/v1/models/attention"
RTOL = 1e-4
"""float32 gradients through 2 layers by two eager paths: they agree to float32 rounding.
The absolute floor is 1e-4 of the largest value compared (:func:`assert_close`): tiny
random models' gradients are small (1e-7 for BART's encoder), so a fixed floor would
pass anything."""


def assert_close(got: torch.Tensor, expected: torch.Tensor, *, minus: torch.Tensor | None = None):
    """``got`` equals ``expected`` to :data:`RTOL`, the floor scaled to ``expected - minus``."""
    scale = (expected if minus is None else expected - minus).abs().max().item()
    assert scale > 1e-12  # something to compare: not all zero (or all the identity)
    torch.testing.assert_close(got.to(expected.dtype), expected, rtol=RTOL, atol=RTOL * scale)


def reference(
    kind: str,
    data: dict[str, Any],
    source: list[int],
    target: list[int] | None,
    *,
    position: int,
    token_id: int | None,
    off: frozenset[tuple[str, int, int]] = frozenset(),
) -> tuple[dict[str, list[torch.Tensor]], dict[str, torch.Tensor], float, int | None]:
    """Per block: each layer's (A, ∂T/∂A) (H, L_q, L_k), the (N, H) |∂T/∂ξ|; T; the token."""
    import transformers

    family = FAMILIES[kind]
    auto = {
        "encoder": transformers.AutoModel,
        "decoder": transformers.AutoModelForCausalLM,
        "encoder-decoder": transformers.AutoModelForSeq2SeqLM,
    }[family]
    folder = Path(MODELS.get(f"tiny-{kind}").path)
    model = auto.from_pretrained(folder, attn_implementation="eager", local_files_only=True)
    model.eval()
    projections = output_projections(kind, model)
    heads = model.config.num_attention_heads if kind != "t5" else model.config.num_heads
    gates: dict[str, list[torch.Tensor]] = {}
    hooks = []
    for block, layers in projections.items():
        gates[block] = []
        for index, projection in enumerate(layers):
            xi = torch.tensor(
                [0.0 if (block, index, h) in off else 1.0 for h in range(heads)],
                requires_grad=True,
            )
            gates[block].append(xi)

            def gate(_m: Any, args: tuple[Any, ...], xi: torch.Tensor = xi) -> tuple[Any, ...]:
                x = args[0]
                x = (x.unflatten(-1, (heads, -1)) * xi[:, None]).flatten(-2)
                return (x, *args[1:])

            hooks.append(projection.register_forward_pre_hook(gate))
    inputs = {"input_ids": torch.tensor([source])}
    if target is not None:
        inputs["decoder_input_ids"] = torch.tensor([target])
    try:
        out = model(**inputs, output_attentions=True)
    finally:
        for hook in hooks:
            hook.remove()
    if family == "encoder-decoder":
        weights = {
            "encoder": out.encoder_attentions,
            "decoder": out.decoder_attentions,
            "cross": out.cross_attentions,
        }
    else:
        weights = {next(iter(projections)): out.attentions}
    for layers in weights.values():
        for a in layers:
            a.retain_grad()
    if family == "encoder":
        hidden = out.last_hidden_state[0]
        mean = hidden.detach().mean(dim=0)  # no padding in one input
        value = hidden[position] @ (mean / mean.norm())
    else:
        logits = out.logits[0, position]
        token_id = int(logits.argmax()) if token_id is None else token_id
        value = logits[token_id]
    value.backward()
    maps = {
        block: [(a[0].detach(), a.grad[0]) for a in layers] for block, layers in weights.items()
    }
    importance = {block: torch.stack([xi.grad.abs() for xi in g]) for block, g in gates.items()}
    return maps, importance, float(value.detach()), token_id


def chefer_rollout(layers: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """R = I; R <- R + mean_h((∇A ⊙ A)^+) R, first layer first (Chefer et al. 2021, eq. 5-6)."""
    length = layers[0][0].shape[-1]
    rollout = torch.eye(length, dtype=torch.float64)
    for a, grad in layers:
        relevance = (grad * a).clamp(min=0).mean(dim=0).double()
        rollout = rollout + relevance @ rollout
    return rollout


def inputs_of(client: TestClient, kind: str) -> tuple[list[int], list[int] | None]:
    if FAMILIES[kind] != "encoder-decoder":
        return ask_tiny(client, kind)["input_ids"][0], None
    return (
        ask_tiny(client, kind, block="encoder")["input_ids"][0],
        ask_tiny(client, kind, block="decoder")["input_ids"][0],
    )


def default_position(client: TestClient, kind: str) -> int:
    """The documented default target: an encoder's token 0, else the last output token that
    is not special (the tiny word tokenizers have no whitespace tokens): BART's decoder
    input ends with </s>, which is not explained by default."""
    if FAMILIES[kind] == "encoder":
        return 0
    block = "decoder" if FAMILIES[kind] == "encoder-decoder" else None
    special = ask_tiny(client, kind, block=block)["special_tokens_mask"][0]
    return max(i for i, s in enumerate(special) if not s)


CASES = [(kind, block) for kind in sorted(BUILDERS) for block in
         (("encoder", "decoder") if FAMILIES[kind] == "encoder-decoder"
          else ("encoder",) if FAMILIES[kind] == "encoder" else ("decoder",))]  # fmt: skip


@pytest.mark.parametrize(("kind", "block"), CASES)
def test_gradient_rollout_and_head_importance_equal_autograd_on_the_eager_model(
    tiny_models: TestClient, kind: str, block: str
) -> None:
    source, target = inputs_of(tiny_models, kind)
    rolled = ask_tiny(tiny_models, kind, method="grad_rollout", block=block)
    important = ask_tiny(tiny_models, kind, method="head_importance", block=block)
    position = default_position(tiny_models, kind)
    maps, importance, value, token_id = reference(
        kind, rolled, source, target, position=position, token_id=None
    )
    for data in (rolled, important):
        assert data["target"]["index"] == position
        assert data["target"]["token_id"] == token_id
        assert data["target"]["value"] == pytest.approx(value, rel=1e-5)
    # The weights are still the maps; the method's quantity comes beside them.
    assert rolled["method"] == "grad_rollout" and rolled["rollout"] is not None
    expected = chefer_rollout(maps[block])
    got = torch.tensor(rolled["method_map"][0], dtype=torch.float64)
    assert got.shape == expected.shape
    assert_close(got, expected, minus=torch.eye(len(expected), dtype=torch.float64))
    assert_close(torch.tensor(important["head_importance"]), importance[block])
    assert important["method_map"] is None and rolled["head_importance"] is None


def test_cross_attention_heads_and_a_chosen_target(tiny_models: TestClient) -> None:
    source, target = inputs_of(tiny_models, "bart")
    assert target is not None
    data = ask_tiny(
        tiny_models, "bart", method="head_importance", block="cross", target_index=1,
        target_token_id=7,
    )  # fmt: skip
    _, importance, value, _ = reference("bart", data, source, target, position=1, token_id=7)
    assert data["target"] == {**data["target"], "index": 1, "token_id": 7, "kind": "logit"}
    assert data["target"]["value"] == pytest.approx(value, rel=1e-5)
    assert_close(torch.tensor(data["head_importance"]), importance["cross"])


@pytest.mark.parametrize("kind", ["llama", "bert"])
def test_switched_off_heads_have_gate_zero_and_a_first_order_importance(
    tiny_models: TestClient, kind: str
) -> None:
    """With ablate, those heads' gates are 0: the model is the ablated one, and their
    importance is how much the target would move if they came back on."""
    block = FAMILIES[kind]
    source, _ = inputs_of(tiny_models, kind)
    off = [[0, 1], [1, 2]]
    data = ask_tiny(tiny_models, kind, method="grad_rollout", ablate=off, target_index=2)
    heads = ask_tiny(tiny_models, kind, method="head_importance", ablate=off, target_index=2)
    maps, importance, value, _ = reference(
        kind, data, source, None, position=2, token_id=None,
        off=frozenset((block, layer, head) for layer, head in off),
    )  # fmt: skip
    assert data["target"]["value"] == pytest.approx(value, rel=1e-5)
    expected = chefer_rollout(maps[block])
    assert_close(torch.tensor(data["method_map"][0]), expected, minus=torch.eye(len(expected)))
    assert_close(torch.tensor(heads["head_importance"]), importance[block])
    assert min(importance[block][layer, head].item() for layer, head in off) > 0
    intact = ask_tiny(tiny_models, kind, method="head_importance", target_index=2)
    assert intact["target"]["value"] != pytest.approx(value, rel=1e-6)


def test_method_rollout_is_the_rollout_field(tiny_models: TestClient) -> None:
    one = ask_tiny(tiny_models, "llama", method="rollout")
    assert one["method_map"] == one["rollout"] and one["rollout"] is not None
    body = {"model": "tiny-llama", "texts": TEXTS, "method": "rollout"}
    batch = tiny_models.post(URL, json=body).json()
    assert batch["method_map"] == batch["rollout"] and len(batch["rollout"]) == 2
    stream = tiny_models.post(URL + "/layers", json={**body, "sequence_index": 0})
    end = next(line for line in stream.iter_lines() if '"end"' in line)
    assert '"method_map"' in end


def test_gradient_methods_refuse_what_they_cannot_do(
    tiny_models: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    bert = {"model": "tiny-bert", "texts": TEXTS[:1], "sequence_index": 0}
    t5 = {"model": "tiny-t5", "texts": TEXTS[:1], "targets": TARGETS[:1], "sequence_index": 0}
    refused = [
        ({"model": "tiny-bert", "texts": TEXTS, "method": "grad_rollout"}, "method",
         "sequence_index"),
        ({"model": "tiny-bert", "texts": TEXTS, "target_index": 0}, "target_index",
         "sequence_index"),
        ({**bert, "target_index": 1}, "target_index", "grad_rollout"),
        ({**bert, "method": "norm", "target_token_id": 1}, "target_token_id", "norm"),
        ({**bert, "method": "head_importance", "target_index": 40}, "target_index", "40"),
        ({**bert, "method": "grad_rollout", "target_token_id": 3}, "target_token_id",
         "embedding"),
        ({**t5, "method": "grad_rollout", "target_token_id": 10**6}, "target_token_id",
         "vocabulary"),
        ({**t5, "method": "grad_rollout", "block": "cross"}, "block", "cross"),
        ({**t5, "method": "rollout", "block": "cross"}, "block", "cross"),
        ({**bert, "method": "grad_rollout", "merge_words": True}, "merge_words", "weights"),
    ]  # fmt: skip
    for body, field, words in refused:
        response = tiny_models.post(URL, json=body)
        assert response.status_code == 422, (body, response.text)
        detail = response.json()["detail"][0]
        assert detail["loc"][-1] == field and words in detail["msg"], (body, detail)
    import attnviz.pretrained.gradients as gradients

    monkeypatch.setattr(gradients, "MAX_GRADIENT_CELLS", 100)
    response = tiny_models.post(URL, json={**bert, "method": "head_importance"})
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"][-1] == "texts" and "100" in detail["msg"]
