"""Value zeroing: how much each token's output in a layer depends on each other token.

Mohebbi, Zuidema, Chrupała and Alishahi, "Quantifying Context Mixing in Transformers",
EACL 2023, section 2: in layer l, token j's value vector is set to zero in every head
(so nothing of j reaches any token through that layer's attention, while j still takes
its part in every softmax), the rest of the layer runs as it is (output projection,
residual connections, normalisation, feed-forward), and each token i's new output x̃_i^¬j
is compared with its output x̃_i:

    C_ij = 1 − cos(x̃_i^¬j, x̃_i),

each row then divided by its sum (the paper's normalised context-mixing map). A row
sums to 1 unless zeroing any one value changes nothing of it (then it stays 0).

Each layer is run once per key token, with the other layers' inputs as the model gave
them: the layer's inputs are caught by a forward pre-hook in one pass, then the layer alone
runs on L_k copies of them, copy b with key token b's value zeroed
(:func:`.recorder.zero_values`), a chunk of copies at a time. That is N x L_k layer passes
over L_q tokens, bounded by :data:`MAX_VALUE_ZEROING_WORK`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import torch
from torch import nn

from ..attention.errors import AttentionInputError
from .recorder import ablate_heads, zero_values

if TYPE_CHECKING:
    from .blocks import Block
    from .model import PretrainedModel
    from .results import PretrainedAttentions

MAX_VALUE_ZEROING_WORK: Final = 2**17
"""Value zeroing runs N x L_k layer passes over L_q tokens; the API computes it while
N x L_q x L_k stays within this (131,072; about 5 s for MiniLM on this 2-core machine):
up to 147 tokens through MiniLM's 6 layers, 66 through SmolLM2's 30."""

COPIES_PER_CALL: Final = 32
"""Copies of a layer's input run in one call (its activations: 32 x L x d_ff floats)."""


def value_zeroing_limit(num_layers: int) -> int:
    """The longest input whose value zeroing the API computes through ``num_layers`` layers."""
    return int((MAX_VALUE_ZEROING_WORK / max(1, num_layers)) ** 0.5)


def check_value_zeroing_work(layers: int, length_q: int, length_k: int, note: str = "") -> None:
    """Refuse a block whose value zeroing would exceed :data:`MAX_VALUE_ZEROING_WORK`.

    Args:
        layers, length_q, length_k: the block's N, L_q and L_k.
        note: said after the input's length (" with the new tokens").

    Raises:
        AttentionInputError: (field ``texts``) N x L_q x L_k over the bound.
    """
    if layers * length_q * length_k > MAX_VALUE_ZEROING_WORK:
        raise AttentionInputError(
            "texts",
            f"value zeroing reruns each of the {layers} layers once per token: up to "
            f"{value_zeroing_limit(layers)} tokens for this block, and this input has "
            f"{max(length_q, length_k)}{note}",
        )


def layers_of(root: nn.Module, modules: list[nn.Module]) -> list[nn.Module]:
    """The transformer layer that holds each attention module: its ancestor in a ModuleList.

    The outermost such ancestor: a T5 block (in ``encoder.block``), not its self-attention
    sublayer (in the block's own ``layer`` list). The model's tree is walked once.

    Raises:
        AttentionInputError: (field ``method``) a module with no ancestor in a ModuleList.
    """
    parents: dict[int, nn.Module] = {}
    for parent in root.modules():
        for child in parent.children():
            parents[id(child)] = parent
    layers = []
    for module in modules:
        found = None
        current = module
        while id(current) in parents:  # the outermost list: T5's blocks, not a block's sublayers
            parent = parents[id(current)]
            if isinstance(parent, nn.ModuleList):
                found = current
            current = parent
        if found is None:
            raise AttentionInputError(
                "method",
                f"value zeroing reruns the layer that holds {type(module).__name__}, and "
                "AttnViz finds none (no ModuleList of layers above it)",
            )
        layers.append(found)
    return layers


