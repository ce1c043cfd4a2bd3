"""Record what every attention layer of a transformers model receives; any head's weights later.

``output_attentions`` materialises every layer's and head's weights at once: N * H * L**2
numbers (30 layers x 9 heads x 4096**2 float32 is 18 GB for SmolLM2 at 4096 tokens).
Instead, AttnViz registers its own function with transformers' ``AttentionInterface``
(https://huggingface.co/docs/transformers/attention_interface). Each attention call
keeps what it was given, the query and key states (after rotary embeddings), the value
states, the mask the model built, the scaling and the other keyword arguments (a sliding
window, a softcap), and computes the layer's output with PyTorch's scaled_dot_product_attention,
as the "sdpa" implementation does. The weights of one head are computed afterwards, on
demand, by the model's *own* eager attention function on that head's slice, so what is
drawn is what the model's eager path computes. Memory grows as N * L * d, not N * H * L**2.

Grouped-query attention (Llama, Mistral, Qwen2, SmolLM2): H query heads share
H_kv key/value heads, query head h reading key/value head h // (H // H_kv)
(transformers' ``repeat_kv``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import torch
from torch import nn

from ..attention.cancellation import check_cancelled

RECORDER: Final = "attnviz_recorder"
"""The name AttnViz's attention function is registered under (``attn_implementation``)."""

QUERY_CHUNK: Final = 512
"""Query rows per call of SDPA in a recorded forward pass of a longer input whose mask is
not plainly causal (padding, a sliding window, an encoder's): the rows are independent
(the explicit mask says what each sees), and the computation is checked for cancellation
between chunks. A plainly causal mask runs as one call with SDPA's causal flag instead."""

POSITION_BIAS: Final = "position_bias"
"""T5's relative position bias (B or 1, H, L_q, L_k), added to the scores before the mask."""

EagerAttention = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]


@dataclass(frozen=True)
class AttentionCall:
    """What one attention layer received in one forward pass.

    Attributes:
        module: the model's attention module (its class says which eager function to use).
        query: (B, H, L_q, d_k) query states, after rotary embeddings where the model has them.
        key: (B, H_kv, L_k, d_k) key states (H_kv = H without grouped-query attention).
        value: (B, H_kv, L_k, d_v) value states, the value projection's bias included
            (d_v = d_k in every model here); the norm-based method reads them.
        attention_mask: the mask the model built, as given: (B, 1, L_q, L_k) additive
            float (0 to attend, the dtype's lowest to mask), or None.
        scaling: the factor the scores are multiplied by (usually d_k**-0.5), or None for
            the function's default.
        kwargs: the other keyword arguments of the call (``sliding_window``, ``softcap``, ...).
    """

    module: nn.Module
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    attention_mask: torch.Tensor | None
    scaling: float | None
    kwargs: dict[str, Any]

    @property
    def num_heads(self) -> int:
        """H, the query heads."""
        return int(self.query.shape[1])

    @property
    def num_key_value_heads(self) -> int:
        """H_kv, the key/value heads the query heads share."""
        return int(self.key.shape[1])

    @property
    def group_size(self) -> int:
        """How many query heads share each key/value head (H // H_kv)."""
        return self.num_heads // self.num_key_value_heads

    def query_heads(self, first: int, count: int) -> slice:
        """The query heads of key/value heads first .. first + count - 1.

        Raises:
            IndexError: key/value heads beyond H_kv (or none).
        """
        if not (first >= 0 and count >= 1 and first + count <= self.num_key_value_heads):
            raise IndexError(
                f"key/value heads {first}..{first + count - 1} are not in "
                f"0..{self.num_key_value_heads - 1}"
            )
        return slice(first * self.group_size, (first + count) * self.group_size)

    def key_value_head(self, head: int) -> int:
        """The key/value head that query head ``head`` reads (transformers' ``repeat_kv``)."""
        return head // self.group_size


