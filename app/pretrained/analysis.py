"""One input's analysis of a pretrained model: its options, limits and checks.

What POST /api/v1/models/attention (with ``sequence_index``) and its streamed grid do
between tokenising and answering, with no HTTP in it: the request's options arrive as a
plain :class:`ViewOptions`, the server's limits as :class:`Limits`, and every refusal is
an :class:`~attnviz.attention.errors.AttentionInputError` naming the request's field (the
server answers 422, or 413 for :class:`~attnviz.attention.errors.InputTooLargeError`).
Shapes: N layers, H heads, L_q x L_k one input's maps, P_q x P_k pooled. The view itself is
planned and run by :mod:`.view_plan`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import torch

from ..attention.errors import AttentionInputError, InputTooLargeError, too_many_numbers
from .blocks import Block
from .display import LayerWalk
from .gradients import GradientPass
from .lengths import InputLengths
from .maps import MAX_AVERAGE_SIZE
from .methods import (
    GRADIENT_METHODS,
    ONE_INPUT_METHODS,
    Method,
    method_spec,
)
from .model import PretrainedModel
from .neuron import Neuron
from .recordings import RecordingCache
from .results import Generation, PretrainedAttentions
from .tokens import TokenizedBatch

ONE_INPUT_OPTIONS: Final = (
    "hide_special_tokens",
    "merge_words",
    "neuron",
    "layer_index",
    "head_index",
    "display_size",
    "query_index",
    "max_new_tokens",
    "top_k",
    "ablate",
)
"""Request options that apply to one input, so need sequence_index."""
TARGET_OPTIONS: Final = ("target_index", "target_token_id")
"""Request options that choose a gradient method's target."""
ABLATION_TOP: Final = 5
"""Next tokens shown before and after an ablation, per position."""


@dataclass(frozen=True)
class ViewOptions:
    """What a request asks of one input, as the fields of POST /api/v1/models/attention.

    Attributes:
        sequence_index: which input of the batch (None: the whole batch).
        device: "auto", "cpu" or "cuda".
        method: "attention" (the softmax weights) or a method of :mod:`.methods`.
        layer_index: one layer's heads, else every layer.
        head_index: with ``layer_index``, one head at full size.
        query_index: one query position's rows in every layer and head.
        display_size: pool each map to at most this side (block max), else full size.
        hide_special_tokens: leave the tokenizer's special tokens out of the maps.
        merge_words: one row and column per word (pieces summed over keys, averaged
            over queries).
        neuron: one query's step through one head (q, k, scores, weights).
        top_k: next-token candidates per position (decoders).
        ablate: ``[[layer, head], ...]`` switched off for a second pass.
        max_new_tokens: tokens a decoder generates first (0: none).
        temperature: 0 greedy, above 0 sampling.
        seed: the sampling's seed.
        target_index: a gradient method's output position.
        target_token_id: a gradient method's target token.
    """

    sequence_index: int | None = None
    device: str = "auto"
    method: Method = "attention"
    layer_index: int | None = None
    head_index: int | None = None
    query_index: int | None = None
    display_size: int | None = None
    hide_special_tokens: bool = False
    merge_words: bool = False
    neuron: bool = False
    top_k: int = 0
    ablate: list[list[int]] | None = None
    max_new_tokens: int = 0
    temperature: float = 0.0
    seed: int = 0
    target_index: int | None = None
    target_token_id: int | None = None


@dataclass(frozen=True)
class Limits:
    """The server's bounds on one request (ATTNVIZ_MAX_SEQ_LEN, _MAX_WEIGHT_CELLS, ...).

    Attributes:
        max_seq_len: tokens of one input, prompt + new tokens; None: the model's positions.
        max_weight_cells: numbers one response carries.
        max_request_bytes: memory one request may take, in bytes.
    """

    max_seq_len: int | None
    max_weight_cells: int
    max_request_bytes: int


