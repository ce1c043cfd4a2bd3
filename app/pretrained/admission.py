"""What a one-input request will cost, checked before anything runs.

Every option of a one-input request that names a position, a layer or a head, and every
method's own bound, can be checked from the model's config and the tokenised lengths
alone: nothing has to run first. :func:`check_options` does it, so that a 4,000-token
text with ``layer_index`` 99 is refused in milliseconds rather than after a forward pass
of seconds. :func:`estimate_peak_bytes` says how much memory the request will need at
its peak, so that one that would not fit is refused before it starts
(:class:`.errors.InputTooLargeError`, a 413 naming the field, with the estimate and the
limit).

With generation (``max_new_tokens``), the lengths are the prompt's plus the most tokens
that can be added: generation may stop early, at the end-of-sequence token, and then
the exact length is checked again before the recorded pass (:func:`check_positions`).
"""

from __future__ import annotations

import functools
from typing import Final

import torch

from ..attention.errors import AttentionInputError, InputTooLargeError
from ..attention.rollout import MAX_ROLLOUT_TOKENS
from .blocks import Block
from .computing import OBSERVED_CHUNK_FLOATS, QUERY_CHUNK, chunk_rows
from .gradients import gradient_cells
from .lengths import InputLengths
from .maps import FULL_SUM_CELLS, MAX_AVERAGE_SIZE
from .mask_rules import DENSE_MASK_CELLS
from .methods import STATE_METHODS, check_method_bounds, method_spec
from .model import PretrainedModel, output_attentions_note

FLOAT_BYTES: Final = 4
"""Bytes of one float32 number: the maps, whatever the model's dtype, are float32."""
EAGER_COPIES: Final = 4
"""How many copies of one chunk of weights (rows of every head of a layer) the model's
eager attention holds at once (scores, the masked scores, their softmax, the float32 copy
returned)."""
WORKING_BYTES: Final = 256 * 2**20
"""What a request needs beyond the terms of :func:`estimate_peak_bytes`: the allocator's
slack, the framework's buffers, the response being encoded (measured: about 110 MiB)."""
FORWARD_COPIES: Final = 1
"""How many (H, L_q, L_k) score tensors a forward pass may hold at once in one layer: one
where PyTorch's attention takes its math path (measured on the CPU, its blocked kernel
holds far less: SmolLM2's recorded pass at 4,032 tokens grew RSS by 602 MiB, 505 of them
the recording)."""


def _index(field: str, value: int | None, bound: int, what: str) -> None:
    if value is not None and not 0 <= value < bound:
        raise AttentionInputError(field, f"{value} is not below {bound} ({what})")


def check_options(
    model: PretrainedModel,
    block: Block,
    lengths: InputLengths,
    *,
    layer_index: int | None = None,
    head_index: int | None = None,
    query_index: int | None = None,
    ablate: list[list[int]] | None = None,
    method: str = "attention",
    target_index: int | None = None,
    target_token_id: int | None = None,
    neuron: bool = False,
) -> None:
    """Refuse any index out of range, and any method over its bound, before running.

    Args:
        model: the model (its config gives the layers, heads and vocabulary).
        block: the block the maps are of.
        lengths: what the input will hold when it runs.
        layer_index, head_index, query_index, ablate, method, target_index,
            target_token_id, neuron: the request's options of these names.

    Raises:
        AttentionInputError: naming the field: a layer, head, position or token id out of
            range; (``texts``) an input over a method's bound
            (:func:`.methods.check_method_bounds`); (``max_new_tokens``) generation asked of
            a model that does not generate; (``method``, ``neuron``, ``ablate``) what
            needs query, key or value states, of a model drawn from its
            ``output_attentions`` (:data:`.methods.STATE_METHODS`).
    """
    if model.attention_path == "output_attentions":
        asked = [
            (field, what)
            for field, what, wanted in (
                ("method", f"method {method!r}", method in STATE_METHODS),
                ("neuron", "the neuron view", neuron),
                ("ablate", "heads off", bool(ablate)),
            )
            if wanted
        ]
        if asked:
            field, what = asked[0]
            raise AttentionInputError(
                field, f"{what} is not available: {output_attentions_note(model.name, model.model)}"
            )
    layers, heads = model.block_layers(block), model.block_heads(block)
    len_q = lengths.queries(block)
    if lengths.new_tokens and not model.spec.generates:
        raise AttentionInputError(
            "max_new_tokens", f"{model.name} is {model.described}; generation is for decoders"
        )
    _index("layer_index", layer_index, layers, f"{model.name}'s {block} layers")
    _index("head_index", head_index, heads, f"{model.name}'s heads per layer")
    generated = " with the new tokens" if lengths.new_tokens else ""
    _index("query_index", query_index, len_q, f"the input's tokens{generated}")
    for layer, head in ablate or []:
        if not 0 <= layer < layers:
            raise AttentionInputError(
                "ablate", f"layer {layer} is not below {layers} ({model.name}'s {block} layers)"
            )
        if not 0 <= head < heads:
            raise AttentionInputError(
                "ablate", f"head {head} is not below {heads} ({model.name}'s heads per layer)"
            )
    _index("target_index", target_index, lengths.outputs, f"the output tokens{generated}")
    if target_token_id is not None and model.spec.gradient_target != "logit":
        raise AttentionInputError(
            "target_token_id",
            f"{model.name} is {model.described}: its target is an embedding score, not a logit",
        )
    _index("target_token_id", target_token_id, model.vocab_size, "the vocabulary")
    check_method_bounds(model, method, block, lengths, layers=layers, layer_index=layer_index)