@dataclass
class AttentionRecording:
    """The attention calls of the forward passes run inside :func:`record_attention`.

    Attributes:
        calls: one :class:`AttentionCall` per attention layer and forward pass, in the
            order the model ran them (layer 0 first).
    """

    calls: list[AttentionCall] = field(default_factory=list)

    def add(self, call: AttentionCall) -> None:
        """Keep one attention call (:func:`recording_attention` calls this)."""
        self.calls.append(call)

    def head_weights(self, layer: int, head: int) -> torch.Tensor:
        """Softmax weights of one head, computed by the model's own eager attention.

        Args:
            layer: index into :attr:`calls`.
            head: query head, 0 <= head < H.

        Returns:
            (B, L_q, L_k) float32 on the CPU; rows sum to 1 (masked keys 0), as the
            model's ``output_attentions`` with ``attn_implementation="eager"``.

        Raises:
            IndexError: no such layer or head.
        """
        call = self.calls[layer]
        if not 0 <= head < call.num_heads:
            raise IndexError(f"head {head} is not in 0..{call.num_heads - 1}")
        return self.group_weights(layer, call.key_value_head(head))[:, head % call.group_size]

    def group_weights(
        self, layer: int, key_value_head: int, *, query: int | None = None
    ) -> torch.Tensor:
        """The weights of the query heads that share one key/value head.

        The model's eager attention runs on that group's slice: its query heads and
        their one key/value head, which the function repeats for them (``repeat_kv``),
        so each head's weights are computed once.

        Args:
            layer: index into :attr:`calls`.
            key_value_head: 0 <= key_value_head < H_kv.
            query: only this query position's row (its query and its row of the mask),
                L_q times less work; None for every row.

        Returns:
            (B, H // H_kv, L_q, L_k) float32 on the CPU (L_q = 1 with ``query``).

        Raises:
            IndexError: no such layer or key/value head.
        """
        return self.groups_weights(layer, key_value_head, 1, query=query)

    def groups_weights(
        self, layer: int, first: int, count: int, *, query: int | None = None
    ) -> torch.Tensor:
        """The weights of ``count`` consecutive groups from key/value head ``first``, in one call.

        As :meth:`group_weights` for key/value heads first .. first + count - 1 and their
        query heads: (B, count * H // H_kv, L_q, L_k) float32 on the CPU.

        Raises:
            IndexError: no such layer, or key/value heads beyond H_kv.
        """
        call = self.calls[layer]
        heads = call.query_heads(first, count)
        check_cancelled()
        if getattr(call.module, "sinks", None) is not None and count < call.num_key_value_heads:
            # the eager function reads every head's sink from the module: all heads at once
            every = self.groups_weights(layer, 0, call.num_key_value_heads, query=query)
            return every[:, heads]
        queries = call.query[:, heads]
        key = call.key[:, first : first + count]
        mask = call.attention_mask
        kwargs = dict(call.kwargs)
        bias = kwargs.get(POSITION_BIAS)
        if isinstance(bias, torch.Tensor) and bias.shape[1] > 1:  # (B or 1, H, L_q, L_k)
            kwargs[POSITION_BIAS] = bias[:, heads]
        if query is not None:
            queries = queries[:, :, query : query + 1]
            mask = _query_row(mask, query)
            kwargs[POSITION_BIAS] = _query_row(kwargs.get(POSITION_BIAS), query)
        if kwargs.get(POSITION_BIAS) is None:
            kwargs.pop(POSITION_BIAS, None)
        with torch.inference_mode():
            _, weights = eager_attention(call.module)(
                call.module,
                queries,
                key,
                key[..., :0],  # no value columns: the output, which is not used, is empty
                mask,
                scaling=call.scaling,
                dropout=0.0,
                **kwargs,
            )
        if weights is None:
            raise RuntimeError(f"{type(call.module).__name__}'s eager attention gave no weights")
        return weights.float().cpu()

    def layer_weights(self, layer: int, *, query: int | None = None) -> torch.Tensor:
        """Every head of one layer: (B, H, L_q, L_k) float32, as :meth:`head_weights`.

        With ``query``, that position's row only (L_q = 1), as :meth:`group_weights`.
        Each group is written into the result as it comes (no concatenation, which would
        hold every group twice: 1.2 GB for SmolLM2's layer at 4096 tokens).
        """
        call = self.calls[layer]
        size = call.group_size
        first = self.group_weights(layer, 0, query=query)
        if call.num_key_value_heads == 1:
            return first
        weights = torch.empty((first.shape[0], call.num_heads, *first.shape[2:]))
        weights[:, :size] = first
        del first
        for kv in range(1, call.num_key_value_heads):
            weights[:, kv * size : (kv + 1) * size] = self.group_weights(layer, kv, query=query)
        return weights