def value_zeroing(
    model: PretrainedModel,
    result: PretrainedAttentions,
    block: Block,
    *,
    device: str = "auto",
    ablate: dict[int, tuple[int, ...]] | None = None,
) -> torch.Tensor:
    """Value zeroing of every layer of ``block`` for the one input of ``result``.

    Args:
        model: the model that ran ``result``.
        result: a recorded pass of one input (B = 1).
        block: "encoder", "decoder" or "cross" (zeroing the encoder tokens' values in the
            cross attention, the targets' outputs compared).
        device: where the layers run, as :meth:`.model.PretrainedModel.run`.
        ablate: the heads ``result`` ran with switched off (:func:`.recorder.ablate_heads`),
            off again in every rerun.

    Returns:
        (N, L_q, L_k) float32 on the CPU: layer l's normalised C_ij.

    Raises:
        AttentionInputError: (field ``texts``) over :data:`MAX_VALUE_ZEROING_WORK`;
            (``method``) a model whose layers AttnViz cannot rerun alone.
    """
    calls = [result.recording.calls[i] for i in result.block_calls[block]]
    length_q, length_k = int(calls[0].query.shape[2]), int(calls[0].key.shape[2])
    check_value_zeroing_work(len(calls), length_q, length_k)
    run_on, network = model.placed_on(device)
    layers = layers_of(network, [call.module for call in calls])
    maps = []
    with ablate_heads(ablate), torch.inference_mode():
        inputs = _layer_inputs(model, network, result, layers, run_on)
        for call, layer in zip(calls, layers, strict=True):
            args, kwargs = inputs[id(layer)]
            # float64 for the cosines: 1 - cos of near-equal float32 vectors keeps 1e-7.
            original = _output(layer(*args, **kwargs))[0].double()  # (L_q, d_model)
            scores = torch.empty((length_q, length_k), dtype=torch.float64)
            for first in range(0, length_k, COPIES_PER_CALL):
                tokens = torch.arange(first, min(length_k, first + COPIES_PER_CALL))
                copies = len(tokens)
                with zero_values(call.module, tokens):
                    changed = _output(
                        layer(*_expanded(args, copies), **_expanded(kwargs, copies))
                    ).double()  # (copies, L_q, d_model)
                cosine = nn.functional.cosine_similarity(changed, original[None], dim=-1)
                scores[:, first : first + copies] = (1 - cosine).t().cpu()
            scores = scores.clamp_min(0)
            totals = scores.sum(dim=1, keepdim=True)
            maps.append(torch.where(totals > 0, scores / totals.clamp_min(1e-30), 0.0).float())
    return torch.stack(maps)


def _layer_inputs(
    model: PretrainedModel,
    network: nn.Module,
    result: PretrainedAttentions,
    layers: list[nn.Module],
    device: torch.device,
) -> dict[int, tuple[tuple[Any, ...], dict[str, Any]]]:
    """Each layer's positional and keyword arguments in one forward pass of the input."""
    caught: dict[int, tuple[tuple[Any, ...], dict[str, Any]]] = {}

    def catch(layer: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        caught.setdefault(id(layer), (args, dict(kwargs)))

    hooks = [layer.register_forward_pre_hook(catch, with_kwargs=True) for layer in layers]
    inputs = model.forward_inputs(result.batch, result.targets, device)
    try:
        network(**inputs, use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
    return caught


def _expanded(value: Any, copies: int) -> Any:
    """``value`` with each tensor of batch 1 (2 or more dims) expanded to batch ``copies``.

    The expansion is a view; tuples, lists and dicts of tensors are expanded likewise.
    """
    if isinstance(value, torch.Tensor):
        if value.dim() >= 2 and value.shape[0] == 1:
            return value.expand(copies, *value.shape[1:])
        return value
    if isinstance(value, tuple):
        return tuple(_expanded(item, copies) for item in value)
    if isinstance(value, list):
        return [_expanded(item, copies) for item in value]
    if isinstance(value, dict):
        return {key: _expanded(item, copies) for key, item in value.items()}
    return value


def _output(output: Any) -> torch.Tensor:
    """A layer's hidden states (B, L, d_model): the output, or its first item."""
    while isinstance(output, (tuple, list)):
        output = output[0]
    if not isinstance(output, torch.Tensor):
        raise AttentionInputError("method", "value zeroing: a layer gave no hidden states")
    return output