@dataclass(frozen=True)
class PreparedSequence:
    """One input checked and run (or taken from the recording cache), its view not yet run.

    Attributes:
        walk: the view run: its shown layers (``walk.layers()``), then its summary
            (``walk.summary()``: the whole view and the pass walked).
        result: the recorded forward pass of the input (prompt + generated tokens) when it
            ran before the view; None when the walk runs it, observed (the summary has it).
        device: where the pass runs ("cpu", "cuda", "cuda:1", ...).
        generation: what a decoder generated first, else None.
        query_rows: (N, H, L_k) the rows of query_index, else None.
        neuron: with ``neuron``, the step through the head, else None.
        summed_norm: with method "norm" and layer_index, (1, P_q, P_k) the layer's
            ‖Σ_h α f(x)‖ pooled as the head means, else None.
        method_map: with method "flow" or "grad_rollout", (1, L, L); "value_zeroing",
            (N, L_q, L_k); else None ("rollout" takes the view's). Flow over its bound:
            (1, W, W) of positions ``method_window``.
        ablation: with ablate, what switching the heads off changed (``ablation_fields``).
        gradients: with a gradient method, its backward pass, else None.
    """

    walk: LayerWalk
    result: PretrainedAttentions | None
    device: str
    generation: Generation | None
    query_rows: torch.Tensor | None
    neuron: Neuron | None = None
    summed_norm: torch.Tensor | None = None
    method_map: torch.Tensor | None = None
    ablation: dict[str, Any] | None = None
    gradients: GradientPass | None = None
    method_window: tuple[int, int] | None = None


def needs_states(options: ViewOptions) -> bool:
    """Whether a view needs a recorded pass's states (value states).

    Heads switched off and the methods that compute from the pass (norm, value zeroing,
    the gradients) do; the other views, the neuron view's q, k and weights among them, are
    tiles of a pass kept for them (:mod:`.tiles`), which holds no value states.
    """
    spec = method_spec(options.method)
    return bool(options.ablate) or spec.compute is not None or spec.per_head


def observed_pass(
    model: PretrainedModel,
    batch: TokenizedBatch,
    targets: TokenizedBatch | None,
    device: str,
    recordings: RecordingCache,
    *,
    record: bool,
    keep: bool = False,
) -> Callable[[Any], PretrainedAttentions]:
    """The forward pass a walk runs and observes (:meth:`.display.LayerWalk.layers`).

    With ``record`` (the states fit the recording cache) the pass records the query,
    key and value states too, so that a later click reuses them; with ``keep``, it is
    kept for tiles (q, k, each row's LSE: :mod:`.tiles`), so that a later view reuses it.
    """

    def run(observer: Any) -> PretrainedAttentions:
        return recordings.observed(
            model, batch, targets, observer, device=device, record=record, keep=keep
        )

    return run


def check_view_options(options: ViewOptions, block: Block | None = None) -> None:
    """Refuse options that contradict each other, whatever the model (422 naming one).

    The request schema runs these rules when it validates a request body; the view runs
    them again for a caller that builds :class:`ViewOptions` itself. Without
    ``sequence_index``, the one-input options are refused; with it, the options that
    cannot go together (``head_index`` without ``layer_index``, ``merge_words`` with
    ``query_index`` or ``top_k``, ``neuron`` without its layer, head and query or with
    hidden or merged tokens, a method other than the weights with those, a gradient
    target with another method, rollout over cross attention, ``ablate`` with hidden or
    merged tokens).

    Args:
        options: the request's options.
        block: the block asked for (None: the model's first, never cross attention).

    Raises:
        AttentionInputError: naming the field at fault.
    """
    if options.sequence_index is None:
        check_one_input_options(options)
        return
    if options.head_index is not None and options.layer_index is None:
        raise AttentionInputError("head_index", "set layer_index too")
    if options.merge_words:
        for field in ("query_index", "top_k"):
            if getattr(options, field) not in (None, 0):
                raise AttentionInputError(
                    field,
                    "counts tokens: not with merge_words (send it without merge_words)",
                )
    if options.neuron:
        for field in ("layer_index", "head_index", "query_index"):
            if getattr(options, field) is None:
                raise AttentionInputError("neuron", f"set {field} too")
        for field in ("hide_special_tokens", "merge_words"):
            if getattr(options, field):
                raise AttentionInputError(
                    field,
                    "not with neuron (its positions count every token)",
                )
    if method_spec(options.method).assumes_weights:
        for field in ("neuron", "hide_special_tokens", "merge_words"):
            if getattr(options, field):
                raise AttentionInputError(
                    field,
                    f"not with method {options.method!r} (it works on the softmax weights)",
                )
    check_method_options(options, block)
    if options.ablate:
        for field in ("hide_special_tokens", "merge_words"):
            if getattr(options, field):
                raise AttentionInputError(
                    field,
                    "not with ablate (its positions count every token)",
                )