class WeightsRecording(AttentionRecording):
    """The weights a model's own eager attention returned (``output_attentions``), kept whole.

    For the families whose attention modules compute attention themselves instead of
    calling transformers' attention interface (GPT-Neo's local and global layers with
    their unscaled scores, BLOOM's ALiBi; found at load, when a warm-up pass records no
    call, :meth:`.model.PretrainedModel.warm_up`): nothing reaches the recorder, so the
    model runs with ``output_attentions=True`` and every layer's (B, H, L_q, L_k) weights
    are kept as float32 on the CPU, exactly what transformers returns. Each call then has
    no query, key or value states (their last axis is empty, the shapes only), no mask
    and no eager function: the views of the weights work, the methods that need the
    states (the neuron view, norm-based attention, value zeroing, gradients, head
    ablation) are refused before they run. Memory grows as N x H x L**2 (the
    admission's estimate decides how long an input may be).

    Attributes:
        weights: each call's (B, H, L_q, L_k) float32 weights, in the order of ``calls``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.weights: list[torch.Tensor] = []

    def add_weights(self, module: nn.Module, weights: torch.Tensor) -> None:
        """Keep one layer's weights (B, H, L_q, L_k), any dtype or device, as float32 on the CPU."""
        kept = weights.detach().float().cpu()
        size, heads, length_q, length_k = kept.shape
        self.calls.append(
            AttentionCall(
                module=module,
                query=kept.new_empty((size, heads, length_q, 0)),
                key=kept.new_empty((size, heads, length_k, 0)),
                value=kept.new_empty((size, heads, length_k, 0)),
                attention_mask=None,
                scaling=None,
                kwargs={},
            )
        )
        self.weights.append(kept)

    def groups_weights(
        self, layer: int, first: int, count: int, *, query: int | None = None
    ) -> torch.Tensor:
        """As :meth:`AttentionRecording.groups_weights`, sliced from the kept weights (a copy)."""
        call = self.calls[layer]
        heads = call.query_heads(first, count)
        check_cancelled()
        weights = self.weights[layer][:, heads]
        if query is not None:
            weights = weights[:, :, query : query + 1]
        return weights.clone()