def check_positions(
    lengths: InputLengths,
    *,
    query_index: int | None = None,
    target_index: int | None = None,
) -> None:
    """After generation: the positions asked for against the exact length.

    Generation may stop early at the end-of-sequence token, so the input can be
    shorter than the prompt + ``max_new_tokens`` that :func:`check_options` allowed for.

    Raises:
        AttentionInputError: (field ``query_index`` / ``target_index``) beyond the tokens.
    """
    what = f"the prompt and the {lengths.new_tokens} tokens generated"
    _index("query_index", query_index, lengths.total, what)
    _index("target_index", target_index, lengths.outputs, what)


def head_dim(model: PretrainedModel) -> int:
    """d_k: the config's ``head_dim`` where it has one, else d_model / H.

    Qwen3-0.6B's is 128, with d_model 1024 and 16 heads.
    """
    value = getattr(getattr(model, "config", None), "head_dim", None)
    if isinstance(value, int) and value > 0:
        return value
    return model.d_model // max(1, model.num_heads)


def _position_bias(model: PretrainedModel) -> bool:
    """Whether the model adds a relative position bias (H, L_q, L_k) to its scores (T5)."""
    config = getattr(model, "config", None)
    return getattr(config, "relative_attention_num_buckets", None) is not None


def recording_bytes(model: PretrainedModel, lengths: InputLengths) -> int:
    """Bytes one recorded pass keeps: every layer's query, key and value states, the masks.

    A model drawn from its ``output_attentions`` keeps every layer's weights instead:
    N x H x L_q x L_k per block, in its dtype and as float32.

    N x (H + 2 H_kv) x L x d_k numbers per block, plus one (L_q, L_k) float mask per block
    (transformers builds one and hands it to every layer; past
    :data:`.mask_rules.DENSE_MASK_CELLS` it is its rule alone), plus T5's position bias
    (H, L_q, L_k) per block, which its layers share too; each number in the model's dtype
    (2 bytes in bfloat16 or float16, 4 in float32).
    """
    total = 0
    if model.attention_path == "output_attentions":
        # every layer's weights at once: the model's output, and the float32 copy kept
        for block in model.blocks:
            area = lengths.queries(block) * lengths.keys(block)
            cells = model.block_layers(block) * model.block_heads(block) * area
            total += cells * (dtype_bytes(model) + FLOAT_BYTES)
        return total
    d_k = head_dim(model)
    for block in model.blocks:
        len_q, len_k = lengths.queries(block), lengths.keys(block)
        heads = model.block_heads(block)
        kv_heads = model.block_kv_heads(block)
        per_layer = (heads * len_q + 2 * kv_heads * len_k) * d_k
        area = len_q * len_k
        total += model.block_layers(block) * per_layer + (area if area <= DENSE_MASK_CELLS else 0)
        if _position_bias(model):
            total += heads * len_q * len_k
    return total * dtype_bytes(model)


def kept_bytes(model: PretrainedModel, lengths: InputLengths) -> int:
    """Bytes one pass kept for tiles holds (:mod:`.tiles`): q, k and each row's LSE.

    N x (H x L_q + H_kv x L_k) x d_k numbers per block in the model's dtype, and N x H x L_q
    float32 log-sum-exps, plus T5's position bias (H, L_q, L_k) per block, which its layers
    share; no value states, no mask (a rule). SmolLM2 (float32) at 1,844 tokens: 170 MB;
    at 8,192, 755 MB (bfloat16: 386 MB).
    """
    d_k = head_dim(model)
    total = 0
    for block in model.blocks:
        len_q, len_k = lengths.queries(block), lengths.keys(block)
        heads = model.block_heads(block)
        kv_heads = model.block_kv_heads(block)
        states = (heads * len_q + kv_heads * len_k) * d_k * dtype_bytes(model)
        total += model.block_layers(block) * (states + heads * len_q * FLOAT_BYTES)
        if _position_bias(model):
            total += heads * len_q * len_k * dtype_bytes(model)
    return total