def check_method_options(options: ViewOptions, block: Block | None) -> None:
    """Refuse what a method cannot do for this model, block and input (422 naming the field)."""
    spec = method_spec(options.method)
    for field in TARGET_OPTIONS:
        if getattr(options, field) is not None and not spec.gradient:
            raise AttentionInputError(
                field,
                f"chooses the target of method {' or '.join(map(repr, sorted(GRADIENT_METHODS)))}"
                f", not of {options.method!r}",
            )
    if spec.square_only and block == "cross":
        raise AttentionInputError(
            "block",
            f"{options.method} runs through square self-attention: not 'cross'",
        )


def ablated_modules(
    result: PretrainedAttentions, block: Block, heads: list[list[int]]
) -> dict[int, tuple[int, ...]]:
    """``[[layer, head], ...]`` of ``block`` as ``id(attention module)`` -> query heads.

    Raises:
        AttentionInputError: (field ``ablate``) a layer or head the block does not have.
    """
    layers = result.num_layers(block)
    switched: dict[int, set[int]] = {}
    for layer, head in heads:
        if layer >= layers:
            raise AttentionInputError("ablate", f"layer {layer} is not below {layers}")
        count = result.num_heads(block, layer)
        if head >= count:
            raise AttentionInputError("ablate", f"head {head} is not below {count}")
        module = result.recording.calls[result.block_calls[block][layer]].module
        switched.setdefault(id(module), set()).add(head)
    return {key: tuple(sorted(value)) for key, value in switched.items()}


def ablation_fields(
    model: PretrainedModel,
    heads: list[list[int]],
    intact: PretrainedAttentions,
    ablated: PretrainedAttentions,
) -> dict[str, Any]:
    """What switching ``heads`` off did to the output (the response's ``ablation``)."""
    fields: dict[str, Any] = {"heads": sorted({(layer, head) for layer, head in heads})}
    # The positions of the per-token fields: an encoder-decoder's targets, else the input.
    fields["tokens"] = (intact.targets or intact.batch).tokens[0]
    if intact.decoder_head is not None and ablated.decoder_head is not None:
        fields["kl"] = intact.decoder_head.divergence(ablated.decoder_head)[0].tolist()
        for name, result in (("top_before", intact), ("top_after", ablated)):
            top = result.next_tokens
            assert top is not None
            fields[name] = [
                [
                    {
                        "token": model.token_strings([int(i)])[0],
                        "id": int(i),
                        "probability": float(p),
                    }
                    for i, p in zip(ids[:ABLATION_TOP], probs[:ABLATION_TOP], strict=True)
                ]
                for ids, probs in zip(top.ids[0], top.probabilities[0], strict=True)
            ]
    if intact.final_hidden is not None and ablated.final_hidden is not None:
        before, after = intact.final_hidden[0], ablated.final_hidden[0]
        change = (after - before).norm(dim=-1) / before.norm(dim=-1).clamp_min(1e-12)
        fields["hidden_change"] = change.tolist()
    return fields