class StepwiseRecording(AttentionRecording):
    """The recording of one causal pass over prompt + generated tokens, taken while generating.

    Generation runs the prompt in one pass, then each new token alone with the key/value
    cache; the caller marks the end of each forward pass (:meth:`end_pass`). The prompt's
    calls are kept whole; each later call keeps only what is new: its query row, the last
    key and value (the fed token's; the cache holds the others) and its row of the mask.
    :meth:`finish` concatenates them into the prompt's number of calls over every position,
    what one causal pass over the same tokens records, so the recorded pass costs no second
    forward. Rows equal that pass's to float rounding (the cache's keys are the same
    projections of the same states).

    A pass this cannot extend marks the recording :attr:`complete` False, and the caller
    runs the pass instead: a prompt call without a mask, a call with a position bias of its
    own, a step whose query is not one token, or a step whose calls are not the prompt's
    (a hybrid model whose passes differ). The other keyword arguments are the prompt's (a
    sliding window, a softcap, sinks: the same at every step; ``position_ids``, which the
    eager functions do not read).

    Attributes:
        complete: whether :meth:`finish` gives a faithful recording.
    """

    def __init__(self) -> None:
        super().__init__()
        self.complete = True
        self._steps: list[list[AttentionCall]] | None = None  # None during the prompt's pass
        self._current: list[AttentionCall] = []

    def add(self, call: AttentionCall) -> None:
        """The prompt's calls whole; later calls cut to what the fed token adds."""
        if call.kwargs.get(POSITION_BIAS) is not None or call.attention_mask is None:
            self.complete = False
        if self._steps is None:
            self.calls.append(call)
            return
        if call.query.shape[2] != 1:
            self.complete = False
        mask = call.attention_mask
        self._current.append(  # copies: a view would keep the whole key/value cache alive
            AttentionCall(
                module=call.module,
                query=call.query[:, :, -1:].clone(),
                key=call.key[:, :, -1:].clone(),
                value=call.value[:, :, -1:].clone(),
                attention_mask=None if mask is None else mask[..., -1:, :].clone(),
                scaling=call.scaling,
                kwargs={},
            )
        )

    def end_pass(self) -> None:
        """Mark the end of one forward pass: the prompt's, then each fed token's."""
        if self._steps is None:
            self._steps = []
            self.complete = self.complete and bool(self.calls)
            return
        modules = [call.module for call in self.calls]
        if [call.module for call in self._current] != modules:
            self.complete = False
        self._steps.append(self._current)
        self._current = []

    def finish(self) -> AttentionRecording:
        """The ``num_layers`` calls of one causal pass over every position.

        Raises:
            ValueError: not :attr:`complete`, or no prompt pass was recorded.
        """
        if not self.complete or self._steps is None or self._current:
            raise ValueError("the generation's calls cannot be joined into one pass")
        joined = AttentionRecording()
        masks: dict[int, torch.Tensor] = {}  # one joined mask per mask the layers shared
        firsts: list[AttentionCall | None] = list(self.calls)
        self.calls = []
        for layer in range(len(firsts)):
            first = firsts[layer]
            assert first is not None
            firsts[layer] = None  # its states are freed once joined: one layer held twice
            steps = [step[layer] for step in self._steps]
            mask = first.attention_mask
            if mask is None:
                raise ValueError("the prompt's pass had no mask")
            shared = mask.untyped_storage().data_ptr()  # each call's mask is its own view
            if shared in masks:
                full = masks[shared]
            else:
                full = masks[shared] = self._joined_mask(mask, steps)
            joined.add(
                AttentionCall(
                    module=first.module,
                    query=torch.cat([first.query, *(s.query for s in steps)], dim=2),
                    key=torch.cat([first.key, *(s.key for s in steps)], dim=2),
                    value=torch.cat([first.value, *(s.value for s in steps)], dim=2),
                    attention_mask=full,
                    scaling=first.scaling,
                    kwargs=first.kwargs,
                )
            )
            del first
        self._steps = []  # the pieces are in ``joined`` now
        return joined

    @staticmethod
    def _joined_mask(mask: torch.Tensor, steps: list[AttentionCall]) -> torch.Tensor:
        """The prompt's (…, L, L) mask and each step's row, as one (…, L + T, L + T) mask."""
        length = mask.shape[-1] + len(steps)
        full = torch.full(
            (*mask.shape[:-2], length, length),
            False if mask.dtype == torch.bool else torch.finfo(mask.dtype).min,
            dtype=mask.dtype,
            device=mask.device,
        )
        prompt = mask.shape[-1]
        full[..., :prompt, :prompt] = mask
        for i, step in enumerate(steps):
            assert step.attention_mask is not None
            row = step.attention_mask
            full[..., prompt + i : prompt + i + 1, : row.shape[-1]] = row
        return full


@dataclass(frozen=True)
class Neuron:
    """One query's attention in one head, step by step (BertViz's neuron view).

    From Vaswani et al. 2017, eq. 1 (the seeds' tutorial 001): weights =
    softmax(q . k * scaling + bias), where the scaling is usually 1 / sqrt(d_k).

    Attributes:
        query: (d_k,) float32, the query vector q (after rotary embeddings, if any).
        keys: (L_k, d_k) float32, every key vector k of the head's key/value head.
        scores: (L_k,) float32, q . k.
        scaling: the factor the model multiplies the scores by.
        scaled_scores: (L_k,) float32, q . k * scaling.
        masked: (L_k,) bool, the keys the model's mask excludes (weight 0).
        weights: (L_k,) float32, the softmax weights by the model's own eager attention
            (which also adds what a model adds beyond the mask: T5's position bias).
        key_value_head: the key/value head the query head reads.
    """

    query: torch.Tensor
    keys: torch.Tensor
    scores: torch.Tensor
    scaling: float
    scaled_scores: torch.Tensor
    masked: torch.Tensor
    weights: torch.Tensor
    key_value_head: int