def dtype_bytes(model: PretrainedModel) -> int:
    """Bytes of one number in the model's dtype (float32 for a model that does not say)."""
    dtype = getattr(model, "dtype", None)
    return int(dtype.itemsize) if isinstance(dtype, torch.dtype) else FLOAT_BYTES


def device_free_bytes(device: torch.device) -> int | None:
    """Free memory of a CUDA device (``torch.cuda.mem_get_info``), None for the CPU's."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return int(free)


def estimate_peak_bytes(
    model: PretrainedModel,
    lengths: InputLengths,
    *,
    block: Block,
    runs: int = 1,
    display_size: int | None = None,
    method: str = "attention",
    observed: bool = False,
    recorded: bool = True,
    kept: bool = False,
    layer_index: int | None = None,
    head_index: int | None = None,
) -> int:
    """The memory a one-input request needs at its peak, above the idle server, in bytes.

    The recorded passes (``runs``: 2 with ablation, :func:`recording_bytes`) are held
    throughout; on top of them, the largest of the phases that follow one another, each
    term an upper bound:

    * the forward pass (generating, or recording): one chunk of a layer's scores, H x
      min(L_q, :data:`.computing.QUERY_CHUNK`) x L_k x :data:`FORWARD_COPIES` (T5's bias
      added to the mask: a whole layer's), and generation's key/value cache,
      N x 2 x H_kv x L x d_k;
    * the view: one chunk of a layer's rows, every head, through the model's eager
      attention (:class:`.display.WalkObserver`, about
      :data:`.computing.OBSERVED_CHUNK_FLOATS` weights) x :data:`EAGER_COPIES`, what the view
      keeps for the whole input (the layer sum, L_q x L_k up to
      :data:`.maps.FULL_SUM_CELLS` and :data:`.maps.MAX_AVERAGE_SIZE` squared past it;
      rollout's, L_q x L_k up to its 2,048 tokens; every layer's shown maps, pooled to
      ``display_size``) and one chunk of logits (256 x vocab);
    * a gradient method's pass (``method``): every layer's weights, their gradients and
      what autograd saves, 3 x N x H x L_q x L_k over the blocks;

    plus :data:`WORKING_BYTES` for the allocator and the framework.

    An ``observed`` request (the streamed grid computed during the pass,
    :class:`.display.WalkObserver`) has no view phase of its own: its forward pass holds
    one chunk of a layer's weights, :data:`.computing.OBSERVED_CHUNK_FLOATS` x
    :data:`EAGER_COPIES`, plus what the view keeps; without ``recorded`` (a recording
    larger than the recording cache is not made) only the mask is held, not the states.
    A pass ``kept`` for tiles holds :func:`kept_bytes` on top (its q and k are the
    recording's when it records too: counted once).

    Checked against measured peak RSS growth (benchmarks/hostile.py): SmolLM2 at 4,032
    + 64 tokens, streamed grid at display_size 64, is estimated at 1.7 GiB and grew the
    server by 1.4 GiB.
    """
    len_q, len_k = lengths.queries(block), lengths.keys(block)
    heads = model.block_heads(block)
    source_q, source_k = lengths.queries(model.blocks[0]), lengths.keys(model.blocks[0])
    bias = heads * source_q * source_k if _position_bias(model) else 0
    forward = heads * min(source_q, QUERY_CHUNK) * source_k * FORWARD_COPIES + bias
    if lengths.new_tokens:
        kv = model.num_key_value_heads
        forward += model.num_layers * 2 * kv * lengths.total * head_dim(model)
    # the view replays each layer in chunks of rows, every head at once (WalkObserver)
    eager = chunk_floats(heads, len_q, len_k) * EAGER_COPIES
    side_q = len_q if display_size is None else min(len_q, display_size)
    side_k = len_k if display_size is None else min(len_k, display_size)
    # the shown maps: every layer or layer_index's, every head or head_index's, and each
    # shown layer's head mean (pooled to MAX_AVERAGE_SIZE for one head at full size)
    shown_layers = model.block_layers(block) if layer_index is None else 1
    shown_heads = heads if head_index is None else 1
    mean_q, mean_k = side_q, side_k
    if head_index is not None and display_size is None:
        mean_q, mean_k = min(len_q, MAX_AVERAGE_SIZE), min(len_k, MAX_AVERAGE_SIZE)
    shown = shown_layers * (shown_heads * side_q * side_k + mean_q * mean_k)
    area = len_q * len_k
    sums = area if area <= FULL_SUM_CELLS else MAX_AVERAGE_SIZE**2
    if len_q <= MAX_ROLLOUT_TOKENS:
        sums += area
    view_sums = sums + shown
    logits = 256 * model.vocab_size if model.spec.reads_text_output else 0
    view = eager + view_sums + logits
    if observed:  # the view is built during the pass, a chunk at a time
        forward = max(forward, eager) + view_sums
        view = logits
    gradients = 0
    if method_spec(method).gradient:
        gradients = 3 * gradient_cells(model, lengths.total, lengths.target)
    phases = max(forward, view, gradients)
    whole = recorded or model.attention_path == "output_attentions"  # its pass holds them all
    held = runs * recording_bytes(model, lengths) if whole else _mask_bytes(model, lengths)
    if kept and not whole:
        held += kept_bytes(model, lengths)
    return held + phases * FLOAT_BYTES + WORKING_BYTES


def chunk_floats(heads: int, len_q: int, len_k: int) -> int:
    """The most weights one chunk of a layer's rows holds (:class:`.display.WalkObserver`).

    :func:`.computing.chunk_rows` of :data:`.computing.OBSERVED_CHUNK_FLOATS`, every head. Merged
    into words, a chunk runs on to the end of its last word (not counted: a word is a few
    pieces).
    """
    rows = chunk_rows(len_q, heads * len_k, OBSERVED_CHUNK_FLOATS)
    return heads * min(len_q, rows) * len_k


def _mask_bytes(model: PretrainedModel, lengths: InputLengths) -> int:
    """The masks (and T5's position bias) a pass holds without a recording, in bytes.

    A mask of more than :data:`.mask_rules.DENSE_MASK_CELLS` is its rule alone (nothing).
    """
    total = 0
    for block in model.blocks:
        area = lengths.queries(block) * lengths.keys(block)
        mask = area if area <= DENSE_MASK_CELLS else 0
        total += mask + (area * model.block_heads(block) if _position_bias(model) else 0)
    return total * FLOAT_BYTES


def check_memory(
    model: PretrainedModel,
    lengths: InputLengths,
    limit: int,
    *,
    block: Block,
    runs: int = 1,
    display_size: int | None = None,
    method: str = "attention",
    observed: bool = False,
    recorded: bool = True,
    kept: bool = False,
    free_bytes: int | None = None,
    device: str = "",
    layer_index: int | None = None,
    head_index: int | None = None,
) -> int:
    """Refuse a request whose :func:`estimate_peak_bytes` is over ``limit`` bytes.

    ``free_bytes``, when given (the free memory of the GPU the model runs on,
    :func:`device_free_bytes`), is a second limit, named in the message with ``device``.

    Returns:
        The estimate, in bytes.

    Raises:
        InputTooLargeError: (413) naming ``max_new_tokens`` when the prompt alone would
            fit, else ``texts``; the message has the estimate and the limit (and which).
    """
    estimate = functools.partial(
        estimate_peak_bytes, model, block=block, runs=runs, display_size=display_size,
        method=method, observed=observed, recorded=recorded, kept=kept,
        layer_index=layer_index, head_index=head_index,
    )  # fmt: skip
    needed = estimate(lengths)
    bound = limit if free_bytes is None else min(limit, free_bytes)
    if needed <= bound:
        return needed
    alone = InputLengths(lengths.source, lengths.target)
    field = "max_new_tokens" if lengths.new_tokens and estimate(alone) <= bound else "texts"
    over = (
        f"over the {_size(bound)} free on {device or 'the device'}"
        if bound < limit
        else f"over the limit of {_size(limit)} (ATTNVIZ_MAX_REQUEST_BYTES)"
    )
    raise InputTooLargeError(
        field,
        f"this request would need about {_size(needed)} of memory at its peak "
        f"({lengths.total} tokens through {model.name}), {over}; use a shorter text"
        + (" or fewer new tokens" if lengths.new_tokens else ""),
    )


def _size(count: int) -> str:
    """Bytes as MiB (KiB under 1 MiB), for messages."""
    if count < 2**20:
        return f"{count / 1024:,.0f} KiB"
    return f"{count / 2**20:,.0f} MiB"