def check_one_input_options(options: ViewOptions) -> None:
    """Refuse the one-input options without sequence_index (422 naming them).

    An option is set when it differs from its default: ``layer_index`` 0 is set (the
    first layer), ``top_k`` 0 is not (no next tokens), ``ablate`` [] is not (no head).
    """
    defaults = {f.name: f.default for f in dataclasses.fields(ViewOptions)}
    for field in ONE_INPUT_OPTIONS:
        value = getattr(options, field)
        if value != defaults[field] and value != []:
            raise AttentionInputError(
                field,
                "applies to one input: set sequence_index too",
            )
    if options.method in ONE_INPUT_METHODS:
        raise AttentionInputError(
            "method",
            f"{options.method!r} is computed for one input: set sequence_index too",
        )
    for field in TARGET_OPTIONS:
        if getattr(options, field) is not None:
            raise AttentionInputError(
                field,
                "chooses a gradient method's target, for one input: set sequence_index too",
            )


def check_view_cells(
    model: PretrainedModel,
    options: ViewOptions,
    lengths: InputLengths,
    block: Block,
    limits: Limits,
) -> None:
    """Refuse a one-input response that would carry over ATTNVIZ_MAX_WEIGHT_CELLS numbers.

    Counts what is sent, after selection and pooling, not what is computed: layers
    (1 with layer_index) x heads (1 with head_index) x the shown side squared, plus
    the head means, the layer mean and rollout. With generation, at the most tokens it
    may add (checked before it runs).
    """
    len_q, len_k = lengths.queries(block), lengths.keys(block)
    side = options.display_size
    p_q, p_k = (len_q, len_k) if side is None else (min(len_q, side), min(len_k, side))
    num_layers, num_heads = model.block_layers(block), model.block_heads(block)
    layers = 1 if options.layer_index is not None else num_layers
    heads = 1 if options.head_index is not None else num_heads
    averages = 2 * min(len_q, MAX_AVERAGE_SIZE) * min(len_k, MAX_AVERAGE_SIZE)
    rows = 0 if options.query_index is None else num_layers * num_heads * len_k
    means = layers * (
        p_q * p_k
        if options.head_index is None
        else min(p_q, MAX_AVERAGE_SIZE) * min(p_k, MAX_AVERAGE_SIZE)
    )
    cells = layers * heads * p_q * p_k + means + averages + rows
    if cells > limits.max_weight_cells:
        raise too_many_numbers(
            "texts", cells, limits.max_weight_cells, "set display_size or layer_index"
        )


def check_generation_length(model: PretrainedModel, lengths: InputLengths, limits: Limits) -> None:
    """Refuse generation past ATTNVIZ_MAX_SEQ_LEN or the model's positions, before it runs.

    The prompt was checked alone (:func:`check_lengths`); with ``max_new_tokens`` the
    recorded pass covers prompt + new tokens, which must fit too.

    Raises:
        InputTooLargeError: (field ``max_new_tokens``) over ATTNVIZ_MAX_SEQ_LEN (413).
        AttentionInputError: (field ``max_new_tokens``) over the model's positions.
    """
    if not lengths.new_tokens:
        return
    if limits.max_seq_len is not None and lengths.total > limits.max_seq_len:
        room = limits.max_seq_len - lengths.source
        raise InputTooLargeError(
            "max_new_tokens",
            f"the prompt has {lengths.source} tokens and {lengths.new_tokens} new ones would "
            f"make {lengths.total}, over the limit of {limits.max_seq_len} "
            f"(ATTNVIZ_MAX_SEQ_LEN); ask for at most {max(0, room)} new tokens",
        )
    if model.max_tokens is not None and lengths.total > model.max_tokens:
        raise AttentionInputError(
            "max_new_tokens",
            f"the prompt has {lengths.source} tokens and {model.name} takes at most "
            f"{model.max_tokens} (max_position_embeddings); ask for at most "
            f"{max(0, model.max_tokens - lengths.source)} new tokens",
        )