def neuron(recording: AttentionRecording, layer: int, head: int, query: int) -> Neuron:
    """:class:`Neuron` of query position ``query`` in ``head`` of call ``layer`` (input 0).

    Raises:
        IndexError: no such layer, head or position.
    """
    call = recording.calls[layer]
    if not 0 <= head < call.num_heads:
        raise IndexError(f"head {head} is not in 0..{call.num_heads - 1}")
    if not 0 <= query < call.query.shape[2]:
        raise IndexError(f"query {query} is not in 0..{call.query.shape[2] - 1}")
    kv = call.key_value_head(head)
    q = call.query[0, head, query].float().cpu()
    keys = call.key[0, kv].float().cpu()
    scores = keys @ q
    scaling = call.scaling if call.scaling is not None else q.shape[0] ** -0.5
    mask = _query_row(call.attention_mask, query)
    if mask is None:
        masked = torch.zeros(keys.shape[0], dtype=torch.bool)
    else:
        # The mask as given: additive floats (the dtype's lowest masks) or booleans.
        row = mask.reshape(-1, mask.shape[-1])[0].cpu()
        lowest = torch.finfo(row.dtype).min / 2 if row.is_floating_point() else None
        masked = row <= lowest if lowest is not None else ~row  # -inf or the dtype's lowest
    weights = recording.group_weights(layer, kv, query=query)[0, head % call.group_size, 0]
    return Neuron(
        query=q,
        keys=keys,
        scores=scores,
        scaling=float(scaling),
        scaled_scores=scores * scaling,
        masked=masked,
        weights=weights,
        key_value_head=kv,
    )


def _query_row(tensor: torch.Tensor | None, query: int) -> torch.Tensor | None:
    """Row ``query`` of a (..., L_q, L_k) mask or bias; one broadcast over rows stays as is."""
    if tensor is None or tensor.shape[-2] == 1:
        return tensor
    return tensor[..., query : query + 1, :]


_active: ContextVar[AttentionRecording | None] = ContextVar("attnviz_recording", default=None)
_ablated: ContextVar[dict[int, tuple[int, ...]] | None] = ContextVar(
    "attnviz_ablated", default=None
)
_captured: ContextVar[GradientCapture | None] = ContextVar("attnviz_gradients", default=None)
_zeroed: ContextVar[tuple[int, torch.Tensor] | None] = ContextVar("attnviz_zeroed", default=None)
_observer: ContextVar[AttentionObserver | None] = ContextVar("attnviz_observer", default=None)

OBSERVED_CHUNK_FLOATS: Final = 2**23
"""About how many weights (32 MB of float32) one query chunk of an observed layer holds:
512 rows of SmolLM2's 9 heads at 1,820 keys; fewer rows for longer inputs."""


class AttentionObserver(Protocol):
    """What an observed forward pass hands its attention weights to, chunk by chunk.

    Inside :func:`observe_attention`, an attention call the observer :meth:`wants`
    computes its weights with the model's *own* eager attention, in chunks of query rows
    (:meth:`row_chunks`), uses them for the layer's output, and hands each chunk to
    :meth:`take` before computing the next: no (B, H, L_q, L_k) tensor of a whole layer
    exists, and the view being built (pooled maps, statistics) grows as the pass runs.
    """

    def wants(self, module: nn.Module) -> bool:
        """Whether this call (the module's, in the pass's order) is observed."""

    def row_chunks(self, length_q: int, length_k: int, num_heads: int) -> list[tuple[int, int]]:
        """The [start, stop) query rows of each chunk, in order, covering 0..length_q."""

    def take(self, start: int, stop: int, weights: torch.Tensor) -> None:
        """One chunk of weights: (B, H, stop - start, L_k'), float, in the model's dtype.

        L_k' <= L_k: the keys past L_k' are masked for every row of the chunk (weight 0).
        """

    def layer_done(self) -> None:
        """The observed call's last chunk has been taken."""


@dataclass
class GradientCapture:
    """Each attention call's weights and head gates, in the autograd graph of a forward pass.

    Inside :func:`capture_gradients` every attention layer runs the model's own eager
    attention with autograd on (not SDPA), so that its softmax weights A (B, H, L_q, L_k)
    are a tensor of the graph, and multiplies each head's output by a gate ξ_h (Michel et
    al., NeurIPS 2019, "Are Sixteen Heads Really Better than One?", eq. 3): 1 for a head
    that is on, 0 for one :func:`ablate_heads` switched off. ``torch.autograd.grad(target,
    weights + gates)`` then gives ∂target/∂A and ∂target/∂ξ_h.

    Attributes:
        weights: A of each call, in the order the model ran them (layer 0 first).
        gates: ξ of each call, (H,) leaf tensors with ``requires_grad``.
    """

    weights: list[torch.Tensor] = field(default_factory=list)
    gates: list[torch.Tensor] = field(default_factory=list)


def eager_attention(module: nn.Module) -> EagerAttention:
    """The ``eager_attention_forward`` of the modeling file that defines ``module``.

    Raises:
        TypeError: that file has none (the weights cannot be recomputed).
    """
    modeling = importlib.import_module(type(module).__module__)
    function = getattr(modeling, "eager_attention_forward", None)
    if function is None:
        raise TypeError(
            f"{type(module).__name__} ({modeling.__name__}) has no eager_attention_forward: "
            "its weights cannot be recomputed"
        )
    return function  # type: ignore[no-any-return]


def recording_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The registered attention function: keep the call's inputs, then run SDPA.

    Shapes as transformers passes them: query (B, H, L_q, d_k), key and value
    (B, H_kv, L_k, d_k). Outside :func:`record_attention` nothing is kept. Inside
    :func:`capture_gradients` the model's eager attention runs instead, its weights and
    gated heads kept for a backward pass (:class:`GradientCapture`).

    Returns:
        attn_output (B, L_q, H, d_k), as transformers' ``sdpa_attention_forward`` (the
        heads :func:`ablate_heads` names zeroed), and no weights.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    check_cancelled()  # between layers: a given-up request stops here
    recording = _active.get()
    if recording is not None:
        recording.add(
            AttentionCall(
                module=module,
                query=query.detach(),
                key=key.detach(),
                value=value.detach(),
                attention_mask=None if attention_mask is None else attention_mask.detach(),
                scaling=scaling,
                kwargs=dict(kwargs),
            )
        )
    zeroed = _zeroed.get()
    if zeroed is not None and zeroed[0] == id(module):  # value zeroing: row b loses token t_b
        value = value.clone()
        value[torch.arange(value.shape[0]), :, zeroed[1].to(value.device)] = 0
    ablated = _ablated.get()
    heads = None if ablated is None else ablated.get(id(module))
    capture = _captured.get()
    if capture is not None:
        return _gated_attention(
            capture, heads or (), module, query, key, value, attention_mask, scaling, kwargs
        )
    observer = _observer.get()
    if observer is not None and not heads and observer.wants(module):
        return _observed_attention(
            observer, module, query, key, value, attention_mask, scaling, kwargs
        ), None
    if needs_eager(module, kwargs):  # what SDPA cannot compute: the model's own eager
        output = _observed_attention(
            _Unobserved(), module, query, key, value, attention_mask, scaling, kwargs
        )
        if heads:
            output = output.clone()
            output[:, :, list(heads)] = 0
        return output, None
    bias = kwargs.pop(POSITION_BIAS, None)
    if bias is not None:  # SDPA takes it as part of the additive mask
        attention_mask = bias if attention_mask is None else bias + attention_mask
    length = int(query.shape[2])
    if bias is None and _plainly_causal(module, query, key, attention_mask, kwargs):
        # The mask is exactly causal: SDPA's own causal flag gives the same output and lets
        # its kernel skip the masked half (a third less time for SmolLM2 at 2,048 tokens).
        output, _ = sdpa_attention_forward(
            module, query, key, value, None, scaling=scaling, dropout=dropout, **kwargs
        )
    elif attention_mask is None or length <= QUERY_CHUNK:
        output, _ = sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    else:  # rows are independent: chunks of queries, a cancellation check between them
        parts = []
        for start in range(0, length, QUERY_CHUNK):
            check_cancelled()
            rows = slice(start, start + QUERY_CHUNK)
            mask = attention_mask if attention_mask.shape[-2] == 1 else attention_mask[..., rows, :]
            part, _ = sdpa_attention_forward(
                module, query[:, :, rows], key, value, mask, scaling=scaling, dropout=dropout,
                **kwargs,
            )  # fmt: skip
            parts.append(part)
        output = torch.cat(parts, dim=1)
    if heads:  # (B, L_q, H, d_v): those heads add nothing to the output projection
        output = output.clone()
        output[:, :, list(heads)] = 0
    return output, None


def needs_eager(module: nn.Module, kwargs: dict[str, Any]) -> bool:
    """Whether a call needs the model's eager attention: SDPA has no such option.

    Logit soft-capping (Gemma 2's ``softcap``: tanh(scores / cap) * cap) and learned
    attention sinks (gpt-oss's ``module.sinks``: one more logit per head in the softmax,
    dropped after it) change the weights in ways SDPA cannot express.
    """
    return kwargs.get("softcap") is not None or getattr(module, "sinks", None) is not None


class _Unobserved:
    """An observer that keeps nothing: the eager attention of a call SDPA cannot run."""

    def wants(self, module: nn.Module) -> bool:
        return True

    def row_chunks(self, length_q: int, length_k: int, num_heads: int) -> list[tuple[int, int]]:
        return [
            (start, min(length_q, start + QUERY_CHUNK)) for start in range(0, length_q, QUERY_CHUNK)
        ]

    def take(self, start: int, stop: int, weights: torch.Tensor) -> None:
        return None

    def layer_done(self) -> None:
        return None


def _observed_attention(
    observer: AttentionObserver,
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None,
    kwargs: dict[str, Any],
) -> torch.Tensor:
    """One attention call by the model's eager attention in query chunks, weights observed.

    Each chunk of rows runs the module's own ``eager_attention_forward`` (its softcap,
    sinks, scaling and position bias included) with the chunk's rows of the mask and of
    any position bias; keys that the mask hides from every row of the chunk (the future,
    in a causal layer) are left out of it. Rows are independent, so the output equals
    one call's (eager attention's, to float rounding).

    Returns:
        attn_output (B, L_q, H, d_v).
    """
    eager = eager_attention(module)
    length_q, length_k = int(query.shape[2]), int(key.shape[2])
    bias = kwargs.get(POSITION_BIAS)
    per_row = attention_mask is not None and attention_mask.shape[-2] > 1
    parts = []
    for start, stop in observer.row_chunks(length_q, length_k, int(query.shape[1])):
        check_cancelled()
        keys = length_k
        if per_row:  # the last key any row of the chunk sees (chunk by chunk: no L x L copy)
            assert attention_mask is not None
            rows = attention_mask[..., start:stop, :]
            seen = rows if rows.dtype == torch.bool else rows > torch.finfo(rows.dtype).min / 2
            columns = seen.reshape(-1, length_k).any(dim=0).nonzero()
            keys = max(1, int(columns[-1]) + 1) if columns.numel() else 1
        mask = attention_mask
        if mask is not None:
            mask = mask if mask.shape[-2] == 1 else mask[..., start:stop, :]
            mask = mask[..., :keys]
        chunk_kwargs = dict(kwargs)
        if isinstance(bias, torch.Tensor):
            rows = bias if bias.shape[-2] == 1 else bias[..., start:stop, :]
            chunk_kwargs[POSITION_BIAS] = rows[..., :keys]
        output, weights = eager(
            module,
            query[:, :, start:stop],
            key[:, :, :keys],
            value[:, :, :keys],
            mask,
            scaling=scaling,
            dropout=0.0,
            **chunk_kwargs,
        )
        if weights is None:
            raise RuntimeError(f"{type(module).__name__}'s eager attention gave no weights")
        observer.take(start, stop, weights)
        parts.append(output)
        del weights
    observer.layer_done()
    return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]


def _plainly_causal(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    mask: torch.Tensor | None,
    kwargs: dict[str, Any],
) -> bool:
    """Whether ``mask`` is exactly the causal mask of a causal module's square call.

    No padding, no sliding window shorter than the input: key j is seen by query i iff
    j <= i. The verdict is kept on the mask object, which transformers hands to every
    layer, so it is computed once per forward pass.
    """
    length = int(query.shape[2])
    if mask is None or length < 2 or int(key.shape[2]) != length:
        return False
    if not kwargs.get("is_causal", getattr(module, "is_causal", False)):
        return False
    verdict = getattr(mask, "_attnviz_causal", None)
    if verdict is None:
        seen = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
        causal = torch.ones(length, length, dtype=torch.bool, device=mask.device).tril_()
        verdict = seen.shape[-2:] == causal.shape and bool((seen == causal).all())
        mask._attnviz_causal = verdict  # type: ignore[attr-defined]
    return bool(verdict)


def _gated_attention(
    capture: GradientCapture,
    heads_off: tuple[int, ...],
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None,
    kwargs: dict[str, Any],
) -> tuple[torch.Tensor, None]:
    """One attention call by the model's eager attention, weights in the graph, heads gated.

    Returns:
        attn_output (B, L_q, H, d_v) with head h multiplied by ξ_h, and no weights.
    """
    output, weights = eager_attention(module)(
        module, query, key, value, attention_mask, scaling=scaling, dropout=0.0, **kwargs
    )
    if weights is None:
        raise RuntimeError(f"{type(module).__name__}'s eager attention gave no weights")
    capture.weights.append(weights)
    gate = torch.ones(output.shape[2], dtype=output.dtype, device=output.device)
    gate[list(heads_off)] = 0
    gate.requires_grad_(True)
    capture.gates.append(gate)
    return output * gate[:, None], None


def use_recorder(model: nn.Module) -> None:
    """Make ``model`` call :func:`recording_attention` in every attention layer.

    Registers the function (and transformers' eager mask builder, so that every layer
    gets an explicit (B, 1, L_q, L_k) mask rather than SDPA's implicit causal flag) under
    :data:`RECORDER`, then sets the model's ``attn_implementation`` to it. Every module
    of the model also checks, before it runs, whether its computation was given up
    (:func:`attnviz.attention.cancellation.check_cancelled`): a pass over 4,000 tokens
    then stops within one projection's time (a tenth of a second), not one layer's.

    Raises:
        ValueError: transformers' own, when the model's class does not support the
            attention interface.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(RECORDER, recording_attention)
    AttentionMaskInterface.register(RECORDER, eager_mask)
    model.set_attn_implementation(RECORDER)  # type: ignore[operator]
    for module in model.modules():
        module.register_forward_pre_hook(_stop_if_cancelled)


def _stop_if_cancelled(module: nn.Module, args: Any) -> None:
    """A forward pre-hook: :func:`check_cancelled` before every module runs."""
    check_cancelled()


@contextmanager
def ablate_heads(heads: dict[int, tuple[int, ...]] | None) -> Iterator[None]:
    """Switch heads off in the forward passes run inside the block (head ablation).

    Args:
        heads: ``id(attention module)`` -> the query heads whose output is zeroed before the
            output projection (Michel et al., NeurIPS 2019, "Are Sixteen Heads Really Better
            than One?", mask ξ_h = 0); None or empty switches nothing off.

    The heads' weights are still recorded: what they would have attended to.
    """
    token = _ablated.set(heads or None)
    try:
        yield
    finally:
        _ablated.reset(token)


@contextmanager
def zero_values(module: nn.Module, tokens: torch.Tensor) -> Iterator[None]:
    """Zero one key token's value vector per batch row in ``module``'s attention (value zeroing).

    Args:
        module: the attention module whose calls are changed (others run as they are).
        tokens: (B,) int64: batch row b has key token ``tokens[b]``'s value states set to
            0 in every key/value head (Mohebbi et al., EACL 2023).
    """
    token = _zeroed.set((id(module), tokens))
    try:
        yield
    finally:
        _zeroed.reset(token)


@contextmanager
def observe_attention(observer: AttentionObserver | None) -> Iterator[None]:
    """Hand the attention weights of the passes inside the block to ``observer``.

    See :class:`AttentionObserver`; None observes nothing. Context-local, as
    :func:`record_attention`.
    """
    token = _observer.set(observer)
    try:
        yield
    finally:
        _observer.reset(token)


@contextmanager
def capture_gradients() -> Iterator[GradientCapture]:
    """Run the attention layers of the forward passes inside the block for a backward pass.

    See :class:`GradientCapture`; run the model with autograd on (not in
    ``torch.inference_mode``). Context-local, as :func:`record_attention`.
    """
    capture = GradientCapture()
    token = _captured.set(capture)
    try:
        yield capture
    finally:
        _captured.reset(token)


@contextmanager
def record_attention(
    recording: AttentionRecording | None = None,
) -> Iterator[AttentionRecording]:
    """Keep the attention calls of the forward passes run inside the block.

    The recording is context-local (a ContextVar): forward passes in other threads or
    tasks are not mixed in. The model must have gone through :func:`use_recorder`.

    Args:
        recording: where the calls go (a :class:`StepwiseRecording` while generating);
            default a new :class:`AttentionRecording`.
    """
    recording = AttentionRecording() if recording is None else recording
    token = _active.set(recording)
    try:
        yield recording
    finally:
        _active.reset(token)
